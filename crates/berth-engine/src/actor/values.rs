//! The task's values: its containers' secrets, secret log options and environment files, read
//! once before its first decision ([`read_secrets_and_environment_files`], through
//! [`crate::secrets::resolve_task`], [`super::RunConfig::secrets`] and then what AWS answered in
//! the task's AWS step, `super::access`). The values stay in the
//! actor's memory, for the create specs; a failure stops the task before anything is created.

use super::RunConfig;
use super::access::Fetched;
use crate::decide::Action;
use crate::report::now_ms;
use crate::secrets::{self, SecretProvider, TaskValues};
use crate::state::{Status, StopKind, TaskState};
use std::sync::Arc;

/// Read, once and before anything is pulled or created, the secrets and environment files of every
/// container not created yet (ECS's secret and environment-file task resources). The values stay
/// in memory, for the create calls. A failure stops the task with ECS's
/// `ResourceInitializationError` reason: every container not created yet is marked STOPPED with it,
/// so none is created.
pub(super) fn read_secrets_and_environment_files(
    state: &mut TaskState,
    config: &RunConfig,
    fetched: Option<&Arc<Fetched>>,
) -> TaskValues {
    let needed = state.containers.iter().enumerate().any(|(i, _)| {
        let def = state.def(i);
        !def.secrets.is_empty()
            || !def.environment_files.is_empty()
            || !def.log_secret_options().is_empty()
    });
    if !needed {
        return TaskValues::default();
    }
    // The local sources first, then what AWS answered (see `super::access`).
    let mut chain: Vec<Arc<dyn SecretProvider>> = vec![config.secrets.clone()];
    if let Some(f) = fetched {
        chain.push(f.clone() as Arc<dyn SecretProvider>);
    }
    match secrets::resolve_task(
        state,
        &secrets::Providers(chain),
        &secrets::EnvironmentFileRules {
            s3_dir: config.environment_files_dir.as_deref(),
            allowed: &config.environment_files_allow,
            fetched: fetched.map(|f| &f.objects),
        },
    ) {
        Ok(values) => values,
        Err(e) => {
            let reason = e.to_string();
            // The reason names secrets and places, never a value.
            tracing::warn!(task = %state.id, %reason, "task stopped: secrets or environment files cannot be read");
            stop_before_create(state, &reason);
            TaskValues::default()
        }
    }
}

/// Stop the task with `reason` before anything is created: every container not created yet is
/// marked STOPPED with it, so none is created.
pub(super) fn stop_before_create(state: &mut TaskState, reason: &str) {
    state.request_stop(reason, StopKind::Failed);
    let now = now_ms();
    for i in 0..state.containers.len() {
        let c = &state.containers[i];
        if c.docker_id.is_none() && c.known < Status::Created {
            state.begin(
                &Action::MarkStopped {
                    container: i,
                    reason: Some(reason.to_string()),
                    exit_code: None,
                },
                now,
            );
        }
    }
}
