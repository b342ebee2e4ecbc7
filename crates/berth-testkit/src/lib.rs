//! Helpers for berth's tests (a dev-only crate: no library or binary of berth depends on it
//! outside `[dev-dependencies]`). Most run against a real Docker Engine.
//!
//! Modules: [`contract`], the runtime contract suite that the fake and the Docker runtime both
//! run; [`ns`], running one test in a private mount namespace ([`ns_test!`]); [`mount`], the only
//! test code that mounts and unmounts, and [`mount::Scratch`]; [`berth_run`], running
//! `berth run --output json` and reading its JSON lines; [`volume_plugin`], `berth volume-plugin`
//! as a process; [`engine_proxy`], a proxy in front of the Engine that refuses or delays chosen
//! calls; [`etcd`], a real etcd cluster of a test's own (members killed and restarted at will);
//! [`tcp_proxy`], a loopback TCP proxy a test cuts and heals (a network partition between one
//! process and etcd); [`second_engine`], a disposable Docker Engine of a test's own, for what would
//! leave the machine's Engine changed (a legacy volume plugin it would remember); [`aws`], the
//! `moto_server` that stands in for AWS (its CLI, a private server with IAM enforced, a stalled or
//! closed endpoint). The crate root has the Docker helpers.
//!
//! Run the tests through `scripts/test`: it makes sure an Engine answers, builds the offline test
//! images (`scripts/setup-images`) and starts a throwaway registry and a `moto_server` (a local AWS)
//! on 127.0.0.1, and passes them to the tests in environment variables:
//!
//! | variable                  | helper             | default                         |
//! |---------------------------|--------------------|---------------------------------|
//! | `BERTH_TEST_IMAGE`        | [`test_image`]     | `berth-test/busybox:latest`     |
//! | `BERTH_TEST_IMAGE_ALT`    | [`test_image_alt`] | `berth-test/busybox-alt:latest` |
//! | `BERTH_TEST_REGISTRY`     | [`registry`]       | none: panics                    |
//! | `BERTH_TEST_REGISTRY_LOG` | [`registry_log`]   | none                            |
//! | `BERTH_TEST_AWS_ENDPOINT`, `BERTH_TEST_AWS_VENV` | [`aws::Moto::from_env`] | none: panics |
//!
//! No helper lets a test pass by skipping its work: when the Engine, an image or the registry is
//! missing, the helper panics with a message that says how to get it.
//!
//! Everything a test creates should carry the label [`TEST_LABEL`] (see [`test_labels`]), so that
//! `scripts/test` can remove what a test leaked, and be wrapped in a [`ContainerGuard`] or
//! [`VolumeGuard`], which removes it when the test ends, even by panicking.
//!
//! The Docker client crate is re-exported as [`bollard`]: tests and benchmarks outside
//! `berth-docker` reach the Engine's API through it, so no other crate of berth depends on bollard.

pub mod aws;
pub mod berth_run;
pub mod contract;
pub mod engine_proxy;
pub mod etcd;
pub mod mount;
pub mod ns;
pub mod second_engine;
pub mod tcp_proxy;
pub mod volume_plugin;

/// The Docker Engine API client, for tests and benchmarks that talk to the Engine directly.
pub use bollard;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error;
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions, RemoveVolumeOptions};
use futures_util::StreamExt;

/// Label carried by every container, volume and network a test creates.
pub const TEST_LABEL: &str = "berth.test";

/// Offline test image used when `BERTH_TEST_IMAGE` is unset.
pub const DEFAULT_TEST_IMAGE: &str = "berth-test/busybox:latest";

/// Second, different offline test image used when `BERTH_TEST_IMAGE_ALT` is unset.
pub const DEFAULT_TEST_IMAGE_ALT: &str = "berth-test/busybox-alt:latest";

/// How long connecting to the Engine, or removing a resource on drop, may take.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(30);

/// A Docker client for the local Engine, speaking the Engine's own API version.
///
/// # Panics
///
/// When no Engine answers: berth's tests need one, and do not skip without it.
pub async fn docker() -> Docker {
    match connect().await {
        Ok(docker) => docker,
        Err(err) => panic!(
            "berth tests need a running Docker Engine: {err}; run scripts/test, which starts one"
        ),
    }
}

/// Connects with the local defaults (`DOCKER_HOST` or the Unix socket) and negotiates the version.
async fn connect() -> Result<Docker, String> {
    let negotiate = async {
        Docker::connect_with_local_defaults()?
            .negotiate_version()
            .await
    };
    match tokio::time::timeout(DOCKER_TIMEOUT, negotiate).await {
        Ok(Ok(docker)) => Ok(docker),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {} s", DOCKER_TIMEOUT.as_secs())),
    }
}

/// Name of the offline test image (`BERTH_TEST_IMAGE`, default [`DEFAULT_TEST_IMAGE`]).
pub fn test_image() -> String {
    env_or("BERTH_TEST_IMAGE", DEFAULT_TEST_IMAGE)
}

/// Name of the second offline test image (`BERTH_TEST_IMAGE_ALT`, default
/// [`DEFAULT_TEST_IMAGE_ALT`]): the same busybox plus a file `/etc/berth-alt`.
pub fn test_image_alt() -> String {
    env_or("BERTH_TEST_IMAGE_ALT", DEFAULT_TEST_IMAGE_ALT)
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// Checks that `image` exists in the Engine's local image store.
///
/// # Panics
///
/// When it does not (or cannot be inspected), pointing at `scripts/setup-images`.
pub async fn require_image(docker: &Docker, image: &str) {
    match docker.inspect_image(image).await {
        Ok(_) => {}
        Err(Error::DockerResponseServerError {
            status_code: 404, ..
        }) => panic!(
            "test image {image} is not in the Docker Engine: run scripts/setup-images \
             (scripts/test runs it)"
        ),
        Err(err) => panic!(
            "could not inspect test image {image}: {err}; run scripts/setup-images \
             (scripts/test runs it)"
        ),
    }
}

/// Checks that both offline test images exist; see [`require_image`].
pub async fn require_test_images(docker: &Docker) {
    require_image(docker, &test_image()).await;
    require_image(docker, &test_image_alt()).await;
}

/// Address (`host:port`) of the throwaway registry `scripts/test` started on 127.0.0.1.
///
/// # Panics
///
/// When `BERTH_TEST_REGISTRY` is not set.
pub fn registry() -> String {
    match std::env::var("BERTH_TEST_REGISTRY") {
        Ok(address) if !address.is_empty() => address,
        _ => panic!(
            "BERTH_TEST_REGISTRY is not set: run the tests through scripts/test, which starts a \
             registry"
        ),
    }
}

/// The throwaway registry's log file, when `scripts/test` gave one (`BERTH_TEST_REGISTRY_LOG`).
pub fn registry_log() -> Option<PathBuf> {
    std::env::var_os("BERTH_TEST_REGISTRY_LOG")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// A name no other test uses: `prefix` followed by 16 random hex digits (`prefix` should end
/// with a separator, e.g. `"berth-smoke-"`).
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// Labels to put on everything a test creates: `{TEST_LABEL: "1"}`.
pub fn test_labels() -> HashMap<String, String> {
    HashMap::from([(TEST_LABEL.to_owned(), "1".to_owned())])
}

/// Waits until the container stops and returns its exit code.
///
/// # Panics
///
/// When the Engine reports an error other than a non-zero exit.
pub async fn wait_exit_code(docker: &Docker, container: &str) -> i64 {
    let mut stream = docker.wait_container(container, None);
    match stream.next().await {
        Some(Ok(response)) => response.status_code,
        // bollard reports a non-zero exit as an error; for a test it is just the exit code.
        Some(Err(Error::DockerContainerWaitError { code, .. })) => code,
        Some(Err(err)) => panic!("waiting for container {container} failed: {err}"),
        None => panic!("waiting for container {container}: the Engine sent no answer"),
    }
}

/// Everything the container wrote to stdout and stderr so far, as (lossy) UTF-8.
///
/// # Panics
///
/// When the logs cannot be read.
pub async fn container_logs(docker: &Docker, container: &str) -> String {
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let mut stream = docker.logs(container, Some(options));
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(output) => text.push_str(&String::from_utf8_lossy(output.as_ref())),
            Err(err) => panic!("reading the logs of container {container} failed: {err}"),
        }
    }
    text
}

/// Force-removes a container (and its anonymous volumes) when dropped, even when the test panics.
///
/// A container that is already gone is fine: tests that remove their own container still hold a
/// guard for the case where they fail before doing so.
#[must_use = "the container is removed when the guard is dropped"]
#[derive(Debug)]
pub struct ContainerGuard {
    name: String,
    armed: bool,
}

impl ContainerGuard {
    /// Guards the container with this name or id (which need not exist yet).
    pub fn new(name_or_id: impl Into<String>) -> Self {
        Self {
            name: name_or_id.into(),
            armed: true,
        }
    }

    /// The guarded container's name or id.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps the container: the guard no longer removes it. Returns its name or id.
    pub fn disarm(mut self) -> String {
        self.armed = false;
        std::mem::take(&mut self.name)
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if self.armed {
            let name = self.name.clone();
            remove_on_own_thread("container", &self.name, move |docker| async move {
                let options = RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                docker.remove_container(&name, Some(options)).await
            });
        }
    }
}

/// Force-removes a volume when dropped, even when the test panics. A volume already gone is fine.
#[must_use = "the volume is removed when the guard is dropped"]
#[derive(Debug)]
pub struct VolumeGuard {
    name: String,
    armed: bool,
}

impl VolumeGuard {
    /// Guards the volume with this name (which need not exist yet).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            armed: true,
        }
    }

    /// The guarded volume's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps the volume: the guard no longer removes it. Returns its name.
    pub fn disarm(mut self) -> String {
        self.armed = false;
        std::mem::take(&mut self.name)
    }
}

impl Drop for VolumeGuard {
    fn drop(&mut self) {
        if self.armed {
            let name = self.name.clone();
            remove_on_own_thread("volume", &self.name, move |docker| async move {
                let options = RemoveVolumeOptions { force: true };
                docker.remove_volume(&name, Some(options)).await
            });
        }
    }
}

/// Runs `remove` to completion from a `Drop`, which cannot be async.
///
/// The removal runs on a new thread with its own single-threaded runtime and its own client, and
/// the caller blocks until it is done. That works whatever state the test's runtime is in (inside
/// it, outside it, shutting down, unwinding from a panic). Errors are printed, never raised: a
/// panic while unwinding would abort the test binary. "No such object" (404) is success.
fn remove_on_own_thread<F, Fut>(kind: &'static str, name: &str, remove: F)
where
    F: FnOnce(Docker) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), Error>>,
{
    let thread = std::thread::Builder::new()
        .name(format!("berth-testkit-remove-{kind}"))
        .spawn(move || -> Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| format!("cannot build a runtime: {err}"))?;
            runtime.block_on(async {
                let docker = connect().await?;
                match tokio::time::timeout(DOCKER_TIMEOUT, remove(docker)).await {
                    Ok(Ok(()))
                    | Ok(Err(Error::DockerResponseServerError {
                        status_code: 404, ..
                    })) => Ok(()),
                    Ok(Err(err)) => Err(err.to_string()),
                    Err(_) => Err(format!("no answer within {} s", DOCKER_TIMEOUT.as_secs())),
                }
            })
        });
    let outcome = match thread {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err("the removal thread panicked".to_owned())),
        Err(err) => Err(format!("cannot spawn a thread: {err}")),
    };
    if let Err(err) = outcome {
        eprintln!(
            "berth-testkit: could not remove test {kind} {name}: {err} \
             (scripts/test removes everything labelled {TEST_LABEL} at the end)"
        );
    }
}

/// `docker ARGS` through the CLI; its stdout.
///
/// # Panics
///
/// When the docker CLI cannot run or the command fails (with its stderr).
pub fn docker_cli(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("berth tests need the docker CLI: {e}"));
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The ids of every container (running or not) that berth created for task family `family`
/// (label `berth.family`), through the docker CLI so it works from synchronous tests.
///
/// # Panics
///
/// When the docker CLI cannot run or `docker ps` fails.
pub fn family_containers(family: &str) -> Vec<String> {
    labelled_containers("berth.family", family).unwrap_or_else(|e| panic!("{e}"))
}

/// The ids of every container (running or not) labelled `key=value`, through the docker CLI so
/// it works from synchronous code; the error says which command failed and why.
pub fn labelled_containers(key: &str, value: &str) -> Result<Vec<String>, String> {
    let filter = format!("label={key}={value}");
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &filter])
        .output()
        .map_err(|e| format!("berth tests need the docker CLI: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "docker ps -aq --filter {filter} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// Force-removes every container labelled `key=value` (with its anonymous volumes). Never panics
/// (it runs from `Drop`): what it could not remove is printed, and `scripts/test` removes every
/// container labelled [`TEST_LABEL`] at the end of the run.
pub fn remove_labelled_containers(key: &str, value: &str) {
    let ids = match labelled_containers(key, value) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("berth-testkit: could not list containers labelled {key}={value}: {e}");
            return;
        }
    };
    for id in ids {
        match std::process::Command::new("docker")
            .args(["rm", "-f", "-v", &id])
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "berth-testkit: could not remove container {id} ({key}={value}): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("berth-testkit: could not run docker rm {id}: {e}"),
        }
    }
}

/// Removes every container of a task family (with its anonymous volumes) when dropped, even when
/// the test panics.
pub struct FamilyGuard(pub String);

impl Drop for FamilyGuard {
    fn drop(&mut self) {
        remove_labelled_containers("berth.family", &self.0);
    }
}

/// Removes every container labelled `key=value` (with its anonymous volumes) when dropped, even
/// when the test panics: for containers made by processes the test runs (agents on many nodes),
/// whose definitions carry the label in `dockerLabels`.
pub struct LabelGuard {
    pub key: String,
    pub value: String,
}

impl LabelGuard {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> LabelGuard {
        LabelGuard {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl Drop for LabelGuard {
    fn drop(&mut self) {
        remove_labelled_containers(&self.key, &self.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_differ_and_keep_the_prefix() {
        let a = unique_name("berth-x-");
        let b = unique_name("berth-x-");
        assert_ne!(a, b);
        assert!(a.starts_with("berth-x-"));
        assert_eq!(a.len(), "berth-x-".len() + 16);
        assert!(a["berth-x-".len()..].chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn test_labels_carry_the_test_label() {
        assert_eq!(test_labels().get(TEST_LABEL).map(String::as_str), Some("1"));
    }
}
