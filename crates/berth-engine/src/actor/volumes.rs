//! The task's volumes, before its first decision: [`provide_volumes`] creates the scratch
//! directories and Docker volumes the volume plans ([`crate::spec::plan_volumes`]) name, and
//! [`stop_volume_users`] stops every container that mounts one that cannot be provided, with the
//! volume's reason (and so the task, if one of them is essential).
//!
//! The loop runs the preparation concurrently with its commands and cancellation: it borrows no
//! task state, and a stop or kill drops it with the call in flight (a volume Docker created
//! meanwhile is the cleanup's, as every task volume is).

use crate::decide::Action;
use crate::report::now_ms;
use crate::runtime::Runtime;
use crate::spec::{self, VolumePlan};
use crate::state::TaskState;

/// Create the task's scratch directories and Docker volumes as `plans` say. Returns the volumes
/// that cannot be provided, each with its reason (see [`stop_volume_users`]). Borrows no task
/// state, so the actor receives commands while it runs.
pub(super) async fn provide_volumes<R: Runtime>(
    rt: &R,
    task_id: &str,
    data_dir: &std::path::Path,
    plans: &[(String, VolumePlan)],
) -> Vec<(String, String)> {
    let mut failures = Vec::new();
    for (name, plan) in plans {
        let failure = match plan {
            VolumePlan::HostPath(path) => {
                let scratch = spec::scratch_dir(data_dir, task_id, name);
                if *path == scratch {
                    std::fs::create_dir_all(path)
                        .err()
                        .map(|e| format!("volume {name}: cannot create {}: {e}", path.display()))
                } else {
                    None
                }
            }
            VolumePlan::TaskVolume(spec) => rt.ensure_volume(spec).await.err().map(|e| {
                format!(
                    "volume {name}: cannot create docker volume {}: {e}",
                    spec.name
                )
            }),
            VolumePlan::SharedVolume {
                spec,
                autoprovision,
            } => match rt.volume_exists(&spec.name).await {
                Ok(true) => None,
                Ok(false) if *autoprovision => rt.ensure_volume(spec).await.err().map(|e| {
                    format!(
                        "volume {name}: cannot create docker volume {}: {e}",
                        spec.name
                    )
                }),
                Ok(false) => Some(format!(
                    "volume {name}: shared docker volume {} does not exist and autoprovision is false",
                    spec.name
                )),
                Err(e) => Some(format!("volume {name}: {e}")),
            },
            VolumePlan::Unsupported(why) => Some(why.clone()),
        };
        if let Some(message) = failure {
            failures.push((name.clone(), message));
        }
    }
    failures
}

/// A volume that cannot be provided stops every container that mounts it (and so the task, if
/// one of them is essential), with the volume's reason.
pub(super) fn stop_volume_users(state: &mut TaskState, failures: &[(String, String)]) {
    let now = now_ms();
    for (name, message) in failures {
        for i in 0..state.containers.len() {
            if state
                .def(i)
                .mount_points
                .iter()
                .any(|m| &m.source_volume == name)
            {
                state.begin(
                    &Action::MarkStopped {
                        container: i,
                        reason: Some(message.clone()),
                        exit_code: None,
                    },
                    now,
                );
            }
        }
    }
}
