//! The create effect: the container's metadata file first (with the metadata option; ECS writes
//! it before the create), then `Runtime::create` of the spec [`crate::create_spec::build`]
//! assembles. This module only supplies the facts: the task's prepared volumes and values, the
//! settings, and whether the metadata file was written (a file that cannot be written is a
//! warning, and the container is created without its mount and variable, as on ECS). A failed
//! create is ECS's `CannotCreateContainerError`, worded for a missing GPU runtime when the
//! container asked for GPUs. A create that fails is not decided on its error alone: its answer
//! may have been lost after Docker created the container, so the container of its name (creates
//! are by name, unique to the task) is looked up, and adopted when Docker has it.

use super::effects::Context;
use super::files::{metadata_file, write_metadata_file};
use crate::container_metadata::{self, Paths as MetadataPaths};
use crate::create_spec::{self, Facts};
use crate::decide::Event;
use crate::gpu;
use crate::report::now_ms;
use crate::runtime::{Runtime, RuntimeError};

/// The facts of container creates in this task; `metadata_file` is the container's file once it
/// is written.
fn facts<'a, R>(cx: &'a Context<'_, R>, metadata_file: Option<&'a MetadataPaths>) -> Facts<'a> {
    Facts {
        volumes: cx.volumes,
        endpoint: cx.config.metadata.as_ref(),
        values: cx.values,
        data_dir: &cx.config.data_dir,
        pause_image: cx.config.pause_image.as_deref(),
        metadata_file,
        awslogs: &cx.config.awslogs,
        credentials: cx.config.credentials,
    }
}

/// Perform `Action::Create(i)`.
pub(super) fn spawn<R: Runtime>(cx: &Context<'_, R>, i: usize) {
    let (rt, tx, state) = (cx.rt.clone(), cx.effects.results.clone(), cx.state);
    let name = state.containers[i].name.clone();
    let gpu = state.def(i).gpu;
    // Both specs are built now, from the state as it is: the effect picks the one that mounts
    // the metadata file once the file is written, the other one if it cannot be.
    let without_file = create_spec::build(state, i, &facts(cx, None));
    let metadata = metadata_file(state, cx.config, i).map(|(task, paths)| {
        let text = container_metadata::initial(&task, &name);
        let with_file = create_spec::build(state, i, &facts(cx, Some(&paths)));
        (task.task_id, paths, text, with_file)
    });
    cx.effects.spawn(async move {
        let spec = match metadata {
            None => without_file,
            Some((task, paths, text, with_file)) => match write_metadata_file(paths, text).await {
                Ok(()) => with_file,
                Err(e) => {
                    tracing::warn!(%task, container = %name, error = %e, "cannot write the container metadata file; the container gets none");
                    without_file
                }
            },
        };
        crate::failpoint::hit("before-create", &name);
        let created = rt.create(&spec).await;
        crate::failpoint::hit("after-create", &name);
        let ev = match created {
            Ok(docker_id) => Event::Created {
                container: i,
                docker_id,
                at: now_ms(),
            },
            // The answer may be lost after Docker created it (a dropped connection, a timeout):
            // creates are by name, so Docker's container of that name is this create's.
            Err(e) => match super::ask_again("container inspect", || rt.inspect(&spec.name)).await {
                Ok(info) => {
                    tracing::warn!(container = %name, error = %e, docker_id = %info.id, "the create's answer was lost, but Docker created the container; adopting it");
                    Event::Created {
                        container: i,
                        docker_id: info.id,
                        at: now_ms(),
                    }
                }
                Err(RuntimeError::NotFound { .. }) => Event::CreateFailed {
                    container: i,
                    at: now_ms(),
                    message: gpu::failure_reason("CannotCreateContainerError", gpu, &e.to_string()),
                },
                Err(asked) => Event::CreateFailed {
                container: i,
                at: now_ms(),
                    message: gpu::failure_reason(
                        "CannotCreateContainerError",
                        gpu,
                        &format!(
                            "{e}; whether Docker created it anyway is unknown (the inspect of {} \
                             failed: {asked}); a restarted agent adopts it by name",
                            spec.name
                        ),
                    ),
                },
            },
        };
        let _ = tx.send(ev);
    });
}
