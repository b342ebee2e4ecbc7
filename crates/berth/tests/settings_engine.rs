//! End-to-end tests of the container settings ECS passes to Docker (`linuxParameters`, ...),
//! each observed where a user would see it: from inside the running container, which exits 42
//! when the setting took effect (as the ECS agent's functional tests do), or in Docker's inspect.
//! Also the stop reason of a container the kernel's OOM killer ended.
//!
//! Run only through `scripts/test -p berth --test settings_engine` (it sets up the test image).

use berth_testkit::berth_run::{BerthRun, test_container};
use berth_testkit::{FamilyGuard, unique_name};
use serde_json::{Value, json};

/// A finished `berth run` of one container.
struct Run {
    stderr: String,
    lines: Vec<Value>,
    _data_dir: tempfile::TempDir,
    _guard: FamilyGuard,
}

impl Run {
    /// The summary entry of container `c`.
    fn container(&self) -> Value {
        self.lines
            .iter()
            .find(|l| l["event"] == "summary")
            .and_then(|s| {
                s["containers"]
                    .as_array()
                    .and_then(|cs| cs.first().cloned())
            })
            .unwrap_or_else(|| panic!("no summary with a container; stderr:\n{}", self.stderr))
    }
}

/// Runs one container `c` with `script` and the extra fields of `settings` merged in.
fn run(prefix: &str, script: &str, settings: Value) -> Run {
    let family = unique_name(prefix);
    let mut c = test_container("c", script);
    if let (Some(c), Some(extra)) = (c.as_object_mut(), settings.as_object()) {
        for (k, v) in extra {
            c.insert(k.clone(), v.clone());
        }
    }
    let def = json!({"family": family, "containerDefinitions": [c]});
    let data_dir = tempfile::tempdir().expect("temp dir");
    let file = data_dir.path().join("task.json");
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), file, &def)
        .prefer_cached()
        .data_dir(data_dir.path())
        .output();
    Run {
        stderr: out.stderr.clone(),
        lines: out.lines(),
        _data_dir: data_dir,
        _guard: FamilyGuard(family),
    }
}

/// The container exited 42: what the script checked held inside it.
fn assert_42(run: &Run) {
    let c = run.container();
    assert_eq!(
        c["exitCode"], 42,
        "container: {c:#}\nstderr:\n{}",
        run.stderr
    );
}

#[tokio::test]
async fn init_process_enabled_makes_docker_init_pid_1() {
    let r = run(
        "init",
        r#"[ "$(cat /proc/1/comm)" = docker-init ] && exit 42; cat /proc/1/comm; exit 1"#,
        json!({"linuxParameters": {"initProcessEnabled": true}}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn without_init_the_command_is_pid_1() {
    let r = run(
        "noinit",
        r#"[ "$(cat /proc/1/comm)" = sh ] && exit 42; exit 1"#,
        json!({}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn capabilities_are_added_and_dropped_in_cap_eff() {
    // NET_ADMIN is bit 12 (not in Docker's default set), CHOWN bit 0 (in it).
    let script = r#"hex=$(grep CapEff /proc/self/status | sed 's/.*:[[:space:]]*//')
        v=$((0x$hex))
        [ $(( (v >> 12) & 1 )) = 1 ] && [ $(( v & 1 )) = 0 ] && exit 42
        echo "CapEff $hex"; exit 1"#;
    let r = run(
        "caps",
        script,
        json!({"linuxParameters": {"capabilities": {"add": ["NET_ADMIN"], "drop": ["CHOWN"]}}}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn tmpfs_is_mounted_with_its_size_and_options() {
    let script = r#"mount | grep ' /scratch type tmpfs ' | grep 'size=16384k' | grep -q 'mode=1770' && exit 42
        mount; exit 1"#;
    let r = run(
        "tmpfs",
        script,
        json!({"linuxParameters": {"tmpfs": [{"containerPath": "/scratch", "size": 16, "mountOptions": ["mode=1770"]}]}}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn shared_memory_size_sizes_dev_shm() {
    let script = r#"mount | grep ' /dev/shm type tmpfs ' | grep -q 'size=32768k' && exit 42
        mount; exit 1"#;
    let r = run(
        "shm",
        script,
        json!({"linuxParameters": {"sharedMemorySize": 32}}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn device_is_present_at_its_container_path() {
    let script = r#"[ -c /dev/berth-null ] && echo x > /dev/berth-null && exit 42
        ls -l /dev; exit 1"#;
    let r = run(
        "device",
        script,
        json!({"linuxParameters": {"devices": [{"hostPath": "/dev/null", "containerPath": "/dev/berth-null", "permissions": ["read", "write"]}]}}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn max_swap_and_swappiness_reach_the_memory_cgroup() {
    // 64 MiB memory + 32 MiB swap = 96 MiB memory+swap. cgroup v1 (this host) shows it in
    // memory.memsw.limit_in_bytes; cgroup v2 shows the swap alone in memory.swap.max.
    let script = r#"m=/sys/fs/cgroup/memory
        if [ -f $m/memory.memsw.limit_in_bytes ]; then
            [ "$(cat $m/memory.memsw.limit_in_bytes)" = 100663296 ] && [ "$(cat $m/memory.swappiness)" = 10 ] && exit 42
            cat $m/memory.memsw.limit_in_bytes $m/memory.swappiness
        else
            [ "$(cat /sys/fs/cgroup/memory.swap.max)" = 33554432 ] && exit 42
            cat /sys/fs/cgroup/memory.swap.max
        fi
        exit 1"#;
    let r = run(
        "swap",
        script,
        json!({"memory": 64, "linuxParameters": {"maxSwap": 32, "swappiness": 10}}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn a_container_over_its_memory_limit_stops_with_the_oom_reason() {
    // `tail` keeps the last line in memory; /dev/zero has no newline, so it grows until the
    // kernel's OOM killer ends it at the 16 MiB limit (no swap: maxSwap 0).
    let r = run(
        "oom",
        "exec tail /dev/zero",
        json!({"memory": 16, "linuxParameters": {"maxSwap": 0}}),
    );
    let c = r.container();
    assert_eq!(
        c["exitCode"], 137,
        "container: {c:#}\nstderr:\n{}",
        r.stderr
    );
    assert_eq!(
        c["reason"], "OutOfMemoryError: Container killed due to memory usage",
        "container: {c:#}"
    );
}

#[tokio::test]
async fn dns_servers_and_search_domains_are_in_resolv_conf() {
    let script = r#"grep -q '^nameserver 10.0.0.2$' /etc/resolv.conf && grep -q '^nameserver 10.0.0.3$' /etc/resolv.conf \
        && grep -q '^search corp.example.com lab.example.com$' /etc/resolv.conf && exit 42
        cat /etc/resolv.conf; exit 1"#;
    let r = run(
        "dns",
        script,
        json!({"dnsServers": ["10.0.0.2", "10.0.0.3"], "dnsSearchDomains": ["corp.example.com", "lab.example.com"]}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn extra_hosts_are_in_etc_hosts() {
    let script = r#"grep -Eq '^10\.1\.2\.3[[:space:]]+berth-extra$' /etc/hosts && exit 42
        cat /etc/hosts; exit 1"#;
    let r = run(
        "hosts",
        script,
        json!({"extraHosts": [{"hostname": "berth-extra", "ipAddress": "10.1.2.3"}]}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn system_controls_are_set_in_the_container() {
    let script = r#"[ "$(cat /proc/sys/net/ipv4/tcp_keepalive_time)" = 321 ] && [ "$(cat /proc/sys/kernel/shmmni)" = 1234 ] && exit 42
        cat /proc/sys/net/ipv4/tcp_keepalive_time /proc/sys/kernel/shmmni; exit 1"#;
    let r = run(
        "sysctl",
        script,
        json!({"systemControls": [
            {"namespace": "net.ipv4.tcp_keepalive_time", "value": "321"},
            {"namespace": "kernel.shmmni", "value": "1234"}
        ]}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn no_new_privileges_is_set_on_the_process() {
    let script = r#"grep -Eq '^NoNewPrivs:[[:space:]]+1$' /proc/self/status && exit 42
        grep NoNewPrivs /proc/self/status; exit 1"#;
    let r = run(
        "nnp",
        script,
        json!({"dockerSecurityOptions": ["no-new-privileges"]}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn pseudo_terminal_gives_a_tty() {
    let r = run(
        "tty",
        "[ -t 0 ] && [ -t 1 ] && exit 42; exit 1",
        json!({"pseudoTerminal": true}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn interactive_keeps_stdin_open() {
    // Without `interactive` stdin is /dev/null; with it, a pipe Docker keeps open.
    let r = run(
        "stdin",
        "ls -l /proc/self/fd/0 | grep -q 'pipe:' && exit 42; ls -l /proc/self/fd/0; exit 1",
        json!({"interactive": true}),
    );
    assert_42(&r);
}

#[tokio::test]
async fn disable_networking_leaves_only_loopback() {
    let r = run(
        "nonet",
        r#"[ "$(ls /sys/class/net)" = lo ] && exit 42; ls /sys/class/net; exit 1"#,
        json!({"disableNetworking": true}),
    );
    assert_42(&r);
}

/// Runs one container `c` with `script` in a task with these task-level fields.
fn run_task_with(prefix: &str, script: &str, task_fields: Value) -> Run {
    let family = unique_name(prefix);
    let mut def = json!({"family": family, "containerDefinitions": [test_container("c", script)]});
    if let (Some(d), Some(extra)) = (def.as_object_mut(), task_fields.as_object()) {
        for (k, v) in extra {
            d.insert(k.clone(), v.clone());
        }
    }
    let data_dir = tempfile::tempdir().expect("temp dir");
    let file = data_dir.path().join("task.json");
    let out = BerthRun::new(env!("CARGO_BIN_EXE_berth"), file, &def)
        .prefer_cached()
        .data_dir(data_dir.path())
        .output();
    Run {
        stderr: out.stderr.clone(),
        lines: out.lines(),
        _data_dir: data_dir,
        _guard: FamilyGuard(family),
    }
}

#[tokio::test]
async fn pid_mode_host_sees_the_host_processes() {
    // This test process is on the host; in the host's PID namespace the container sees it.
    let pid = std::process::id();
    let script =
        format!("grep -q settings_engine /proc/{pid}/cmdline && exit 42; ls /proc; exit 1");
    let r = run_task_with("pidhost", &script, json!({"pidMode": "host"}));
    assert_42(&r);
}

#[tokio::test]
async fn ipc_mode_host_shares_the_host_ipc_namespace() {
    let host_ns = std::fs::read_link("/proc/self/ns/ipc").expect("read /proc/self/ns/ipc");
    let host_ns = host_ns.display();
    let script = format!(
        r#"[ "$(ls -l /proc/self/ns/ipc | sed 's/.*-> //')" = "{host_ns}" ] && exit 42; ls -l /proc/self/ns/ipc; exit 1"#
    );
    let r = run_task_with("ipchost", &script, json!({"ipcMode": "host"}));
    assert_42(&r);
}

#[tokio::test]
async fn ipc_mode_none_mounts_no_dev_shm() {
    let r = run_task_with(
        "ipcnone",
        "mount | grep -q ' /dev/shm ' || exit 42; mount; exit 1",
        json!({"ipcMode": "none"}),
    );
    assert_42(&r);
}
