//! The agent's side of the state store's reserve (`berth_store::reserve`): when the data
//! directory's file system filled up and a store write released the reserve to succeed, stop the
//! task whose scratch directory (`DATA_DIR/tasks/<id>`, where its volumes without a host path
//! live) holds the most, with a reason saying so; fill the reserve again once the file system has
//! room for it (twice its size free, so filling it does not take the last blocks a save needs).
//!
//! One loop, checking every [`CHECK`]; the other tasks are not touched and health stays ok while
//! the store can be written. Which task, and its reason, is `berth_engine::scratch`'s rule.

use super::Agent;
use berth_engine::{Command, Status};
use std::sync::Arc;
use std::time::Duration;

/// How often the loop looks at the reserve.
const CHECK: Duration = Duration::from_secs(1);

const MIB: u64 = 1 << 20;

pub(super) fn start(agent: &Arc<Agent>) {
    let agent = agent.clone();
    let shutdown = agent.shutdown.child_token();
    agent.tracker.clone().spawn(async move {
        let mut handled = agent.store.reserve().releases;
        loop {
            tokio::select! {
                () = tokio::time::sleep(CHECK) => {}
                () = shutdown.cancelled() => return,
            }
            let reserve = agent.store.reserve();
            if reserve.releases > handled {
                handled = reserve.releases;
                stop_the_largest(&agent).await;
            }
            if !reserve.held {
                let dir = agent.data_dir.clone();
                let room = tokio::task::spawn_blocking(move || berth_fs::usage::available_bytes(&dir))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(0);
                if room >= 2 * reserve.size {
                    match agent.store.fill_reserve() {
                        Ok(()) => tracing::info!(path = %reserve.path.display(), "the data directory's file system has room again: the state store's reserve is filled"),
                        Err(e) => tracing::debug!(error = %e, "cannot fill the state store's reserve yet"),
                    }
                }
            }
        }
    });
}

/// Stop the running task whose scratch directory holds the most.
async fn stop_the_largest(agent: &Arc<Agent>) {
    let running: Vec<String> = agent
        .snapshots()
        .into_iter()
        .filter(|s| s.known() != Status::Stopped && s.desired != Status::Stopped)
        .map(|s| s.id)
        .collect();
    let data_dir = agent.data_dir.clone();
    let sizes = tokio::task::spawn_blocking(move || {
        running
            .into_iter()
            .map(|id| {
                let bytes =
                    berth_fs::usage::tree_bytes(&berth_engine::spec::task_dir(&data_dir, &id));
                (id, bytes)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let Some((task, bytes)) = berth_engine::scratch::offender(sizes) else {
        tracing::warn!(
            "the state store's reserve was released and no running task holds scratch space: the data directory's file system is full from elsewhere"
        );
        return;
    };
    let reason = berth_engine::scratch::full_reason(bytes);
    tracing::warn!(task = %task, scratch_mib = bytes / MIB, "the data directory's file system is full: stopping the task that filled it");
    let sender = agent.tasks().get(&task).map(|e| e.commands.clone());
    if let Some(sender) = sender {
        let _ = sender.send(Command::Stop { reason }).await;
    }
}
