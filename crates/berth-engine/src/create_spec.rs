//! The one place a container's create spec is assembled: [`build`] takes the task's state and
//! every fact a create depends on besides it ([`Facts`]), and returns the whole spec the runtime
//! creates the container from. Its callers only supply facts; nothing else changes a spec.
//!
//! The parts, in the order they are applied (the order of the environment and the mounts):
//! - the definition's part ([`crate::spec::container_spec_with_values`]): the container's own
//!   fields, its volumes' mounts, the metadata endpoint's variables, the shared namespaces, the
//!   labels (with the task's [`TaskState::extra_labels`], such as a cluster node's); for the
//!   pause container its own spec ([`crate::spec::pause_spec`]);
//! - FireLens ([`crate::firelens::apply`]): the router's configuration file and socket
//!   directory, the apps' `fluentd` log driver;
//! - the `awslogs` driver's execution-role credentials and endpoint ([`crate::awslogs::apply`]);
//! - the pause container's image: the operator's (`--pause-image`) in place of berth's own;
//! - the `berth.data-dir` label ([`crate::spec::LABEL_DATA_DIR`]);
//! - the container metadata file's directory mount and `ECS_CONTAINER_METADATA_FILE`
//!   ([`crate::container_metadata::apply`]), when the file was written before the create.
//!
//! Pure. It is its own module, above [`crate::spec`], because FireLens and the metadata file
//! build on `spec`'s types: assembling inside `spec` would make the modules import each other.
//! Limit: the spec holds the values of the container's secrets; it is handed to the runtime and
//! never saved or logged.

use crate::awslogs;
use crate::container_metadata;
use crate::firelens;
use crate::secrets::TaskValues;
use crate::spec::{self, ContainerSpec, MetadataEndpoint, VolumePlan};
use crate::state::TaskState;
use std::path::Path;

/// What a container's create spec depends on besides the task's state.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// How each task volume is provided ([`spec::plan_volumes`]).
    pub volumes: &'a [(String, VolumePlan)],
    /// Where containers reach the task metadata endpoint, when it is served.
    pub endpoint: Option<&'a MetadataEndpoint>,
    /// The task's secrets and environment-file values, read before its first create.
    pub values: &'a TaskValues,
    /// The data directory: the `berth.data-dir` label, and where the task's FireLens files are.
    pub data_dir: &'a Path,
    /// The operator's pause image; None: berth's own ([`crate::pause_image`]).
    pub pause_image: Option<&'a str>,
    /// The container's metadata file, when it was written: mounted into the container and named
    /// by `ECS_CONTAINER_METADATA_FILE`. None: no file (the option is off, the pause container,
    /// or a file that could not be written).
    pub metadata_file: Option<&'a container_metadata::Paths>,
    /// What the host gives containers logging with `awslogs`.
    pub awslogs: &'a awslogs::Settings,
    /// The credentials endpoint is served: a task role's containers get its variable
    /// ([`crate::role_env`]).
    pub credentials: bool,
}

/// The complete create spec of container `i` (see the module docs for its parts).
pub fn build(state: &TaskState, i: usize, facts: &Facts<'_>) -> ContainerSpec {
    let mut spec = spec::container_spec_with_values(
        state,
        i,
        facts.volumes,
        facts.endpoint,
        facts.values.container(i),
    );
    firelens::apply(
        &mut spec,
        &state.definition,
        i,
        &state.id,
        &firelens::Paths::new(facts.data_dir, &state.id),
        facts.values,
    );
    awslogs::apply(&mut spec, state, i, facts.awslogs);
    crate::role_env::apply(&mut spec, state, i, facts.credentials);
    if let Some(own) = facts.pause_image.filter(|_| state.is_pause(i)) {
        spec.image = own.to_string();
    }
    spec.labels.insert(
        spec::LABEL_DATA_DIR.to_string(),
        facts.data_dir.display().to_string(),
    );
    if let Some(paths) = facts.metadata_file {
        container_metadata::apply(&mut spec, paths, &state.id, &state.containers[i].name);
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::NetworkMode;

    const TASK: &str = "0123456789abcdef0123456789abcdef";

    fn firelens_task(network: NetworkMode) -> TaskState {
        let json = r#"{"family": "f", "networkMode": "NETWORK", "containerDefinitions": [
            {"name": "log_router", "image": "fluent-bit", "essential": true,
             "firelensConfiguration": {"type": "fluentbit"}},
            {"name": "app", "image": "app", "essential": true,
             "logConfiguration": {"logDriver": "awsfirelens", "options": {"Name": "stdout"}}}
        ]}"#
        .replace("NETWORK", network.as_str());
        let def = berth_model::parse(&json).expect("valid").definition;
        TaskState::new(TASK.into(), def, 0)
    }

    fn facts<'a>(
        data_dir: &'a Path,
        values: &'a TaskValues,
        pause_image: Option<&'a str>,
        metadata_file: Option<&'a container_metadata::Paths>,
    ) -> Facts<'a> {
        Facts {
            volumes: &[],
            endpoint: None,
            values,
            data_dir,
            pause_image,
            metadata_file,
            awslogs: &awslogs::Settings {
                credentials_served: false,
                endpoint: None,
            },
            credentials: false,
        }
    }

    #[test]
    fn every_part_is_applied_to_the_definitions_part() {
        let s = firelens_task(NetworkMode::Bridge);
        let data_dir = Path::new("/var/lib/berth");
        let values = TaskValues::default();
        let paths = container_metadata::Paths::new(data_dir, TASK, "app");
        let app = build(&s, 1, &facts(data_dir, &values, None, Some(&paths)));
        let mut expected = spec::container_spec(&s, 1, &[], None);
        firelens::apply(
            &mut expected,
            &s.definition,
            1,
            TASK,
            &firelens::Paths::new(data_dir, TASK),
            &values,
        );
        expected
            .labels
            .insert(spec::LABEL_DATA_DIR.into(), "/var/lib/berth".into());
        container_metadata::apply(&mut expected, &paths, TASK, "app");
        assert_eq!(app, expected);
        assert_eq!(app.log_driver.as_deref(), Some("fluentd"));
        assert_eq!(
            app.env.last().map(String::as_str),
            Some(
                format!(
                    "{}={}",
                    container_metadata::ENV,
                    container_metadata::container_path(TASK, "app")
                )
                .as_str()
            ),
            "the metadata file's variable comes last"
        );
        // Without the file: neither its mount nor its variable.
        let without = build(&s, 1, &facts(data_dir, &values, None, None));
        assert!(
            !without
                .env
                .iter()
                .any(|e| e.starts_with(container_metadata::ENV))
        );
        assert_eq!(without.mounts.len() + 1, app.mounts.len());
    }

    #[test]
    fn the_pause_container_gets_the_operators_image_when_there_is_one() {
        let s = firelens_task(NetworkMode::Awsvpc);
        let p = s.pause_index().expect("a pause container");
        let data_dir = Path::new("/d");
        let values = TaskValues::default();
        let own = build(&s, p, &facts(data_dir, &values, None, None));
        assert_eq!(own.image, crate::pause_image::image_name());
        assert_eq!(own.labels[spec::LABEL_DATA_DIR], "/d");
        let theirs = build(&s, p, &facts(data_dir, &values, Some("k8s/pause:3"), None));
        assert_eq!(theirs.image, "k8s/pause:3");
        assert_eq!(
            theirs,
            ContainerSpec {
                image: "k8s/pause:3".into(),
                ..own
            }
        );
        // The others keep their own images.
        let app = build(&s, 1, &facts(data_dir, &values, Some("k8s/pause:3"), None));
        assert_eq!(app.image, "app");
    }
}
