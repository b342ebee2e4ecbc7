//! The create effect: the container's metadata file first (with the metadata option; ECS writes
//! it before the create; a file that cannot be written is a warning, and the container is created
//! without its mount and variable, as on ECS), then `Runtime::create` of its spec. A failed
//! create is ECS's `CannotCreateContainerError`, worded for a missing GPU runtime when the
//! container asked for GPUs.

use super::effects::Context;
use super::files::{metadata_file, write_metadata_file};
use crate::container_metadata;
use crate::decide::Event;
use crate::gpu;
use crate::report::now_ms;
use crate::runtime::Runtime;
use crate::spec;

/// Perform `Action::Create(i)`.
pub(super) fn spawn<R: Runtime>(cx: &Context<'_, R>, i: usize) {
    let (rt, tx) = (cx.rt.clone(), cx.effects.results.clone());
    let (config, state, values) = (cx.config, cx.state, cx.values);
    let mut spec = spec::container_spec_with_values(
        state,
        i,
        cx.volumes,
        config.metadata.as_ref(),
        values.container(i),
    );
    crate::firelens::apply(
        &mut spec,
        &state.definition,
        i,
        &state.id,
        &crate::firelens::Paths::new(&config.data_dir, &state.id),
        values,
    );
    if let Some(own) = config.pause_image.as_ref().filter(|_| state.is_pause(i)) {
        spec.image = own.clone();
    }
    spec.labels.insert(
        spec::LABEL_DATA_DIR.to_string(),
        config.data_dir.display().to_string(),
    );
    let name = state.containers[i].name.clone();
    let gpu = state.def(i).gpu;
    let metadata_file = metadata_file(state, config, i).map(|(facts, paths)| {
        let text = container_metadata::initial(&facts, &name);
        (facts.task_id, paths, text)
    });
    cx.effects.spawn(async move {
        // ECS: written before the create; one that cannot be written is a warning, and
        // the container is created without the mount and the variable.
        if let Some((task, paths, text)) = metadata_file {
            match write_metadata_file(paths.clone(), text).await {
                Ok(()) => container_metadata::apply(&mut spec, &paths, &task, &name),
                Err(e) => {
                    tracing::warn!(%task, container = %name, error = %e, "cannot write the container metadata file; the container gets none");
                }
            }
        }
        crate::failpoint::hit("before-create", &name);
        let created = rt.create(&spec).await;
        crate::failpoint::hit("after-create", &name);
        let ev = match created {
            Ok(docker_id) => Event::Created {
                container: i,
                docker_id,
                at: now_ms(),
            },
            Err(e) => Event::CreateFailed {
                container: i,
                at: now_ms(),
                message: gpu::failure_reason("CannotCreateContainerError", gpu, &e.to_string()),
            },
        };
        let _ = tx.send(ev);
    });
}
