//! The files the actor writes, each through `berth_fs::write_atomic` (a temporary file renamed
//! over the target; never deleting any: the task cleanup removes the task directory):
//! - FireLens's router configuration ([`prepare_firelens`], pure text from
//!   [`crate::firelens::generate`]) and its socket directory, before the router's first create;
//!   a failure stops the router without running it (and so, through their `START` dependency,
//!   the containers that log to it) with a reason naming the file or directory;
//! - with [`RunConfig::container_metadata`], each container's metadata file
//!   ([`crate::container_metadata`]): its first form in the create effect before the create, READY
//!   in the start effect after the start is reported ([`ReadyFile`]), and again after adoption
//!   when it is not READY ([`refresh_metadata_files`]); a file that cannot be written is a warning.

use super::RunConfig;
use crate::container_metadata::{self, Paths as MetadataPaths, TaskFacts};
use crate::decide::Action;
use crate::report::now_ms;
use crate::runtime::Runtime;
use crate::spec;
use crate::state::{Status, TaskState};
use std::path::Path;

/// The metadata file's task facts and paths for container `i`, when the option is on (the pause
/// container, the agent's own, gets none, as ECS's internal containers get none).
pub(super) fn metadata_file(
    state: &TaskState,
    config: &RunConfig,
    i: usize,
) -> Option<(TaskFacts, MetadataPaths)> {
    let settings = config.container_metadata.as_ref()?;
    if state.is_pause(i) {
        return None;
    }
    Some((
        TaskFacts::new(&config.identity, settings, state),
        MetadataPaths::new(&config.data_dir, &state.id, &state.containers[i].name),
    ))
}

/// Container `i`'s network mode as Docker's `HostConfig.NetworkMode` shows it (the READY file
/// names it when Docker lists no network, as for a container joined to the pause container's):
/// the mode it is created with ([`spec::network_mode`]), where Docker keeps a joined container's
/// target as `container:<id>`.
pub(super) fn container_network_mode(state: &TaskState, i: usize) -> String {
    let mode = spec::network_mode(state, i);
    let pause = state.pause_index().map(|p| &state.containers[p]);
    match pause {
        Some(p) if mode == format!("container:{}", p.docker_name) => p
            .docker_id
            .as_ref()
            .map_or(mode, |id| format!("container:{id}")),
        _ => mode,
    }
}

/// Create the container's metadata directory and replace its file (a temporary file renamed over
/// it, through berth-fs), off the async threads.
pub(super) async fn write_metadata_file(paths: MetadataPaths, text: Vec<u8>) -> Result<(), String> {
    let dir = paths.dir.clone();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&paths.dir)
            .map_err(|e| format!("cannot create {}: {e}", paths.dir.display()))?;
        berth_fs::write_atomic(&paths.file, &text).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(format!("writing in {}: {e}", dir.display())))
}

/// What the READY metadata file of one container needs besides Docker's answers.
pub(super) struct ReadyFile {
    pub facts: TaskFacts,
    pub paths: MetadataPaths,
    pub container: String,
    pub image: String,
    pub network_mode: String,
}

impl ReadyFile {
    /// Inspect the running container and write its READY file. Not running (it exited already),
    /// or a failed inspect: nothing is written (ECS's rule), with a warning for a failure.
    pub async fn write<R: Runtime>(self, rt: &R, id: &str) {
        let facts = match rt.inspect(id).await {
            Ok(info) if info.running => info,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(task = %self.facts.task_id, container = %self.container, error = %e, "cannot inspect the container for its metadata file");
                return;
            }
        };
        let details = match rt.inspect_details(id).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(task = %self.facts.task_id, container = %self.container, error = %e, "cannot inspect the container for its metadata file");
                return;
            }
        };
        let docker = container_metadata::DockerFacts {
            id: facts.id,
            // Docker's own form of the name, with the leading slash inspect gives.
            name: format!("/{}", facts.name),
            image_name: self.image,
            network_mode: self.network_mode,
            details,
        };
        let text = container_metadata::ready(&self.facts, &self.container, &docker);
        if let Err(e) = write_metadata_file(self.paths, text).await {
            tracing::warn!(task = %self.facts.task_id, container = %self.container, error = %e, "cannot write the container metadata file");
        }
    }
}

/// After a restart: a running container whose metadata file was written (its directory exists:
/// it was created with the mount) but is not READY gets its READY file now (the agent may have
/// stopped between the start and the write).
pub(super) async fn refresh_metadata_files<R: Runtime>(
    rt: &R,
    state: &TaskState,
    config: &RunConfig,
) {
    for i in 0..state.containers.len() {
        let c = &state.containers[i];
        let (Some(id), Status::Running) = (&c.docker_id, c.known) else {
            continue;
        };
        let Some((facts, paths)) = metadata_file(state, config, i) else {
            continue;
        };
        if !paths.dir.is_dir()
            || std::fs::read(&paths.file).is_ok_and(|t| container_metadata::is_ready(&t))
        {
            continue;
        }
        let ready = ReadyFile {
            facts,
            paths,
            container: c.name.clone(),
            image: state.def(i).image.clone(),
            network_mode: container_network_mode(state, i),
        };
        ready.write(rt, id).await;
    }
}

/// Write the log router's configuration and create its socket directory, when the task has a
/// router whose containers are not created yet (an adopted router keeps what it has). A failure
/// stops the router without running it (and so, through their `START` dependency, the containers
/// that log to it) with a reason naming the file.
pub(super) fn prepare_firelens(state: &mut TaskState, config: &RunConfig) {
    let Some(r) = berth_model::firelens::router(&state.definition) else {
        return;
    };
    let i = r;
    if state.containers[i].docker_id.is_some() || state.containers[i].known >= Status::Created {
        return;
    }
    let paths = crate::firelens::Paths::new(&config.data_dir, &state.id);
    let identity = crate::firelens::TaskIdentity::new(&config.identity, &state.id);
    let result = paths.check().and_then(|()| {
        let text = router_configuration(&state.definition, &identity, &paths.config_file)?;
        let owner = crate::firelens::socket_owner(state.def(i).user.as_deref())?;
        std::fs::create_dir_all(&paths.config_dir)
            .and_then(|()| std::fs::create_dir_all(&paths.socket_dir))
            .map_err(|e| format!("cannot create {}: {e}", paths.dir.display()))?;
        if let Some((uid, gid)) = owner {
            // ECS: the router's user must be able to create its socket there.
            std::os::unix::fs::chown(&paths.socket_dir, Some(uid), gid).map_err(|e| {
                format!(
                    "cannot give {} to user {uid}: {e}",
                    paths.socket_dir.display()
                )
            })?;
        }
        berth_fs::write_atomic(&paths.config_file, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", paths.config_file.display()))
    });
    if let Err(message) = result {
        tracing::warn!(task = %state.id, %message, "firelens");
        state.begin(
            &Action::MarkStopped {
                container: i,
                reason: Some(format!("FireLens: {message}")),
                exit_code: None,
            },
            now_ms(),
        );
    }
}

/// The router's configuration text, or an error naming the file it was to be written to. The
/// caller has found the router, so there is always a text; were there none (a bug), the router is
/// stopped with this reason rather than given an empty configuration.
fn router_configuration(
    definition: &berth_model::TaskDefinition,
    identity: &crate::firelens::TaskIdentity,
    file: &Path,
) -> Result<String, String> {
    crate::firelens::generate(definition, identity).ok_or_else(|| {
        format!(
            "cannot write {}: the task has no log router configuration to write (please report this)",
            file.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_router_configuration_that_cannot_be_generated_is_an_error_naming_the_file() {
        let def = berth_model::TaskDefinition::new(
            "f",
            vec![berth_model::ContainerDefinition::new("app", "img")],
        );
        let identity =
            crate::firelens::TaskIdentity::new(&crate::Identity::default(), "0123456789abcdef");
        let file = Path::new("/data/tasks/t/firelens/config/fluent.conf");
        let err = router_configuration(&def, &identity, file).expect_err("no router");
        assert_eq!(
            err,
            "cannot write /data/tasks/t/firelens/config/fluent.conf: the task has no log router configuration to write (please report this)"
        );
    }

    #[test]
    fn a_file_that_cannot_be_prepared_stops_the_router_with_a_reason_naming_it() {
        let json = r#"{"family": "f", "containerDefinitions": [
            {"name": "log_router", "image": "fluent-bit", "essential": false,
             "firelensConfiguration": {"type": "fluentbit"}},
            {"name": "app", "image": "app",
             "logConfiguration": {"logDriver": "awsfirelens", "options": {"Name": "stdout"}}}
        ]}"#;
        let def = berth_model::parse(json).expect("valid").definition;
        let mut state = TaskState::new("0123456789abcdef0123456789abcdef".into(), def, 0);
        // The data directory is a file: the router's directories cannot be created in it.
        let data = tempfile::NamedTempFile::new().expect("a file");
        let config = RunConfig::new(data.path().to_path_buf());
        prepare_firelens(&mut state, &config);
        let router = &state.containers[0];
        assert_eq!(router.known, Status::Stopped);
        let reason = router.reason.as_deref().unwrap_or_default();
        let dir = crate::firelens::Paths::new(data.path(), &state.id).dir;
        assert!(
            reason.starts_with(&format!("FireLens: cannot create {}: ", dir.display())),
            "{reason}"
        );
    }
}
