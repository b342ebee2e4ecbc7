//! Unit tests for parsing and validation: one test (or more) per rule, asserting exact paths and
//! messages.

use super::checker::{key_path, parent_path};
use super::rules::{CONTAINER, edit_distance, unknown_field_message};
use super::*;
use crate::types::{
    Condition, Dependency, DockerVolumeConfiguration, EfsVolumeConfiguration, EnvVar, GpuRequest,
    HealthCheck, MountPoint, NetworkMode, PortMapping, Protocol, Ulimit, Volume, VolumeFrom,
    VolumeKind, VolumeScope,
};
use std::collections::BTreeMap;

/// The problems of an invalid definition, as `PATH: message` lines.
fn problems(json: &str) -> Vec<String> {
    match parse(json) {
        Ok(parsed) => panic!("expected problems, got a valid definition: {parsed:#?}"),
        Err(invalid) => {
            assert!(!invalid.problems.is_empty());
            invalid.problems.iter().map(ToString::to_string).collect()
        }
    }
}

fn valid(json: &str) -> Parsed {
    match parse(json) {
        Ok(parsed) => parsed,
        Err(invalid) => panic!("expected a valid definition, got {:#?}", invalid.problems),
    }
}

fn warnings(json: &str) -> Vec<String> {
    valid(json)
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A task named "t" with these container objects (comma-separated JSON).
fn task(containers: &str) -> String {
    format!(r#"{{"family": "t", "containerDefinitions": [{containers}]}}"#)
}

/// A task with extra task-level fields (a JSON fragment ending without a comma).
fn task_with(extra: &str, containers: &str) -> String {
    format!(r#"{{"family": "t", {extra}, "containerDefinitions": [{containers}]}}"#)
}

/// A container object; `extra` is a JSON fragment of more fields (may be empty).
fn c(name: &str, extra: &str) -> String {
    if extra.is_empty() {
        format!(r#"{{"name": "{name}", "image": "busybox"}}"#)
    } else {
        format!(r#"{{"name": "{name}", "image": "busybox", {extra}}}"#)
    }
}

fn one(json: &str) -> String {
    let p = problems(json);
    assert_eq!(p.len(), 1, "expected exactly one problem, got {p:#?}");
    p.into_iter().next().unwrap_or_default()
}

// --- documents ----------------------------------------------------------------------------------

#[test]
fn minimal_definition_and_defaults() {
    let parsed = valid(&task(&c("web", "")));
    assert!(parsed.warnings.is_empty());
    let def = parsed.definition;
    assert_eq!(def.family, "t");
    assert_eq!(def.revision, 0);
    assert_eq!(def.network_mode, NetworkMode::Bridge);
    assert!(def.volumes.is_empty());
    let web = &def.container_definitions[0];
    assert_eq!(web.name, "web");
    assert_eq!(web.image, "busybox");
    assert!(web.essential);
    assert_eq!(web.command, None);
    assert!(!web.privileged && !web.readonly_root_filesystem);
}

#[test]
fn malformed_json_reports_line_and_column() {
    assert_eq!(
        one("{\n  \"family\": \"t\",\n  \"containerDefinitions\": [\n}"),
        "invalid JSON at line 4, column 1: expected value"
    );
    assert_eq!(
        one(r#"{"family": "t"} x"#),
        "invalid JSON at line 1, column 17: trailing characters"
    );
}

#[test]
fn empty_input() {
    assert_eq!(
        one("  \n"),
        "the input is empty; expected a JSON task definition"
    );
}

#[test]
fn non_utf8_input() {
    let err = parse_bytes(b"{\n\"family\": \"\xff\"}").unwrap_err();
    assert_eq!(
        err.problems,
        vec![Problem::new(
            "",
            "not valid UTF-8: invalid byte at line 2, column 12 (byte offset 13)"
        )]
    );
}

#[test]
fn byte_order_mark_is_accepted() {
    let text = format!("\u{feff}{}", task(&c("web", "")));
    assert!(parse(&text).is_ok());
    assert!(parse_bytes(text.as_bytes()).is_ok());
}

#[test]
fn top_level_must_be_an_object() {
    assert_eq!(
        one("[1, 2]"),
        "expected a task definition (a JSON object), found an array"
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(
        one(&deep),
        "invalid JSON at line 1, column 128: recursion limit exceeded"
    );
}

#[test]
fn describe_task_definition_wrapper() {
    let text = format!(
        r#"{{"taskDefinition": {}, "tags": [{{"key": "a", "value": "b"}}]}}"#,
        task_with(r#""status": "ACTIVE""#, &c("web", ""))
    );
    let parsed = valid(&text);
    assert_eq!(parsed.definition.family, "t");
    assert_eq!(
        parsed
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["taskDefinition.status: not used by berth, ignored"]
    );
}

#[test]
fn wrapper_paths_are_prefixed() {
    let text = format!(
        r#"{{"taskDefinition": {}}}"#,
        task(&c("web", r#""essential": "yes""#))
    );
    assert_eq!(
        one(&text),
        r#"taskDefinition.containerDefinitions[0].essential: expected a boolean, found a string ("yes")"#
    );
}

#[test]
fn wrapper_must_hold_an_object() {
    assert_eq!(
        one(r#"{"taskDefinition": [], "tags": []}"#),
        "taskDefinition: expected a task definition object, found an array"
    );
}

// --- task fields --------------------------------------------------------------------------------

#[test]
fn family_is_required_and_well_formed() {
    assert_eq!(
        one(&format!(
            r#"{{"containerDefinitions": [{}]}}"#,
            c("web", "")
        )),
        "family: missing required field"
    );
    assert_eq!(
        one(&format!(
            r#"{{"family": "my app", "containerDefinitions": [{}]}}"#,
            c("web", "")
        )),
        r#"family: "my app" is not a valid family name; use 1 to 255 letters, digits, hyphens and underscores"#
    );
    assert_eq!(
        one(&format!(
            r#"{{"family": 7, "containerDefinitions": [{}]}}"#,
            c("web", "")
        )),
        "family: expected a string, found a number (7)"
    );
}

#[test]
fn container_definitions_required_non_empty_array() {
    assert_eq!(
        one(r#"{"family": "t"}"#),
        "containerDefinitions: missing required field"
    );
    assert_eq!(
        one(r#"{"family": "t", "containerDefinitions": []}"#),
        "containerDefinitions: must list at least one container"
    );
    assert_eq!(
        one(r#"{"family": "t", "containerDefinitions": {}}"#),
        "containerDefinitions: expected an array, found an object"
    );
    assert_eq!(
        one(r#"{"family": "t", "containerDefinitions": ["web"]}"#),
        r#"containerDefinitions[0]: expected an object, found a string ("web")"#
    );
}

#[test]
fn revision() {
    let def = valid(&task_with(r#""revision": 7"#, &c("web", ""))).definition;
    assert_eq!(def.revision, 7);
    assert_eq!(
        one(&task_with(r#""revision": 0"#, &c("web", ""))),
        "revision: must be at least 1, found 0"
    );
    assert_eq!(
        one(&task_with(r#""revision": -2"#, &c("web", ""))),
        "revision: must not be negative, found -2"
    );
    assert_eq!(
        one(&task_with(r#""revision": "3""#, &c("web", ""))),
        r#"revision: expected an integer, found a string ("3")"#
    );
}

#[test]
fn network_modes() {
    for (mode, expected) in [
        ("bridge", NetworkMode::Bridge),
        ("host", NetworkMode::Host),
        ("none", NetworkMode::None),
        ("awsvpc", NetworkMode::Awsvpc),
    ] {
        let def = valid(&task_with(
            &format!(r#""networkMode": "{mode}""#),
            &c("web", ""),
        ))
        .definition;
        assert_eq!(def.network_mode, expected);
    }
    assert_eq!(
        one(&task_with(r#""networkMode": "nat""#, &c("web", ""))),
        r#"networkMode: unknown network mode "nat"; use bridge, host, awsvpc or none"#
    );
}

#[test]
fn task_cpu_and_memory_accept_numbers_and_strings() {
    let def = valid(&task_with(r#""cpu": 256, "memory": "1 GB""#, &c("web", ""))).definition;
    assert_eq!(def.cpu.as_deref(), Some("256"));
    assert_eq!(def.memory.as_deref(), Some("1 GB"));
    let def = valid(&task_with(
        r#""cpu": "0.5 vCPU", "memory": "512""#,
        &c("web", ""),
    ))
    .definition;
    assert_eq!(def.cpu.as_deref(), Some("0.5 vCPU"));
    assert_eq!(def.memory.as_deref(), Some("512"));
    assert_eq!(
        problems(&task_with(
            r#""cpu": "lots", "memory": "-5""#,
            &c("web", "")
        )),
        vec![
            r#"cpu: "lots" is not a CPU amount; write CPU units such as "256" or vCPUs such as "0.5 vCPU""#,
            r#"memory: must not be negative, found "-5""#,
        ]
    );
    assert_eq!(
        one(&task_with(r#""memory": true"#, &c("web", ""))),
        "memory: expected a string or a number, found a boolean (true)"
    );
}

#[test]
fn task_amounts_read_as_the_ecs_api_reads_them() {
    // Units are case-insensitive, the space before them optional, the leading 0 optional (the
    // ECS documentation writes ".25 vCPU" and "0.5 GB"); the text is kept as written.
    for (cpu, memory) in [
        (".25 vCPU", ".5 GB"),
        ("0.25 vcpu", "0.5GB"),
        ("1vCPU", "1gb"),
        (" 2 VCPU ", "2 Gb"),
        ("1024", "3072"),
    ] {
        let def = valid(&task_with(
            &format!(r#""cpu": "{cpu}", "memory": "{memory}""#),
            &c("web", ""),
        ))
        .definition;
        assert_eq!(def.cpu.as_deref(), Some(cpu));
        assert_eq!(def.memory.as_deref(), Some(memory));
    }
    assert_eq!(
        problems(&task_with(
            r#""cpu": "2. vCPU", "memory": "1.5 GiB""#,
            &c("web", "")
        )),
        vec![
            r#"cpu: "2. vCPU" is not a CPU amount; write CPU units such as "256" or vCPUs such as "0.5 vCPU""#,
            r#"memory: "1.5 GiB" is not a memory amount; write MiB such as "512" or GB such as "1 GB""#,
        ]
    );
    assert_eq!(
        one(&task_with(r#""memory": ". GB""#, &c("web", ""))),
        r#"memory: ". GB" is not a memory amount; write MiB such as "512" or GB such as "1 GB""#
    );
}

// --- container fields ---------------------------------------------------------------------------

#[test]
fn container_name_and_image_required() {
    assert_eq!(
        problems(&task("{}")),
        vec![
            "containerDefinitions[0].name: missing required field",
            "containerDefinitions[0].image: missing required field",
        ]
    );
}

#[test]
fn container_name_rules() {
    assert_eq!(
        one(&task(r#"{"name": "web.1", "image": "busybox"}"#)),
        r#"containerDefinitions[0].name: "web.1" is not a valid container name; use 1 to 255 letters, digits, hyphens and underscores"#
    );
    assert_eq!(
        one(&task(r#"{"name": "", "image": "busybox"}"#)),
        r#"containerDefinitions[0].name: "" is not a valid container name; use 1 to 255 letters, digits, hyphens and underscores"#
    );
    let long = "a".repeat(256);
    assert!(one(&task(&c(&long, ""))).contains("is not a valid container name"));
    assert!(parse(&task(&c(&"a".repeat(255), ""))).is_ok());
    assert!(parse(&task(&c("Web_server-2", ""))).is_ok());
}

#[test]
fn image_rules() {
    assert_eq!(
        one(&task(r#"{"name": "web", "image": ""}"#)),
        "containerDefinitions[0].image: must not be empty"
    );
    assert_eq!(
        one(&task(r#"{"name": "web", "image": "busy box"}"#)),
        r#"containerDefinitions[0].image: "busy box" is not an image reference: it contains whitespace"#
    );
}

#[test]
fn wrong_types_name_what_was_found() {
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""essential": "yes", "privileged": 1, "command": "echo hi", "entryPoint": ["sh", 2], "dockerLabels": []"#
        ))),
        vec![
            r#"containerDefinitions[0].essential: expected a boolean, found a string ("yes")"#,
            "containerDefinitions[0].privileged: expected a boolean, found a number (1)",
            r#"containerDefinitions[0].command: expected an array, found a string ("echo hi")"#,
            "containerDefinitions[0].entryPoint[1]: expected a string, found a number (2)",
            "containerDefinitions[0].dockerLabels: expected an object, found an array",
        ]
    );
}

#[test]
fn long_strings_are_shortened_in_messages() {
    let long = "x".repeat(100);
    assert_eq!(
        one(&task(&c("web", &format!(r#""essential": "{long}""#)))),
        format!(
            r#"containerDefinitions[0].essential: expected a boolean, found a string ("{}"...)"#,
            "x".repeat(57)
        )
    );
}

#[test]
fn null_counts_as_absent() {
    let def = valid(&task(&c(
        "web",
        r#""command": null, "essential": null, "healthCheck": null"#,
    )))
    .definition;
    assert!(def.container_definitions[0].essential);
    assert_eq!(
        one(&task(r#"{"name": null, "image": "busybox"}"#)),
        "containerDefinitions[0].name: missing required field"
    );
}

#[test]
fn all_container_fields_are_read() {
    let def = valid(&task_with(
        r#""volumes": [{"name": "data"}]"#,
        &[
            c("db", r#""essential": false, "healthCheck": {"command": ["CMD", "true"]}"#),
            c(
                "web",
                r#""command": ["httpd", "-f"], "entryPoint": ["/bin/sh", "-c"],
                "environment": [{"name": "A", "value": "1"}, {"name": "B"}],
                "workingDirectory": "/srv", "user": "1000:1000",
                "dependsOn": [{"containerName": "db", "condition": "HEALTHY"}],
                "mountPoints": [{"sourceVolume": "data", "containerPath": "/data", "readOnly": true}],
                "volumesFrom": [{"sourceContainer": "db"}],
                "portMappings": [{"containerPort": 80, "hostPort": 8080, "protocol": "udp"}, {"containerPort": 81}],
                "cpu": 512, "memory": 256.0, "memoryReservation": 128, "stopTimeout": 10, "startTimeout": 60,
                "dockerLabels": {"com.example.tier": "front"}, "readonlyRootFilesystem": true,
                "privileged": true, "hostname": "web-1",
                "ulimits": [{"name": "nofile", "softLimit": 1024, "hardLimit": 4096}, {"name": "memlock", "softLimit": -1, "hardLimit": -1}],
                "logConfiguration": {"logDriver": "json-file", "options": {"max-size": "10m"}}"#,
            ),
        ]
        .join(","),
    ))
    .definition;
    let web = &def.container_definitions[1];
    assert_eq!(web.command, Some(vec!["httpd".to_owned(), "-f".to_owned()]));
    assert_eq!(
        web.entry_point,
        Some(vec!["/bin/sh".to_owned(), "-c".to_owned()])
    );
    assert_eq!(
        web.environment,
        vec![
            EnvVar {
                name: "A".into(),
                value: "1".into()
            },
            EnvVar {
                name: "B".into(),
                value: String::new()
            }
        ]
    );
    assert_eq!(web.working_directory.as_deref(), Some("/srv"));
    assert_eq!(web.user.as_deref(), Some("1000:1000"));
    assert_eq!(
        web.depends_on,
        vec![Dependency {
            container_name: "db".into(),
            condition: Condition::Healthy
        }]
    );
    assert_eq!(
        web.mount_points,
        vec![MountPoint {
            source_volume: "data".into(),
            container_path: "/data".into(),
            read_only: true
        }]
    );
    assert_eq!(
        web.volumes_from,
        vec![VolumeFrom {
            source_container: "db".into(),
            read_only: false
        }]
    );
    assert_eq!(
        web.port_mappings,
        vec![
            PortMapping {
                container_port: 80,
                host_port: Some(8080),
                protocol: Protocol::Udp
            },
            PortMapping {
                container_port: 81,
                host_port: None,
                protocol: Protocol::Tcp
            }
        ]
    );
    assert_eq!(web.cpu, Some(512));
    assert_eq!(web.memory, Some(256));
    assert_eq!(web.memory_reservation, Some(128));
    assert_eq!(web.stop_timeout, Some(10));
    assert_eq!(web.start_timeout, Some(60));
    assert_eq!(
        web.docker_labels
            .get("com.example.tier")
            .map(String::as_str),
        Some("front")
    );
    assert!(web.readonly_root_filesystem && web.privileged);
    assert_eq!(web.hostname.as_deref(), Some("web-1"));
    assert_eq!(
        web.ulimits,
        vec![
            Ulimit {
                name: "nofile".into(),
                soft_limit: 1024,
                hard_limit: 4096
            },
            Ulimit {
                name: "memlock".into(),
                soft_limit: -1,
                hard_limit: -1
            }
        ]
    );
    let log = web
        .log_configuration
        .as_ref()
        .map(|l| l.log_driver.as_str());
    assert_eq!(log, Some("json-file"));
    let db = &def.container_definitions[0];
    assert_eq!(
        db.health_check,
        Some(HealthCheck {
            command: vec!["CMD".into(), "true".into()],
            interval: 30,
            timeout: 5,
            retries: 3,
            start_period: 0
        })
    );
    assert_eq!(
        def.volumes,
        vec![Volume {
            name: "data".into(),
            kind: VolumeKind::Scratch
        }]
    );
}

#[test]
fn environment_rules() {
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""environment": [{"name": ""}, {"name": "A=B", "value": "x"}, {"value": "v"}, {"name": "PORT", "value": 8080}]"#
        ))),
        vec![
            "containerDefinitions[0].environment[0].name: must not be empty",
            r#"containerDefinitions[0].environment[1].name: "A=B" must not contain "=""#,
            "containerDefinitions[0].environment[2].name: missing required field",
            "containerDefinitions[0].environment[3].value: expected a string, found a number (8080)",
        ]
    );
}

#[test]
fn working_directory_must_be_absolute() {
    assert_eq!(
        one(&task(&c("web", r#""workingDirectory": "srv""#))),
        r#"containerDefinitions[0].workingDirectory: must be an absolute path (starting with /), found "srv""#
    );
}

#[test]
fn user_must_not_be_empty() {
    assert_eq!(
        one(&task(&c("web", r#""user": """#))),
        "containerDefinitions[0].user: must not be empty"
    );
}

// --- numbers ------------------------------------------------------------------------------------

#[test]
fn negative_and_absurd_numbers() {
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""stopTimeout": -1, "startTimeout": 100000, "cpu": 300000"#
        ))),
        vec![
            "containerDefinitions[0].stopTimeout: must not be negative, found -1",
            "containerDefinitions[0].startTimeout: 100000 seconds is absurd; must be at most 86400 seconds (24 hours)",
            "containerDefinitions[0].cpu: 300000 CPU units is absurd; must be at most 262144 CPU units (256 vCPUs)",
        ]
    );
    assert_eq!(
        one(&task(&c("web", r#""stopTimeout": 100000"#))),
        "containerDefinitions[0].stopTimeout: 100000 seconds is absurd; must be at most 86400 seconds (24 hours)"
    );
}

#[test]
fn memory_limits() {
    assert_eq!(
        problems(&task(
            &[
                c("a", r#""memory": 2"#),
                c("b", r#""memory": 5000000"#),
                c("c", r#""memoryReservation": 3"#),
                c("d", r#""memory": -64"#),
                c("e", r#""memory": 64, "memoryReservation": 128"#),
            ]
            .join(",")
        )),
        vec![
            "containerDefinitions[0].memory: must be at least 6 MiB (Docker's minimum), found 2",
            "containerDefinitions[1].memory: 5000000 MiB is absurd; must be at most 4194304 MiB (4 TiB)",
            "containerDefinitions[2].memoryReservation: must be at least 4 MiB, found 3",
            "containerDefinitions[3].memory: must not be negative, found -64",
            "containerDefinitions[4].memoryReservation: must not exceed memory (64 MiB), found 128",
        ]
    );
    assert!(parse(&task(&c("web", r#""memory": 6, "memoryReservation": 4"#))).is_ok());
}

#[test]
fn integers_only() {
    assert_eq!(
        one(&task(&c("web", r#""memory": 1.5"#))),
        "containerDefinitions[0].memory: expected an integer, found a number (1.5)"
    );
    assert_eq!(
        one(&task(&c("web", r#""memory": 1e300"#))),
        "containerDefinitions[0].memory: 1e+300 MiB is absurd; must be at most 4194304 MiB (4 TiB)"
    );
}

// --- dependencies -------------------------------------------------------------------------------

#[test]
fn dependency_on_unknown_container_lists_known_ones() {
    assert_eq!(
        one(&task(
            &[
                c("web", ""),
                c(
                    "init",
                    r#""dependsOn": [{"containerName": "db", "condition": "START"}]"#
                ),
            ]
            .join(",")
        )),
        r#"containerDefinitions[1].dependsOn[0].containerName: no container named "db" (known: web, init)"#
    );
}

#[test]
fn self_dependency() {
    assert_eq!(
        one(&task(&c(
            "web",
            r#""dependsOn": [{"containerName": "web", "condition": "START"}]"#
        ))),
        r#"containerDefinitions[0].dependsOn[0].containerName: container "web" depends on itself"#
    );
}

#[test]
fn unknown_condition() {
    let base = |cond: &str| {
        task(
            &[
                c("db", ""),
                c(
                    "web",
                    &format!(r#""dependsOn": [{{"containerName": "db", "condition": "{cond}"}}]"#),
                ),
            ]
            .join(","),
        )
    };
    assert_eq!(
        one(&base("READY")),
        r#"containerDefinitions[1].dependsOn[0].condition: unknown condition "READY"; use START, COMPLETE, SUCCESS or HEALTHY"#
    );
    assert_eq!(
        one(&base("start")),
        r#"containerDefinitions[1].dependsOn[0].condition: unknown condition "start"; conditions are upper case: START"#
    );
}

#[test]
fn dependency_fields_required() {
    assert_eq!(
        problems(&task(
            &[c("db", ""), c("web", r#""dependsOn": [{}]"#)].join(",")
        )),
        vec![
            "containerDefinitions[1].dependsOn[0].containerName: missing required field",
            "containerDefinitions[1].dependsOn[0].condition: missing required field; use START, COMPLETE, SUCCESS or HEALTHY",
        ]
    );
}

#[test]
fn healthy_needs_a_health_check() {
    assert_eq!(
        one(&task(
            &[
                c("x", ""),
                c(
                    "web",
                    r#""dependsOn": [{"containerName": "x", "condition": "HEALTHY"}]"#
                ),
            ]
            .join(",")
        )),
        r#"containerDefinitions[1].dependsOn[0].condition: HEALTHY needs a healthCheck on container "x""#
    );
}

#[test]
fn complete_or_success_on_an_essential_container() {
    assert_eq!(
        one(&task(
            &[
                c("init", ""),
                c(
                    "web",
                    r#""dependsOn": [{"containerName": "init", "condition": "SUCCESS"}]"#
                ),
            ]
            .join(",")
        )),
        r#"containerDefinitions[1].dependsOn[0].condition: SUCCESS waits for container "init" to exit, but it is essential and its exit stops the task; mark it "essential": false"#
    );
    assert!(
        parse(&task(
            &[
                c("init", r#""essential": false"#),
                c(
                    "web",
                    r#""dependsOn": [{"containerName": "init", "condition": "COMPLETE"}]"#
                ),
            ]
            .join(",")
        ))
        .is_ok()
    );
}

#[test]
fn dependency_listed_twice() {
    assert_eq!(
        one(&task(&[
            c("db", ""),
            c(
                "web",
                r#""dependsOn": [{"containerName": "db", "condition": "START"}, {"containerName": "db", "condition": "START"}]"#
            ),
        ]
        .join(","))),
        r#"containerDefinitions[1].dependsOn[1].containerName: "db" is already listed at containerDefinitions[1].dependsOn[0]"#
    );
}

fn dep(on: &str) -> String {
    format!(r#""dependsOn": [{{"containerName": "{on}", "condition": "START"}}]"#)
}

#[test]
fn two_container_cycle() {
    assert_eq!(
        one(&task(&[c("a", &dep("b")), c("b", &dep("a"))].join(","))),
        "containerDefinitions[0].dependsOn[0]: dependency cycle: a -> b -> a (each container waits for the next)"
    );
}

#[test]
fn volumes_from_takes_part_in_cycles() {
    // b takes volumes from a (so a must be created first) while a waits for b to start.
    assert_eq!(
        one(&task(
            &[
                c("a", &dep("b")),
                c("b", r#""volumesFrom": [{"sourceContainer": "a"}]"#),
            ]
            .join(",")
        )),
        "containerDefinitions[0].dependsOn[0]: dependency cycle: a -> b -> a (each container waits for the next)"
    );
}

#[test]
fn cycle_is_named_from_its_first_container() {
    // d is outside the cycle; the cycle b -> c -> e -> b starts at b (the first defined).
    assert_eq!(
        one(&task(
            &[
                c("d", &dep("e")),
                c("b", &dep("c")),
                c("c", &dep("e")),
                c("e", &dep("b")),
            ]
            .join(",")
        )),
        "containerDefinitions[1].dependsOn[0]: dependency cycle: b -> c -> e -> b (each container waits for the next)"
    );
}

#[test]
fn each_cycle_reported_once() {
    assert_eq!(
        problems(&task(
            &[
                c("a", &dep("b")),
                c("b", &dep("a")),
                c("c", &dep("d")),
                c("d", &dep("c")),
                c("e", ""),
            ]
            .join(",")
        )),
        vec![
            "containerDefinitions[0].dependsOn[0]: dependency cycle: a -> b -> a (each container waits for the next)",
            "containerDefinitions[2].dependsOn[0]: dependency cycle: c -> d -> c (each container waits for the next)",
        ]
    );
}

#[test]
fn no_essential_container() {
    assert_eq!(
        one(&task(
            &[
                c("a", r#""essential": false"#),
                c("b", r#""essential": false"#)
            ]
            .join(",")
        )),
        r#"containerDefinitions: no essential container; mark at least one container "essential": true"#
    );
}

#[test]
fn duplicate_container_names() {
    assert_eq!(
        one(&task(&[c("web", ""), c("db", ""), c("web", "")].join(","))),
        r#"containerDefinitions[2].name: duplicate container name "web" (also containerDefinitions[0])"#
    );
}

// --- health checks ------------------------------------------------------------------------------

fn hc(body: &str) -> String {
    task(&c("web", &format!(r#""healthCheck": {body}"#)))
}

#[test]
fn health_check_bounds() {
    assert_eq!(
        problems(&hc(
            r#"{"command": ["CMD", "true"], "interval": 4, "timeout": 61, "retries": 0, "startPeriod": 301}"#
        )),
        vec![
            "containerDefinitions[0].healthCheck.interval: must be at least 5 seconds, found 4",
            "containerDefinitions[0].healthCheck.timeout: must be at most 60 seconds, found 61",
            "containerDefinitions[0].healthCheck.retries: must be at least 1, found 0",
            "containerDefinitions[0].healthCheck.startPeriod: must be at most 300 seconds, found 301",
        ]
    );
    assert_eq!(
        problems(&hc(
            r#"{"command": ["CMD", "true"], "interval": 301, "timeout": 1, "retries": 11}"#
        )),
        vec![
            "containerDefinitions[0].healthCheck.interval: must be at most 300 seconds, found 301",
            "containerDefinitions[0].healthCheck.timeout: must be at least 2 seconds, found 1",
            "containerDefinitions[0].healthCheck.retries: must be at most 10, found 11",
        ]
    );
    let def = valid(&hc(
        r#"{"command": ["CMD-SHELL", "true"], "interval": 5, "timeout": 2, "retries": 10, "startPeriod": 300}"#,
    ))
    .definition;
    assert_eq!(
        def.container_definitions[0].health_check,
        Some(HealthCheck {
            command: vec!["CMD-SHELL".into(), "true".into()],
            interval: 5,
            timeout: 2,
            retries: 10,
            start_period: 300
        })
    );
}

#[test]
fn health_check_command() {
    assert_eq!(
        one(&hc("{}")),
        r#"containerDefinitions[0].healthCheck.command: missing required field; for example ["CMD-SHELL", "curl -f http://localhost/ || exit 1"]"#
    );
    assert_eq!(
        one(&hc(r#"{"command": []}"#)),
        r#"containerDefinitions[0].healthCheck.command: must not be empty; use ["CMD-SHELL", "shell command"] or ["CMD", "program", "arg"...]"#
    );
    assert_eq!(
        one(&hc(r#"{"command": ["curl", "-f", "http://localhost/"]}"#)),
        r#"containerDefinitions[0].healthCheck.command[0]: must be "CMD" or "CMD-SHELL", found "curl"; to run the program write ["CMD", "curl", "-f", "http://localhost/"]"#
    );
    assert_eq!(
        one(&hc(r#"{"command": ["CMD-SHELL", "curl", "-f"]}"#)),
        r#"containerDefinitions[0].healthCheck.command: "CMD-SHELL" must be followed by exactly one string (the shell command), found 2"#
    );
    assert_eq!(
        one(&hc(r#"{"command": ["CMD"]}"#)),
        r#"containerDefinitions[0].healthCheck.command: "CMD" must be followed by the program to run and its arguments"#
    );
    assert_eq!(
        one(&hc(r#"{"command": ["CMD-SHELL", ""]}"#)),
        "containerDefinitions[0].healthCheck.command[1]: must not be empty"
    );
    assert_eq!(
        one(&hc(r#"{"command": "true"}"#)),
        r#"containerDefinitions[0].healthCheck.command: expected an array, found a string ("true")"#
    );
}

#[test]
fn invalid_health_check_still_counts_for_healthy() {
    // The healthCheck is broken, which is reported; HEALTHY on it is not reported twice.
    assert_eq!(
        one(&task(
            &[
                c(
                    "db",
                    r#""essential": false, "healthCheck": {"command": []}"#
                ),
                c(
                    "web",
                    r#""dependsOn": [{"containerName": "db", "condition": "HEALTHY"}]"#
                ),
            ]
            .join(",")
        )),
        r#"containerDefinitions[0].healthCheck.command: must not be empty; use ["CMD-SHELL", "shell command"] or ["CMD", "program", "arg"...]"#
    );
}

// --- mounts and volumes -------------------------------------------------------------------------

#[test]
fn mount_point_naming_an_undefined_volume() {
    assert_eq!(
        one(&task_with(
            r#""volumes": [{"name": "data"}, {"name": "logs"}]"#,
            &c(
                "web",
                r#""mountPoints": [{"sourceVolume": "dta", "containerPath": "/data"}]"#
            )
        )),
        r#"containerDefinitions[0].mountPoints[0].sourceVolume: no volume named "dta" (known: data, logs)"#
    );
    assert_eq!(
        one(&task(&c(
            "web",
            r#""mountPoints": [{"sourceVolume": "data", "containerPath": "/data"}]"#
        ))),
        r#"containerDefinitions[0].mountPoints[0].sourceVolume: no volume named "data" (no volumes are defined)"#
    );
}

#[test]
fn mount_point_rules() {
    assert_eq!(
        problems(&task_with(
            r#""volumes": [{"name": "data"}]"#,
            &c(
                "web",
                r#""mountPoints": [{"sourceVolume": "data", "containerPath": "data"}, {"sourceVolume": "data", "containerPath": "/d"}, {"sourceVolume": "data", "containerPath": "/d/"}, {"readOnly": "no"}]"#
            )
        )),
        vec![
            r#"containerDefinitions[0].mountPoints[0].containerPath: must be an absolute path (starting with /), found "data""#,
            r#"containerDefinitions[0].mountPoints[2].containerPath: "/d/" is already mounted by containerDefinitions[0].mountPoints[1]"#,
            "containerDefinitions[0].mountPoints[3].sourceVolume: missing required field",
            "containerDefinitions[0].mountPoints[3].containerPath: missing required field",
            r#"containerDefinitions[0].mountPoints[3].readOnly: expected a boolean, found a string ("no")"#,
        ]
    );
}

#[test]
fn volumes_from_rules() {
    assert_eq!(
        problems(&task(
            &[
                c("a", r#""volumesFrom": [{"sourceContainer": "a"}]"#),
                c(
                    "b",
                    r#""volumesFrom": [{"sourceContainer": "zz", "readOnly": true}, {}]"#
                ),
            ]
            .join(",")
        )),
        vec![
            "containerDefinitions[0].volumesFrom[0].sourceContainer: a container cannot take volumes from itself",
            r#"containerDefinitions[1].volumesFrom[0].sourceContainer: no container named "zz" (known: a, b)"#,
            "containerDefinitions[1].volumesFrom[1].sourceContainer: missing required field",
        ]
    );
}

fn vol(body: &str) -> String {
    task_with(&format!(r#""volumes": [{body}]"#), &c("web", ""))
}

#[test]
fn volume_kinds() {
    let def = valid(&task_with(
        r#""volumes": [
            {"name": "a"},
            {"name": "b", "host": {}},
            {"name": "c", "host": {"sourcePath": "/srv/c"}},
            {"name": "d", "dockerVolumeConfiguration": {}},
            {"name": "e", "dockerVolumeConfiguration": {"scope": "shared", "autoprovision": true, "driver": "berth", "driverOpts": {"size": "1G"}, "labels": {"x": "y"}}},
            {"name": "f", "efsVolumeConfiguration": {"fileSystemId": "fs-1"}},
            {"name": "g", "efsVolumeConfiguration": {"fileSystemId": "fs-2", "rootDirectory": "/exports", "transitEncryption": "ENABLED", "authorizationConfig": {"iam": "ENABLED"}}}
        ]"#,
        &c("web", ""),
    ))
    .definition;
    let kinds: Vec<&VolumeKind> = def.volumes.iter().map(|v| &v.kind).collect();
    assert_eq!(kinds[0], &VolumeKind::Scratch);
    assert_eq!(kinds[1], &VolumeKind::Scratch);
    assert_eq!(
        kinds[2],
        &VolumeKind::Host {
            source_path: "/srv/c".into()
        }
    );
    assert_eq!(
        kinds[3],
        &VolumeKind::Docker(DockerVolumeConfiguration {
            scope: VolumeScope::Task,
            autoprovision: false,
            driver: "local".into(),
            driver_opts: BTreeMap::new(),
            labels: BTreeMap::new(),
        })
    );
    let VolumeKind::Docker(e) = kinds[4] else {
        panic!("expected a docker volume, got {:?}", kinds[4]);
    };
    assert_eq!(e.scope, VolumeScope::Shared);
    assert!(e.autoprovision);
    assert_eq!(e.driver, "berth");
    assert_eq!(e.driver_opts.get("size").map(String::as_str), Some("1G"));
    assert_eq!(
        kinds[5],
        &VolumeKind::Efs(EfsVolumeConfiguration {
            file_system_id: "fs-1".into(),
            root_directory: "/".into(),
            transit_encryption: false,
            access_point_id: None,
            iam: false,
        })
    );
    assert_eq!(
        kinds[6],
        &VolumeKind::Efs(EfsVolumeConfiguration {
            file_system_id: "fs-2".into(),
            root_directory: "/exports".into(),
            transit_encryption: true,
            access_point_id: None,
            iam: true,
        })
    );
}

#[test]
fn volume_names() {
    assert_eq!(
        problems(&vol(
            r#"{"name": "data"}, {"name": "data"}, {"name": "my data"}, {}"#
        )),
        vec![
            r#"volumes[1].name: duplicate volume name "data" (also volumes[0])"#,
            r#"volumes[2].name: "my data" is not a valid volume name; use 1 to 255 letters, digits, hyphens and underscores"#,
            "volumes[3].name: missing required field",
        ]
    );
}

#[test]
fn host_source_path_must_be_absolute() {
    assert_eq!(
        one(&vol(r#"{"name": "d", "host": {"sourcePath": "srv"}}"#)),
        r#"volumes[0].host.sourcePath: must be an absolute path (starting with /), found "srv""#
    );
}

#[test]
fn docker_volume_rules() {
    assert_eq!(
        one(&vol(
            r#"{"name": "d", "dockerVolumeConfiguration": {"autoprovision": true}}"#
        )),
        r#"volumes[0].dockerVolumeConfiguration.autoprovision: autoprovision only applies to "scope": "shared" volumes; task-scoped volumes are always created"#
    );
    assert_eq!(
        problems(&vol(
            r#"{"name": "d", "dockerVolumeConfiguration": {"scope": "global", "driver": "", "labels": {"a": 1}}}"#
        )),
        vec![
            r#"volumes[0].dockerVolumeConfiguration.scope: unknown scope "global"; use task or shared"#,
            "volumes[0].dockerVolumeConfiguration.driver: must not be empty",
            "volumes[0].dockerVolumeConfiguration.labels.a: expected a string, found a number (1)",
        ]
    );
}

#[test]
fn efs_volume_rules() {
    assert_eq!(
        one(&vol(r#"{"name": "d", "efsVolumeConfiguration": {}}"#)),
        "volumes[0].efsVolumeConfiguration.fileSystemId: missing required field"
    );
    assert_eq!(
        one(&vol(
            r#"{"name": "d", "efsVolumeConfiguration": {"fileSystemId": "fs-1", "authorizationConfig": {"accessPointId": "fsap-1"}}}"#
        )),
        "volumes[0].efsVolumeConfiguration.transitEncryption: must be ENABLED when authorizationConfig uses an access point or IAM"
    );
    assert_eq!(
        one(&vol(
            r#"{"name": "d", "efsVolumeConfiguration": {"fileSystemId": "fs-1", "transitEncryption": "DISABLED", "authorizationConfig": {"iam": "ENABLED"}}}"#
        )),
        "volumes[0].efsVolumeConfiguration.transitEncryption: must be ENABLED when authorizationConfig uses an access point or IAM"
    );
    assert_eq!(
        one(&vol(
            r#"{"name": "d", "efsVolumeConfiguration": {"fileSystemId": "fs-1", "rootDirectory": "/x", "transitEncryption": "ENABLED", "authorizationConfig": {"accessPointId": "fsap-1"}}}"#
        )),
        r#"volumes[0].efsVolumeConfiguration.rootDirectory: must be left out or "/" when authorizationConfig names an access point (the access point sets the root)"#
    );
    assert_eq!(
        one(&vol(
            r#"{"name": "d", "efsVolumeConfiguration": {"fileSystemId": "fs-1", "transitEncryption": "yes"}}"#
        )),
        r#"volumes[0].efsVolumeConfiguration.transitEncryption: must be ENABLED or DISABLED, found "yes""#
    );
}

#[test]
fn one_configuration_per_volume() {
    assert_eq!(
        one(&vol(
            r#"{"name": "d", "host": {}, "efsVolumeConfiguration": {"fileSystemId": "fs-1"}}"#
        )),
        "volumes[0].efsVolumeConfiguration: a volume takes only one of host, dockerVolumeConfiguration or efsVolumeConfiguration; this one already has host"
    );
}

#[test]
fn fsx_volumes_are_unsupported() {
    assert_eq!(
        one(&vol(
            r#"{"name": "d", "fsxWindowsFileServerVolumeConfiguration": {"fileSystemId": "fs-1"}}"#
        )),
        "volumes[0].fsxWindowsFileServerVolumeConfiguration: fsxWindowsFileServerVolumeConfiguration is not supported by berth"
    );
}

// --- ports --------------------------------------------------------------------------------------

fn ports(mode: &str, containers: &[(&str, &str)]) -> String {
    task_with(
        &format!(r#""networkMode": "{mode}""#),
        &containers
            .iter()
            .map(|(name, mappings)| c(name, &format!(r#""portMappings": [{mappings}]"#)))
            .collect::<Vec<_>>()
            .join(","),
    )
}

#[test]
fn port_ranges_and_protocol() {
    assert_eq!(
        problems(&ports(
            "bridge",
            &[(
                "web",
                r#"{"containerPort": 0}, {"containerPort": 70000}, {"containerPort": 80, "hostPort": -1}, {"containerPort": 80, "protocol": "sctp"}, {"hostPort": 80}"#
            )]
        )),
        vec![
            "containerDefinitions[0].portMappings[0].containerPort: must be at least 1, found 0",
            "containerDefinitions[0].portMappings[1].containerPort: must be at most 65535, found 70000",
            "containerDefinitions[0].portMappings[2].hostPort: must not be negative, found -1",
            r#"containerDefinitions[0].portMappings[3].protocol: unknown protocol "sctp"; use tcp or udp"#,
            "containerDefinitions[0].portMappings[4].containerPort: missing required field",
        ]
    );
}

#[test]
fn duplicate_host_ports_in_bridge_mode() {
    assert_eq!(
        one(&ports(
            "bridge",
            &[
                ("a", r#"{"containerPort": 80, "hostPort": 8080}"#),
                (
                    "b",
                    r#"{"containerPort": 81, "hostPort": 8080, "protocol": "udp"}, {"containerPort": 82, "hostPort": 0}, {"containerPort": 83, "hostPort": 0}, {"containerPort": 80}, {"containerPort": 84, "hostPort": 8080}"#
                ),
            ]
        )),
        "containerDefinitions[1].portMappings[4].hostPort: host port 8080/tcp is already used by containerDefinitions[0].portMappings[0]"
    );
}

#[test]
fn host_mode_ports() {
    assert_eq!(
        problems(&ports(
            "host",
            &[
                (
                    "a",
                    r#"{"containerPort": 80}, {"containerPort": 81, "hostPort": 8081}"#
                ),
                ("b", r#"{"containerPort": 80, "hostPort": 80}"#),
            ]
        )),
        vec![
            "containerDefinitions[0].portMappings[1].hostPort: in host network mode hostPort must be left out or equal containerPort (81), found 8081",
            "containerDefinitions[1].portMappings[0].hostPort: host port 80/tcp is already used by containerDefinitions[0].portMappings[0]",
        ]
    );
    assert_eq!(
        one(&ports(
            "host",
            &[
                ("a", r#"{"containerPort": 80}"#),
                ("b", r#"{"containerPort": 80}"#)
            ]
        )),
        "containerDefinitions[1].portMappings[0].containerPort: host port 80/tcp is already used by containerDefinitions[0].portMappings[0]"
    );
    // The same container port is fine in bridge mode without host ports.
    assert!(
        parse(&ports(
            "bridge",
            &[
                ("a", r#"{"containerPort": 80}"#),
                ("b", r#"{"containerPort": 80}"#)
            ]
        ))
        .is_ok()
    );
}

#[test]
fn none_mode_has_no_ports() {
    assert_eq!(
        one(&ports("none", &[("a", r#"{"containerPort": 80}"#)])),
        "containerDefinitions[0].portMappings: port mappings need network mode bridge or host; this task uses none"
    );
}

#[test]
fn hostname_in_host_mode() {
    assert_eq!(
        one(&task_with(
            r#""networkMode": "host""#,
            &c("web", r#""hostname": "web""#)
        )),
        "containerDefinitions[0].hostname: hostname cannot be set in host network mode (the container uses the host's name)"
    );
    assert_eq!(
        one(&task(&c("web", r#""hostname": "a b""#))),
        r#"containerDefinitions[0].hostname: "a b" is not a valid hostname"#
    );
}

// --- ulimits, labels, logging -------------------------------------------------------------------

#[test]
fn ulimit_rules() {
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""ulimits": [
                {"name": "files", "softLimit": 1, "hardLimit": 1},
                {"name": "nofile", "softLimit": 2048, "hardLimit": 1024},
                {"name": "nproc", "softLimit": -5, "hardLimit": 10},
                {"name": "nofile", "softLimit": 1, "hardLimit": 1},
                {"name": "core", "softLimit": -1, "hardLimit": 0},
                {"name": "stack"}
            ]"#
        ))),
        vec![
            r#"containerDefinitions[0].ulimits[0].name: unknown ulimit "files"; use one of core, cpu, data, fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack"#,
            "containerDefinitions[0].ulimits[1].softLimit: softLimit (2048) must not exceed hardLimit (1024)",
            "containerDefinitions[0].ulimits[2].softLimit: must be -1 (unlimited) or not negative, found -5",
            r#"containerDefinitions[0].ulimits[3].name: duplicate ulimit "nofile" (also containerDefinitions[0].ulimits[1])"#,
            "containerDefinitions[0].ulimits[4].softLimit: softLimit (-1) must not exceed hardLimit (0)",
            "containerDefinitions[0].ulimits[5].softLimit: missing required field",
            "containerDefinitions[0].ulimits[5].hardLimit: missing required field",
        ]
    );
}

#[test]
fn docker_labels_must_be_strings() {
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""dockerLabels": {"com.example.port": 80, "plain": true, "ok": "yes"}"#
        ))),
        vec![
            r#"containerDefinitions[0].dockerLabels["com.example.port"]: expected a string, found a number (80)"#,
            "containerDefinitions[0].dockerLabels.plain: expected a string, found a boolean (true)",
        ]
    );
}

#[test]
fn log_configuration_rules() {
    // Any Docker log driver name parses, options and all: which ones the host can use is the log
    // policy's decision (crate::logging), not the parser's.
    let parsed = parse(&task(&c(
        "web",
        r#""logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": "g"}}"#,
    )))
    .expect("awslogs parses");
    let log = parsed.definition.container_definitions[0]
        .log_configuration
        .clone()
        .expect("a log configuration");
    assert_eq!(log.log_driver.as_str(), "awslogs");
    assert_eq!(
        log.options.get("awslogs-group").map(String::as_str),
        Some("g")
    );
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""logConfiguration": {"options": {"max-size": 10}, "secretOptions": [{"name": "x", "valueFrom": "y"}]}"#
        ))),
        vec![
            r#"containerDefinitions[0].logConfiguration.logDriver: missing required field; name a Docker log driver, for example "json-file""#,
            "containerDefinitions[0].logConfiguration.options.max-size: expected a string, found a number (10)",
        ]
    );
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""logConfiguration": {"logDriver": ""}}, {"name": "b", "image": "i", "logConfiguration": {"logDriver": "json file"}"#
        ))),
        vec![
            r#"containerDefinitions[0].logConfiguration.logDriver: "" is not a log driver name: it is empty"#,
            r#"containerDefinitions[1].logConfiguration.logDriver: "json file" is not a log driver name: use only letters, digits and . _ - / : @"#,
        ]
    );
    for driver in [
        "json-file",
        "local",
        "none",
        "syslog",
        "journald",
        "gelf",
        "fluentd",
        "splunk",
        "logentries",
        "sumologic",
        "gcplogs",
        "grafana/loki-docker-driver:latest",
    ] {
        assert!(
            parse(&task(&c(
                "web",
                &format!(r#""logConfiguration": {{"logDriver": "{driver}"}}"#)
            )))
            .is_ok(),
            "{driver}"
        );
    }
}

// --- resourceRequirements -----------------------------------------------------------------------

fn gpu_of(extra: &str) -> Option<GpuRequest> {
    valid(&task(&c("g", extra)))
        .definition
        .container_definitions[0]
        .gpu
}

#[test]
fn gpu_requirement_is_a_count_or_all() {
    assert_eq!(gpu_of(""), None);
    assert_eq!(gpu_of(r#""resourceRequirements": []"#), None);
    assert_eq!(gpu_of(r#""resourceRequirements": null"#), None);
    assert_eq!(
        gpu_of(r#""resourceRequirements": [{"type": "GPU", "value": "1"}]"#),
        Some(GpuRequest::Count(1))
    );
    assert_eq!(
        gpu_of(r#""resourceRequirements": [{"value": "8", "type": "GPU"}]"#),
        Some(GpuRequest::Count(8))
    );
    assert_eq!(
        gpu_of(r#""resourceRequirements": [{"type": "GPU", "value": "ALL"}]"#),
        Some(GpuRequest::All)
    );
    let text = task(&c(
        "g",
        r#""resourceRequirements": [{"type": "GPU", "value": "2"}]"#,
    ));
    assert!(warnings(&text).is_empty());
}

#[test]
fn gpu_values_that_are_not_a_whole_number_of_gpus() {
    let p = "containerDefinitions[0].resourceRequirements[0].value";
    let rule = r#"a whole number of GPUs ("1", "2", ...) or "ALL""#;
    for (value, message) in [
        (r#""0""#, r#"must be at least 1 GPU, found "0"; remove the entry to run without GPUs"#.to_owned()),
        (r#""-1""#, format!(r#"must be {rule}, found "-1""#)),
        (r#""1.5""#, format!(r#"must be {rule}, found "1.5""#)),
        (r#""+1""#, format!(r#"must be {rule}, found "+1""#)),
        (r#"" 1""#, format!(r#"must be {rule}, found " 1""#)),
        (r#""""#, format!(r#"must be {rule}, found """#)),
        (r#""two""#, format!(r#"must be {rule}, found "two""#)),
        (r#""all""#, format!(r#"must be {rule}, found "all"; ECS spells it "ALL""#)),
        (
            r#""4294967296""#,
            r#"must be at most 4294967295 GPUs, found "4294967296""#.to_owned(),
        ),
        (
            "1",
            r#"expected a string, found a number (1); ECS takes the number of GPUs as a string: "1""#.to_owned(),
        ),
        (
            "true",
            format!("expected a string holding {rule}, found a boolean (true)"),
        ),
    ] {
        let extra = format!(r#""resourceRequirements": [{{"type": "GPU", "value": {value}}}]"#);
        assert_eq!(one(&task(&c("g", &extra))), format!("{p}: {message}"), "value {value}");
    }
}

#[test]
fn a_second_gpu_requirement_names_the_first() {
    assert_eq!(
        one(&task(&c(
            "g",
            r#""resourceRequirements": [{"type": "GPU", "value": "1"}, {"type": "InferenceAccelerator", "value": "d1"}, {"type": "GPU", "value": "2"}]"#
        ))),
        "containerDefinitions[0].resourceRequirements[2]: a second GPU requirement (the first is containerDefinitions[0].resourceRequirements[0]); keep one entry with the total number of GPUs"
    );
}

#[test]
fn resource_requirement_types_and_missing_fields() {
    let base = "containerDefinitions[0].resourceRequirements";
    assert_eq!(
        problems(&task(&c(
            "g",
            r#""resourceRequirements": [{"type": "gpu", "value": "1"}, {"type": "TPU", "value": "1"}, {"value": "1"}, {"type": "GPU"}, {"type": "NeuronDevice", "value": "2"}, "GPU", {"type": "GPU", "value": "1", "sharingStrategy": {"mps": {}}}]"#
        ))),
        vec![
            format!(r#"{base}[0].type: unknown resource type "gpu"; ECS spells it "GPU""#),
            format!(
                r#"{base}[1].type: unknown resource type "TPU"; use GPU, InferenceAccelerator, NeuronDevice"#
            ),
            format!(
                "{base}[2].type: missing required field; use GPU, InferenceAccelerator, NeuronDevice"
            ),
            format!(
                r#"{base}[3].value: missing required field; use a whole number of GPUs ("1", "2", ...) or "ALL""#
            ),
            format!(r#"{base}[4].value: must be "ALL" for NeuronDevice, found "2""#),
            format!("{base}[5]: expected an object, found a string (\"GPU\")"),
            format!("{base}[6].sharingStrategy: sharingStrategy is not supported by berth"),
        ]
    );
    assert_eq!(
        one(&task(&c(
            "g",
            r#""resourceRequirements": {"type": "GPU", "value": "1"}"#
        ))),
        "containerDefinitions[0].resourceRequirements: expected an array, found an object"
    );
}

#[test]
fn aws_only_resource_requirements_are_accepted_with_a_warning() {
    let text = task(&c(
        "g",
        r#""resourceRequirements": [{"type": "InferenceAccelerator", "value": "device_1"}, {"type": "NeuronDevice", "value": "ALL"}]"#,
    ));
    assert_eq!(
        warnings(&text),
        vec![
            "containerDefinitions[0].resourceRequirements[0]: Elastic Inference accelerators exist only on AWS: berth runs the container without this one",
            "containerDefinitions[0].resourceRequirements[1]: Neuron devices are assigned only by ECS Managed Instances: berth runs the container without them (linuxParameters.devices can pass a /dev/neuron* device)",
        ]
    );
    assert_eq!(valid(&text).definition.container_definitions[0].gpu, None);
    assert_eq!(
        one(&task(&c(
            "g",
            r#""resourceRequirements": [{"type": "InferenceAccelerator", "value": ""}]"#
        ))),
        "containerDefinitions[0].resourceRequirements[0].value: must not be empty"
    );
}

// --- unknown, ignored and unsupported fields ----------------------------------------------------

#[test]
fn unknown_fields_warn_once_each_at_every_level() {
    let text = task_with(
        r#""colour": "blue", "volumes": [{"name": "d", "size": 3, "host": {"sourcePath": "/x", "mode": "rw"}}]"#,
        &c(
            "web",
            r#""healthcheck": {}, "portMappings": [{"containerPort": 80, "name": "http"}], "dependsOn": [], "x": 1"#,
        ),
    );
    assert_eq!(
        warnings(&text),
        vec![
            "colour: unknown field, ignored",
            "volumes[0].size: unknown field, ignored",
            "volumes[0].host.mode: unknown field, ignored",
            r#"containerDefinitions[0].healthcheck: unknown field, ignored (did you mean "healthCheck"?)"#,
            "containerDefinitions[0].portMappings[0].name: not used by berth, ignored",
            "containerDefinitions[0].x: unknown field, ignored",
        ]
    );
}

#[test]
fn ecs_fields_berth_does_not_use() {
    let text = task_with(
        r#""requiresCompatibilities": ["EC2"], "runtimePlatform": {"cpuArchitecture": "X86_64"}"#,
        &c(
            "web",
            r#""versionConsistency": "enabled", "credentialSpecs": ["x"]"#,
        ),
    );
    assert_eq!(
        warnings(&text),
        vec![
            "requiresCompatibilities: not used by berth, ignored",
            "runtimePlatform: not used by berth, ignored",
            "containerDefinitions[0].versionConsistency: not used by berth, ignored",
            "containerDefinitions[0].credentialSpecs: not used by berth, ignored",
        ]
    );
}

#[test]
fn aws_only_fields_are_accepted_with_what_berth_does_instead() {
    let text = task_with(
        r#""proxyConfiguration": {"containerName": "envoy"}, "inferenceAccelerators": [{"deviceName": "d", "deviceType": "eia2.medium"}], "placementConstraints": [{"type": "memberOf", "expression": "attribute:ecs.os-type == linux"}]"#,
        &c("web", ""),
    );
    assert!(parse(&text).is_ok(), "valid");
    assert_eq!(
        warnings(&text),
        vec![
            "proxyConfiguration: App Mesh's proxy configuration is an AWS feature: berth starts the proxy container as an ordinary container of the task and redirects no traffic through it",
            "inferenceAccelerators: Elastic Inference accelerators exist only on AWS: berth runs the task without them",
            "placementConstraints: placement constraints choose among ECS's container instances: berth runs the task on this host",
        ]
    );
}

// --- FireLens ---------------------------------------------------------------------------------

const ROUTER: &str = r#""firelensConfiguration": {"type": "fluentbit"}"#;
const TO_ROUTER: &str =
    r#""logConfiguration": {"logDriver": "awsfirelens", "options": {"Name": "stdout"}}"#;

#[test]
fn firelens_router_and_app_are_read() {
    let parsed = valid(&task(&format!(
        "{},{}",
        c(
            "log_router",
            r#""firelensConfiguration": {"type": "fluentd", "options": {"enable-ecs-log-metadata": "false", "config-file-type": "file", "config-file-value": "/extra.conf"}}"#
        ),
        c(
            "app",
            r#""logConfiguration": {"logDriver": "awsfirelens", "options": {"@type": "forward", "host": "h"}}"#
        )
    )));
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let def = &parsed.definition;
    assert_eq!(
        def.container_definitions[0].firelens_configuration,
        Some(crate::firelens::FirelensConfiguration {
            router_type: crate::firelens::FirelensType::Fluentd,
            enable_ecs_log_metadata: false,
            config_file: Some("/extra.conf".into()),
        })
    );
    assert_eq!(
        def.container_definitions[1].log_driver(),
        Some("awsfirelens")
    );
    // ECS's default: metadata on.
    let parsed = valid(&task(&format!(
        "{},{}",
        c("r", ROUTER),
        c("app", TO_ROUTER)
    )));
    let router = parsed.definition.container_definitions[0]
        .firelens_configuration
        .clone()
        .expect("a router");
    assert!(router.enable_ecs_log_metadata);
    assert_eq!(router.config_file, None);
    // The app starts after the router (ECS adds the START dependency).
    assert_eq!(
        crate::DependencyGraph::new(&parsed.definition).start_order(),
        Ok(vec![0, 1])
    );
    // Null counts as absent (console exports).
    assert!(parse(&task(&c("web", r#""firelensConfiguration": null"#))).is_ok());
}

/// What lands in the router's generated configuration file cannot carry a line of its own: a
/// line break in an option (issue 24) used to add a second `[OUTPUT]` section.
#[test]
fn firelens_text_without_control_characters() {
    let app = |options: &str, secret: &str| {
        format!(
            "[{}, {}]",
            c("router", ROUTER),
            c(
                "app",
                &format!(
                    r#""logConfiguration": {{"logDriver": "awsfirelens", "options": {options}, "secretOptions": [{secret}]}}"#
                )
            )
        )
    };
    let doc =
        |containers: String| format!(r#"{{"family": "f", "containerDefinitions": {containers}}}"#);
    assert_eq!(
        problems(&doc(app(
            r#"{"Name": "stdout", "Match": "*\n[OUTPUT]\n    Name  http"}"#,
            r#"{"name": "apikey", "valueFrom": "k"}"#
        ))),
        vec![
            r#"containerDefinitions[1].logConfiguration.options.Match: "*\n[OUTPUT]\n    Name  http" cannot be written into the log router's configuration file: it contains the control character U+000A; remove it"#
        ]
    );
    assert_eq!(
        problems(&doc(app(
            r#"{"Name": "stdout", "Log Level": "debug", "x\u001b": "y"}"#,
            r#"{"name": "api\rkey", "valueFrom": "k"}"#
        ))),
        vec![
            r#"containerDefinitions[1].logConfiguration.options["Log Level"]: "Log Level" cannot be an option name in the log router's configuration file: it contains whitespace, which ends the name there; remove it"#,
            r#"containerDefinitions[1].logConfiguration.options["x\u{1b}"]: "x\u{1b}" cannot be written into the log router's configuration file: it contains the control character U+001B; remove it"#,
            r#"containerDefinitions[1].logConfiguration.secretOptions[0].name: "api\rkey" cannot be written into the log router's configuration file: it contains the control character U+000D; remove it"#,
        ]
    );
    assert_eq!(
        one(&task(&c(
            "r",
            r#""firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "file", "config-file-value": "/a\u0007.conf"}}"#,
        ))),
        r#"containerDefinitions[0].firelensConfiguration.options.config-file-value: "/a\u{7}.conf" cannot be written into the log router's configuration file: it contains the control character U+0007; remove it"#
    );
    // Ordinary options still pass.
    valid(&doc(app(
        r#"{"Name": "cloudwatch", "region": "eu-west-1", "log_group_name": "/ecs/app"}"#,
        r#"{"name": "apikey", "valueFrom": "k"}"#,
    )));
}

#[test]
fn images_with_control_characters_are_refused() {
    assert_eq!(
        one(&task(r#"{"name": "web", "image": "busybox\u001b[2J"}"#)),
        r#"containerDefinitions[0].image: "busybox\u{1b}[2J" is not an image reference: it contains the control character U+001B"#
    );
}

#[test]
fn firelens_rules() {
    let cases: &[(&str, String, &[&str])] = &[
        (
            "no type",
            task(&c("r", r#""firelensConfiguration": {}"#)),
            &[
                r#"containerDefinitions[0].firelensConfiguration.type: missing required field; the log router's type, "fluentbit" or "fluentd""#,
            ],
        ),
        (
            "bad type",
            task(&c("r", r#""firelensConfiguration": {"type": "vector"}"#)),
            &[
                r#"containerDefinitions[0].firelensConfiguration.type: "vector" is not a FireLens router type; expected "fluentbit" or "fluentd""#,
            ],
        ),
        (
            "unknown option, bad boolean",
            task(&c(
                "r",
                r#""firelensConfiguration": {"type": "fluentbit", "options": {"enable-ecs-log-metadata": "yes", "cluster": "x"}}"#,
            )),
            &[
                r#"containerDefinitions[0].firelensConfiguration.options.enable-ecs-log-metadata: expected "true" or "false", found "yes""#,
                r#"containerDefinitions[0].firelensConfiguration.options.cluster: "cluster" is not a FireLens option; expected one of enable-ecs-log-metadata, config-file-type, config-file-value"#,
            ],
        ),
        (
            "file without a value",
            task(&c(
                "r",
                r#""firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "file"}}"#,
            )),
            &[
                "containerDefinitions[0].firelensConfiguration.options.config-file-value: missing: config-file-type is given, so name the configuration file's absolute path inside the router's image",
            ],
        ),
        (
            "relative file",
            task(&c(
                "r",
                r#""firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "file", "config-file-value": "extra.conf"}}"#,
            )),
            &[
                r#"containerDefinitions[0].firelensConfiguration.options.config-file-value: expected an absolute path without whitespace inside the router's image, found "extra.conf""#,
            ],
        ),
        (
            "s3",
            task(&c(
                "r",
                r#""firelensConfiguration": {"type": "fluentbit", "options": {"config-file-type": "s3", "config-file-value": "arn:aws:s3:::b/k"}}"#,
            )),
            &[
                r#"containerDefinitions[0].firelensConfiguration.options.config-file-type: "s3" needs Amazon S3, which berth does not reach; copy the file into the router's image (or mount it) and use "file" with its path"#,
            ],
        ),
        (
            "two routers",
            task(&format!("{},{}", c("a", ROUTER), c("b", ROUTER))),
            &[
                "containerDefinitions[1].firelensConfiguration: a task has at most one log router, and containerDefinitions[0].firelensConfiguration is one already; remove this firelensConfiguration",
            ],
        ),
        (
            "awsfirelens without a router",
            task(&c("app", TO_ROUTER)),
            &[
                r#"containerDefinitions[0].logConfiguration.logDriver: "awsfirelens" sends the logs to the task's log router, and this task has none; add a container with "firelensConfiguration": {"type": "fluentbit"} (or "fluentd"), or use a Docker log driver"#,
            ],
        ),
        (
            "the router logging to itself",
            task(&c("r", &format!("{ROUTER}, {TO_ROUTER}"))),
            &[
                "containerDefinitions[0].logConfiguration.logDriver: the log router cannot send its own logs to itself; give it a Docker log driver such as json-file",
            ],
        ),
        (
            "plugin options without the plugin",
            task(&format!(
                "{},{}",
                c("r", ROUTER),
                c(
                    "app",
                    r#""logConfiguration": {"logDriver": "awsfirelens", "options": {"region": "x", "include-pattern": "a", "log-driver-buffer-limit": "1"}, "secretOptions": [{"name": "apikey", "valueFrom": "k"}]}"#
                )
            )),
            &[
                r#"containerDefinitions[1].logConfiguration.options: options for the router's output plugin (region, apikey) need "Name" naming the plugin (the router at containerDefinitions[0] is fluentbit); add for example "Name": "cloudwatch""#,
            ],
        ),
    ];
    for (what, json, want) in cases {
        assert_eq!(&problems(json), want, "{what}");
    }
    // Only filters and the buffer limit: no output section, no plugin needed (the user's own
    // configuration file may hold the output), as on ECS.
    valid(&task(&format!(
        "{},{}",
        c("r", ROUTER),
        c(
            "app",
            r#""logConfiguration": {"logDriver": "awsfirelens", "options": {"exclude-pattern": "^debug"}}"#
        )
    )));
    assert_eq!(
        warnings(&task(&c(
            "r",
            r#""firelensConfiguration": {"type": "fluentbit", "options": {"config-file-value": "/x.conf"}}"#
        ))),
        [
            r#"containerDefinitions[0].firelensConfiguration.options.config-file-value: ignored without config-file-type (ECS ignores it too); add "config-file-type": "file" to include the file"#
        ]
    );
}

// --- secrets, secretOptions, environmentFiles --------------------------------------------------

#[test]
fn secrets_and_environment_files_are_read_as_references() {
    let text = task(&c(
        "web",
        r#""secrets": [{"name": "DB_PASSWORD", "valueFrom": "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbC123:password::"}, {"name": "API_KEY", "valueFrom": "/prod/api-key"}],
           "environmentFiles": [{"value": "arn:aws:s3:::my-bucket/web.env", "type": "s3"}, {"value": "/etc/berth/local.env", "type": "s3"}],
           "logConfiguration": {"logDriver": "json-file", "secretOptions": [{"name": "tag", "valueFrom": "arn:aws:ssm:us-east-1:123456789012:parameter/log/tag"}]}"#,
    ));
    let def = parse(&text).expect("valid").definition;
    let web = &def.container_definitions[0];
    assert_eq!(
        web.secrets,
        vec![
            crate::Secret {
                name: "DB_PASSWORD".into(),
                value_from:
                    "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbC123:password::"
                        .into()
            },
            crate::Secret {
                name: "API_KEY".into(),
                value_from: "/prod/api-key".into()
            },
        ]
    );
    assert_eq!(
        web.environment_files
            .iter()
            .map(|f| f.value.as_str())
            .collect::<Vec<_>>(),
        vec!["arn:aws:s3:::my-bucket/web.env", "/etc/berth/local.env"]
    );
    assert_eq!(
        web.log_secret_options(),
        &[crate::Secret {
            name: "tag".into(),
            value_from: "arn:aws:ssm:us-east-1:123456789012:parameter/log/tag".into()
        }]
    );
    // What is saved is the references, in ECS's names.
    let saved = serde_json::to_value(web).expect("serializes");
    assert_eq!(saved["secrets"][1]["valueFrom"], "/prod/api-key");
    assert_eq!(saved["environmentFiles"][0]["type"], "s3");
}

#[test]
fn bad_secrets_and_environment_files_are_errors_at_their_paths() {
    let text = task(&c(
        "web",
        r#""environment": [{"name": "A", "value": "x"}],
           "secrets": [{"name": "A", "valueFrom": "p"}, {"valueFrom": "arn:aws:s3:::b/k"}, {"name": "B=1"}, {"name": "C", "valueFrom": "arn:aws:secretsmanager:r:1:secret:x:k"}],
           "environmentFiles": [{"value": "relative.env", "type": "s3"}, {"value": "/x.env", "type": "file"}, {"type": "s3"}],
           "logConfiguration": {"logDriver": "json-file", "secretOptions": [{"name": "x", "valueFrom": ""}]}"#,
    ));
    assert_eq!(
        problems(&text),
        vec![
            "containerDefinitions[0].secrets[1].name: missing required field: the environment variable to set",
            r#"containerDefinitions[0].secrets[1].valueFrom: "arn:aws:s3:::b/k" names a resource of service "s3"; a secret comes from "ssm" (Parameter Store) or "secretsmanager""#,
            "containerDefinitions[0].secrets[2].valueFrom: missing required field: the ARN or name of the SSM parameter or Secrets Manager secret",
            r#"containerDefinitions[0].secrets[2].name: "B=1" must not contain "=""#,
            r#"containerDefinitions[0].secrets[3].valueFrom: "arn:aws:secretsmanager:r:1:secret:x:k" an invalid ARN format for the AWS Secrets Manager secret was specified: use arn:aws:secretsmanager:<region>:<account>:secret:<name> or …:secret:<name>:<json-key>:<version-stage>:<version-id> (each of the last three may be empty)"#,
            r#"containerDefinitions[0].environmentFiles[0].value: "relative.env" must be an S3 object ARN (arn:aws:s3:::<bucket>/<key>) or an absolute path on this host"#,
            r#"containerDefinitions[0].environmentFiles[1].type: "file" is not an environment file type; use "s3" (also for a local path)"#,
            "containerDefinitions[0].environmentFiles[2].value: missing required field: an S3 object ARN (arn:aws:s3:::<bucket>/<key>) or an absolute path",
            "containerDefinitions[0].logConfiguration.secretOptions[0].valueFrom: must not be empty",
        ]
    );
    assert_eq!(
        warnings(&task(&c(
            "web",
            r#""environment": [{"name": "A", "value": "x"}], "secrets": [{"name": "A", "valueFrom": "p"}, {"name": "A", "valueFrom": "q"}]"#
        ))),
        vec![
            r#"containerDefinitions[0].secrets[0].name: "A" is also set in environment; the secret's value wins, as on ECS"#,
            r#"containerDefinitions[0].secrets[1].name: duplicate environment variable "A" (also containerDefinitions[0].secrets[0]); the later one wins"#,
            r#"containerDefinitions[0].secrets[1].name: "A" is also set in environment; the secret's value wins, as on ECS"#,
        ]
    );
    let eleven: Vec<String> = (0..11)
        .map(|i| format!(r#"{{"value": "/f{i}.env", "type": "s3"}}"#))
        .collect();
    assert_eq!(
        one(&task(&c(
            "web",
            &format!(r#""environmentFiles": [{}]"#, eleven.join(","))
        ))),
        "containerDefinitions[0].environmentFiles: ECS takes at most 10 environment files per container, found 11; merge some"
    );
}

#[test]
fn repository_credentials_name_a_secret() {
    let parsed = parse(&task(&c(
        "web",
        r#""repositoryCredentials": {"credentialsParameter": "arn:aws:secretsmanager:eu-west-1:1:secret:reg"}"#,
    )))
    .expect("valid");
    assert_eq!(
        parsed.definition.container_definitions[0].repository_credentials,
        Some(crate::types::RepositoryCredentials {
            credentials_parameter: "arn:aws:secretsmanager:eu-west-1:1:secret:reg".into()
        })
    );
    assert!(
        parse(&task(&c("web", r#""repositoryCredentials": null"#)))
            .expect("null is absent")
            .definition
            .container_definitions[0]
            .repository_credentials
            .is_none()
    );
    assert_eq!(
        problems(&task(&c("web", r#""repositoryCredentials": {}"#))),
        vec![
            "containerDefinitions[0].repositoryCredentials.credentialsParameter: missing required field; the ARN or name of the secret holding {\"username\", \"password\"}"
        ]
    );
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""repositoryCredentials": {"credentialsParameter": ""}"#
        ))),
        vec![
            "containerDefinitions[0].repositoryCredentials.credentialsParameter: must not be empty"
        ]
    );
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""repositoryCredentials": {"credentialsParameter": "my secret"}"#
        ))),
        vec![
            "containerDefinitions[0].repositoryCredentials.credentialsParameter: \"my secret\" is not a secret ARN or name: it contains whitespace"
        ]
    );
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""repositoryCredentials": {"credentialsParameter": 7}"#
        ))),
        vec![
            "containerDefinitions[0].repositoryCredentials.credentialsParameter: expected a string, found a number (7)"
        ]
    );
}

#[test]
fn empty_ecs_fields_get_no_warning() {
    // The shape of a console export: every field present, most of them null or empty.
    let text = task_with(
        r#""taskRoleArn": null, "executionRoleArn": null, "placementConstraints": [], "requiresCompatibilities": [], "runtimePlatform": {}, "pidMode": null, "proxyConfiguration": null, "inferenceAccelerators": []"#,
        &c(
            "web",
            r#""links": [], "dnsServers": [], "dnsSearchDomains": null, "extraHosts": null, "linuxParameters": {}, "systemControls": [], "dockerSecurityOptions": [], "interactive": null, "pseudoTerminal": null, "disableNetworking": null, "secrets": [], "environmentFiles": [], "resourceRequirements": null, "portMappings": [{"containerPort": 80, "name": null, "appProtocol": null}]"#,
        ),
    );
    assert_eq!(warnings(&text), Vec::<String>::new());
    // Null is absent even for a field berth does not know; an empty value of an unknown field
    // still warns, as it may be a misspelt field.
    assert_eq!(
        warnings(&task(&c("web", r#""colour": null, "healthcheck": {}"#))),
        vec![
            r#"containerDefinitions[0].healthcheck: unknown field, ignored (did you mean "healthCheck"?)"#
        ]
    );
    // A value still gets the warning.
    assert_eq!(
        warnings(&task(&c("web", r#""versionConsistency": "disabled""#))),
        vec!["containerDefinitions[0].versionConsistency: not used by berth, ignored"]
    );
}

#[test]
fn duplicate_key_with_the_same_value_is_a_warning() {
    let text = task(&c("web", r#""essential": true, "essential": true"#));
    assert_eq!(
        warnings(&text),
        vec![
            "containerDefinitions[0].essential: duplicate field with the same value as before; the first is used, delete this one"
        ]
    );
    // Objects and arrays compare by content, in order.
    let text = task(&c(
        "web",
        r#""command": ["sh", "-c", "x"], "command": ["sh", "-c", "x"], "dockerLabels": {"a": "1", "a": "1"}"#,
    ));
    assert_eq!(
        warnings(&text),
        vec![
            "containerDefinitions[0].command: duplicate field with the same value as before; the first is used, delete this one",
            "containerDefinitions[0].dockerLabels.a: duplicate key with the same value as before; the first is used, delete this one",
        ]
    );
}

#[test]
fn duplicate_key_with_different_values_names_both() {
    assert_eq!(
        one(&task(&c("web", r#""essential": true, "essential": false"#))),
        "containerDefinitions[0].essential: duplicate field with a different value: first a boolean (true), here a boolean (false); keep one"
    );
    assert_eq!(
        one(&task(&c(
            "web",
            r#""dockerLabels": {"tier": "web", "tier": "db"}"#
        ))),
        r#"containerDefinitions[0].dockerLabels.tier: duplicate key with a different value: first a string ("web"), here a string ("db"); keep one"#
    );
    assert_eq!(
        one(&task(&c("web", r#""command": ["a"], "command": ["b"]"#))),
        "containerDefinitions[0].command: duplicate field with a different value: first an array, here an array; keep one"
    );
}

#[test]
fn health_check_command_without_keyword_shows_the_fix() {
    let hc = |cmd: &str| {
        task(&c(
            "web",
            &format!(r#""healthCheck": {{"command": {cmd}}}"#),
        ))
    };
    assert_eq!(
        one(&hc(r#"["/healthcheck"]"#)),
        r#"containerDefinitions[0].healthCheck.command[0]: must be "CMD" or "CMD-SHELL", found "/healthcheck"; to run the program write ["CMD", "/healthcheck"], or in a shell ["CMD-SHELL", "/healthcheck"]"#
    );
    assert_eq!(
        one(&hc(r#"["curl -f http://localhost/ || exit 1"]"#)),
        r#"containerDefinitions[0].healthCheck.command[0]: must be "CMD" or "CMD-SHELL", found "curl -f http://localhost/ || exit 1"; to run it in a shell write ["CMD-SHELL", "curl -f http://localhost/ || exit 1"]"#
    );
    assert_eq!(
        one(&hc(
            r#"["pg_isready", "-U", "postgres", "-h", "localhost", "-p", "5432"]"#
        )),
        r#"containerDefinitions[0].healthCheck.command[0]: must be "CMD" or "CMD-SHELL", found "pg_isready"; to run the program write ["CMD", "pg_isready", "-U", "postgres", "-h", ...]"#
    );
    assert_eq!(
        one(&hc(r#"["cmd-shell", "true"]"#)),
        r#"containerDefinitions[0].healthCheck.command[0]: must be "CMD" or "CMD-SHELL", found "cmd-shell"; the keyword is upper case: "CMD-SHELL""#
    );
}

// --- all together, in order ---------------------------------------------------------------------

#[test]
fn every_problem_at_once_in_document_order() {
    let text = r#"{
        "family": "bad family",
        "networkMode": "vpc",
        "containerDefinitions": [
            {"name": "web", "image": "busybox", "essential": false,
             "dependsOn": [{"containerName": "db", "condition": "START"}, {"containerName": "side", "condition": "HEALTHY"}],
             "mountPoints": [{"sourceVolume": "nope", "containerPath": "/x"}],
             "stopTimeout": -3},
            {"name": "side", "image": "", "essential": false},
            {"name": "web", "image": "busybox", "essential": false, "dependsOn": [{"containerName": "web", "condition": "START"}]}
        ],
        "volumes": [{"name": "v"}, {"name": "v"}]
    }"#;
    assert_eq!(
        problems(text),
        vec![
            r#"family: "bad family" is not a valid family name; use 1 to 255 letters, digits, hyphens and underscores"#,
            r#"networkMode: unknown network mode "vpc"; use bridge, host, awsvpc or none"#,
            r#"containerDefinitions[0].dependsOn[0].containerName: no container named "db" (known: web, side)"#,
            r#"containerDefinitions[0].dependsOn[1].condition: HEALTHY needs a healthCheck on container "side""#,
            r#"containerDefinitions[0].mountPoints[0].sourceVolume: no volume named "nope" (known: v)"#,
            "containerDefinitions[0].stopTimeout: must not be negative, found -3",
            "containerDefinitions[1].image: must not be empty",
            r#"containerDefinitions[2].name: duplicate container name "web" (also containerDefinitions[0])"#,
            r#"containerDefinitions[2].dependsOn[0].containerName: container "web" depends on itself"#,
            r#"containerDefinitions: no essential container; mark at least one container "essential": true"#,
            r#"volumes[1].name: duplicate volume name "v" (also volumes[0])"#,
        ]
    );
}

#[test]
fn parsing_is_deterministic() {
    let text = task(
        &[
            c("a", &dep("b")),
            c("b", &dep("c")),
            c("c", &dep("a")),
            c("d", r#""essential": "x", "q": 1, "r": 2"#),
        ]
        .join(","),
    );
    let first = parse(&text);
    for _ in 0..5 {
        assert_eq!(parse(&text), first);
    }
}

#[test]
fn paths_helpers() {
    assert_eq!(key_path("", "family"), "family");
    assert_eq!(key_path("a[0]", "b"), "a[0].b");
    assert_eq!(key_path("labels", "com.x"), r#"labels["com.x"]"#);
    assert_eq!(key_path("", ""), r#"[""]"#);
    assert_eq!(parent_path("a[0].b"), Some("a[0]"));
    assert_eq!(parent_path("a[0]"), Some("a"));
    assert_eq!(parent_path("a"), Some(""));
    assert_eq!(parent_path(""), None);
}

#[test]
fn edit_distance_examples() {
    assert_eq!(edit_distance("healthcheck", "healthcheck"), 0);
    assert_eq!(edit_distance("imgae", "image"), 2);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(
        unknown_field_message("imgae", CONTAINER.known),
        r#"unknown field, ignored (did you mean "image"?)"#
    );
    assert_eq!(
        unknown_field_message("zzz", CONTAINER.known),
        "unknown field, ignored"
    );
}

// --- links ----------------------------------------------------------------------------------------

#[test]
fn links_are_read_with_ecs_alias_syntax() {
    let parsed = valid(&task(&format!(
        "{}, {}, {}",
        c("web", r#""links": ["db", "cache:kv", "db:database"]"#),
        c("db", ""),
        c("cache", ""),
    )));
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    assert_eq!(
        parsed.definition.container_definitions[0].links,
        vec![
            crate::types::Link::new("db"),
            crate::types::Link::with_alias("cache", "kv"),
            crate::types::Link::with_alias("db", "database"),
        ]
    );
}

#[test]
fn a_link_must_name_a_container_of_the_task() {
    assert_eq!(
        one(&task(&format!(
            "{}, {}",
            c("web", ""),
            c("app", r#""links": ["web", "db:database"]"#)
        ))),
        r#"containerDefinitions[1].links[1]: no container named "db" (known: web, app)"#
    );
}

#[test]
fn link_syntax_and_alias_rules() {
    assert_eq!(
        problems(&task(&format!(
            "{}, {}",
            c(
                "web",
                r#""links": ["db:a:b", ":x", "db:", "db:my.db", "web", 7, "db:x", "db:x"]"#
            ),
            c("db", "")
        ))),
        vec![
            r#"containerDefinitions[0].links[0]: "db:a:b" is not a link; write "container" or "container:alias" (one colon at most)"#,
            r#"containerDefinitions[0].links[1]: ":x" names no container; write "container" or "container:alias""#,
            r#"containerDefinitions[0].links[2]: "db:" has an empty alias; write "db" or "db:alias""#,
            r#"containerDefinitions[0].links[3]: "my.db" is not a valid link alias; use 1 to 255 letters, digits, hyphens and underscores"#,
            "containerDefinitions[0].links[4]: a container cannot link to itself",
            "containerDefinitions[0].links[5]: expected a string, found a number (7)",
            r#"containerDefinitions[0].links[7]: alias "x" is already used by containerDefinitions[0].links[6]; give each link its own alias ("db:other")"#,
        ]
    );
}

#[test]
fn links_need_bridge_network_mode() {
    let containers = format!("{}, {}", c("web", r#""links": ["db"]"#), c("db", ""));
    assert_eq!(
        one(&task_with(r#""networkMode": "host""#, &containers)),
        "containerDefinitions[0].links: links need network mode bridge; this task uses host: remove links (in host mode containers reach each other on localhost)"
    );
    assert_eq!(
        one(&task_with(r#""networkMode": "none""#, &containers)),
        "containerDefinitions[0].links: links need network mode bridge; this task uses none: remove links (in none mode a container has no network to reach another)"
    );
    valid(&task_with(r#""networkMode": "bridge""#, &containers));
    // An empty list is no link at all.
    valid(&task_with(
        r#""networkMode": "host""#,
        &c("web", r#""links": []"#),
    ));
}

#[test]
fn a_link_counts_as_a_start_dependency_for_cycles() {
    assert_eq!(
        one(&task(&format!(
            "{}, {}",
            c("web", r#""links": ["db"]"#),
            c(
                "db",
                r#""dependsOn": [{"containerName": "web", "condition": "START"}]"#
            )
        ))),
        "containerDefinitions[0].links[0]: dependency cycle: web -> db -> web (each container waits for the next)"
    );
    assert_eq!(
        one(&task(&format!(
            "{}, {}",
            c("a", r#""links": ["b"]"#),
            c("b", r#""links": ["a"]"#)
        ))),
        "containerDefinitions[0].links[0]: dependency cycle: a -> b -> a (each container waits for the next)"
    );
}

#[test]
fn a_link_to_a_container_that_must_have_exited_is_an_error() {
    assert_eq!(
        one(&task(&format!(
            "{}, {}",
            c("init", r#""essential": false"#),
            c(
                "web",
                r#""links": ["init"], "dependsOn": [{"containerName": "init", "condition": "SUCCESS"}]"#
            )
        ))),
        r#"containerDefinitions[1].links[0]: container "init" will have exited when this one starts (it waits for it with SUCCESS), and Docker links only to a running container; remove the link or the dependency"#
    );
}

#[test]
fn awsvpc_refuses_what_the_task_namespace_owns() {
    let text = r#"{
        "family": "f", "networkMode": "awsvpc",
        "containerDefinitions": [
            {"name": "web", "image": "busybox", "hostname": "web",
             "dnsServers": ["10.0.0.2"], "dnsSearchDomains": ["corp"],
             "extraHosts": [{"hostname": "db", "ipAddress": "10.0.0.9"}],
             "portMappings": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 443}]},
            {"name": "side", "image": "busybox", "links": ["web"],
             "portMappings": [{"containerPort": 443, "hostPort": 443}]}
        ]
    }"#;
    assert_eq!(
        problems(text),
        vec![
            "containerDefinitions[0].hostname: hostname cannot be set in awsvpc network mode (every container of the task has the task's hostname); remove it",
            "containerDefinitions[0].dnsServers: dnsServers cannot be set in awsvpc network mode (the task's containers share one network namespace, whose DNS settings and /etc/hosts belong to the task); remove it, or use bridge",
            "containerDefinitions[0].dnsSearchDomains: dnsSearchDomains cannot be set in awsvpc network mode (the task's containers share one network namespace, whose DNS settings and /etc/hosts belong to the task); remove it, or use bridge",
            "containerDefinitions[0].extraHosts: extraHosts cannot be set in awsvpc network mode (the task's containers share one network namespace, whose DNS settings and /etc/hosts belong to the task); remove it, or use bridge",
            "containerDefinitions[0].portMappings[0].hostPort: in awsvpc network mode hostPort must be left out or equal containerPort (80), found 8080",
            "containerDefinitions[1].links: links need network mode bridge; this task uses awsvpc: remove links (the containers of an awsvpc task share one network namespace and reach each other on localhost)",
            "containerDefinitions[1].portMappings[0].hostPort: host port 443/tcp is already used by containerDefinitions[0].portMappings[1]",
        ]
    );
    let ok = r#"{"family": "f", "networkMode": "awsvpc", "pidMode": "task", "ipcMode": "task",
        "containerDefinitions": [{"name": "web", "image": "busybox",
            "portMappings": [{"containerPort": 80}, {"containerPort": 81, "hostPort": 81}],
            "systemControls": [{"namespace": "net.ipv4.tcp_keepalive_time", "value": "60"}]}]}"#;
    let def = valid(ok).definition;
    assert_eq!(def.network_mode, NetworkMode::Awsvpc);
    assert_eq!(def.pid_mode, Some(crate::PidMode::Task));
    assert_eq!(def.ipc_mode, Some(crate::IpcMode::Task));
}

#[test]
fn restart_policy_is_read_with_ecs_defaults() {
    let parsed = valid(&task(&c(
        "web",
        r#""restartPolicy": {"enabled": true, "ignoredExitCodes": [0, 2], "restartAttemptPeriod": 60}"#,
    )));
    let policy = parsed.definition.container_definitions[0]
        .restart_policy
        .clone()
        .expect("a policy");
    assert_eq!(
        policy,
        crate::types::RestartPolicy {
            enabled: true,
            ignored_exit_codes: vec![0, 2],
            restart_attempt_period: 60,
        }
    );
    let defaults = valid(&task(&c("web", r#""restartPolicy": {"enabled": true}"#)));
    let policy = defaults.definition.container_definitions[0]
        .restart_policy
        .clone()
        .expect("a policy");
    assert_eq!(policy.restart_attempt_period, 300, "ECS's default period");
    assert!(policy.ignored_exit_codes.is_empty());
    assert!(defaults.warnings.is_empty(), "{:?}", defaults.warnings);
    let absent = valid(&task(&c("web", r#""restartPolicy": null"#)));
    assert_eq!(
        absent.definition.container_definitions[0].restart_policy,
        None
    );
}

#[test]
fn restart_policy_problems_name_their_field() {
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""restartPolicy": {"enabled": "yes", "restartAttemptPeriod": 59}"#
        ))),
        [
            "containerDefinitions[0].restartPolicy.enabled: expected a boolean, found a string (\"yes\")",
            "containerDefinitions[0].restartPolicy.restartAttemptPeriod: must be at least 60 seconds, found 59",
        ]
    );
    assert_eq!(
        problems(&task(&c(
            "web",
            r#""restartPolicy": {"restartAttemptPeriod": 1801, "ignoredExitCodes": [1, "2", 4294967296]}"#
        ))),
        [
            "containerDefinitions[0].restartPolicy.enabled: missing required field; true to restart the container when it exits, false to keep it stopped",
            "containerDefinitions[0].restartPolicy.restartAttemptPeriod: must be at most 1800 seconds, found 1801",
            "containerDefinitions[0].restartPolicy.ignoredExitCodes[1]: expected an integer, found a string (\"2\")",
            "containerDefinitions[0].restartPolicy.ignoredExitCodes[2]: 4294967296 is not an exit code: must be a 32-bit integer",
        ]
    );
    let many: Vec<String> = (0..51).map(|n| n.to_string()).collect();
    assert_eq!(
        problems(&task(&c(
            "web",
            &format!(
                r#""restartPolicy": {{"enabled": true, "ignoredExitCodes": [{}]}}"#,
                many.join(",")
            )
        ))),
        [
            "containerDefinitions[0].restartPolicy.ignoredExitCodes: at most 50 exit codes may be listed, found 51"
        ]
    );
    assert_eq!(
        warnings(&task(&c(
            "web",
            r#""restartPolicy": {"enabled": true, "maxRestarts": 3}"#
        ))),
        ["containerDefinitions[0].restartPolicy.maxRestarts: unknown field, ignored"]
    );
}

#[test]
fn restart_policy_warnings() {
    assert_eq!(
        warnings(&task(&c(
            "web",
            r#""restartPolicy": {"enabled": true, "ignoredExitCodes": [1, 1]}"#
        ))),
        [
            "containerDefinitions[0].restartPolicy.ignoredExitCodes[1]: exit code 1 is already listed at containerDefinitions[0].restartPolicy.ignoredExitCodes[0]"
        ]
    );
    let json = task(&format!(
        "{}, {}",
        c(
            "init",
            r#""essential": false, "restartPolicy": {"enabled": true}"#
        ),
        c(
            "web",
            r#""dependsOn": [{"containerName": "init", "condition": "SUCCESS"}]"#
        )
    ));
    assert_eq!(
        warnings(&json),
        [
            "containerDefinitions[1].dependsOn[0].condition: SUCCESS waits for container \"init\" to stay stopped, but its restartPolicy (containerDefinitions[0].restartPolicy) restarts it after an exit; the condition holds only once an exit is not restarted (an ignored exit code, or an exit before its restartAttemptPeriod)"
        ]
    );
    // A disabled policy restarts nothing: no warning.
    let json = task(&format!(
        "{}, {}",
        c(
            "init",
            r#""essential": false, "restartPolicy": {"enabled": false}"#
        ),
        c(
            "web",
            r#""dependsOn": [{"containerName": "init", "condition": "COMPLETE"}]"#
        )
    ));
    assert!(warnings(&json).is_empty());
}

#[test]
fn tags_come_from_the_wrapper_and_the_task_in_order_without_warnings() {
    use crate::tags::Tag;
    let bare = valid(
        r#"{"family":"t","containerDefinitions":[{"name":"a","image":"i"}],
        "tags":[{"key":"team","value":"web"},{"key":"empty"}]}"#,
    );
    assert!(bare.warnings.is_empty(), "{:?}", bare.warnings);
    assert_eq!(
        bare.definition.tags,
        vec![Tag::new("team", "web"), Tag::new("empty", "")]
    );
    let wrapped = valid(
        r#"{"taskDefinition":{"family":"t","containerDefinitions":[{"name":"a","image":"i"}],
        "tags":[{"key":"inner","value":"1"}]},"tags":[{"key":"outer","value":"2"}]}"#,
    );
    assert!(wrapped.warnings.is_empty(), "{:?}", wrapped.warnings);
    assert_eq!(
        wrapped.definition.tags,
        vec![Tag::new("outer", "2"), Tag::new("inner", "1")]
    );
    // A definition without tags serializes as before (the store's old records have no key).
    let none = valid(&task(&c("a", "")));
    let text = serde_json::to_string(&none.definition).expect("json");
    assert!(!text.contains("tags"), "{text}");
    let back: crate::TaskDefinition = serde_json::from_str(&text).expect("loads");
    assert!(back.tags.is_empty());
}

#[test]
fn at_most_ten_containers_unless_the_caller_allows_more() {
    let cs = |n: usize| {
        (0..n)
            .map(|i| c(&format!("c{i}"), ""))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(
        valid(&task(&cs(10))).definition.container_definitions.len(),
        10
    );
    assert_eq!(
        problems(&task(&cs(11))),
        vec![
            "containerDefinitions: lists 11 containers; a task may have at most 10 (ECS's limit is 10): split it into several tasks, or raise the limit with the agent's --max-containers-per-task"
        ]
    );
    let raised = Limits {
        max_containers: 2000,
    };
    let wide = task(&cs(2000));
    assert!(parse_with(&wide, &raised).is_ok());
    assert!(
        parse_bytes_with(
            wide.as_bytes(),
            &Limits {
                max_containers: 1999
            }
        )
        .is_err()
    );
}

#[test]
fn task_and_execution_roles_are_read_and_checked() {
    let text = task_with(
        r#""taskRoleArn": "arn:aws:iam::123456789012:role/app", "executionRoleArn": "ecsTaskExecutionRole""#,
        &c("web", ""),
    );
    let def = parse(&text).unwrap().definition;
    assert_eq!(
        def.task_role_arn.as_deref(),
        Some("arn:aws:iam::123456789012:role/app")
    );
    assert_eq!(
        def.execution_role_arn.as_deref(),
        Some("ecsTaskExecutionRole")
    );
    let bad = task_with(r#""taskRoleArn": "arn:aws:s3:::bucket""#, &c("web", ""));
    let e = parse(&bad).unwrap_err().to_string();
    assert!(
        e.contains("taskRoleArn") && e.contains("not an IAM role"),
        "{e}"
    );
}
