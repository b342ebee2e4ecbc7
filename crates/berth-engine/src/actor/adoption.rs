//! What the actor learns from Docker rather than from its own effects: [`adopt`] (after an agent
//! restart, each stored container found again by id or by its Docker name, its known status
//! raised from `inspect`), the resync (the same after a broken event stream: [`resync_targets`],
//! [`resync_inspect`] as an effect the loop does not wait on, [`resync_apply`]), [`translate`]
//! (Docker's events, by container id, as the engine's events, by index) and
//! [`after_unexpected_die`] (why a container berth did not stop died).
//!
//! Known statuses are only raised, never lowered; nothing is created twice (a container whose
//! create may have happened before a crash is found by its name); a stop that failed before is
//! sent again at once when the container is found running. [`adopt`] finishes a restart a crash
//! interrupted, judged by Docker's start time.

use super::VANISHED_REASON;
use crate::decide::Event;
use crate::report::now_ms;
use crate::runtime::{ContainerInfo, Runtime, RuntimeError, RuntimeEvent};
use crate::state::{Status, TaskState};

/// After a restart: forget operations that were in flight when the agent died, find each
/// container in Docker (by id, or by the name decided before `create`), and raise known statuses
/// from `inspect`; containers that vanished are STOPPED with a reason, and a stop that failed
/// before the restart is sent again at once. Nothing is created twice:
/// a container whose create may have happened is found by its name.
///
/// Restarts: a restart decided and saved before the crash (`restart_owed`) happened when Docker's
/// start time is not before it was decided; otherwise it is still owed and the next decision
/// performs it, uncounted. A container that exited while the agent was down is judged by the
/// restart rule at the next decision, like any exit. So an agent restart neither loses nor
/// repeats a restart.
pub async fn adopt<R: Runtime>(rt: &R, state: &mut TaskState) {
    for i in 0..state.containers.len() {
        let c = &mut state.containers[i];
        c.in_flight = None;
        let restart_owed = c.restart_owed;
        let restart_decided_at = c.last_restart_at;
        if c.known == Status::Stopped {
            continue;
        }
        // A stop decided before the crash is sent again.
        c.stop_sent = false;
        let target = c.docker_id.clone().unwrap_or_else(|| c.docker_name.clone());
        let had_id = c.docker_id.is_some();
        let name = c.name.clone();
        match rt.inspect(&target).await {
            Ok(info) => {
                let at = now_ms();
                if !had_id {
                    state.apply(&Event::Created {
                        container: i,
                        docker_id: info.id.clone(),
                        at,
                    });
                }
                if restart_owed
                    && let (Some(started), Some(decided)) = (info.started_at, restart_decided_at)
                    && started >= decided
                {
                    state.apply(&Event::Restarted {
                        container: i,
                        at: started,
                    });
                }
                if info.running {
                    state.apply(&Event::Started {
                        container: i,
                        at: info.started_at.unwrap_or(at),
                    });
                    // A stop that kept failing before the restart is sent again at once.
                    state.retry_stop_now(i, false);
                    if let Some(h) = info.health {
                        state.apply(&Event::Health {
                            container: i,
                            health: h,
                        });
                    }
                } else if info.finished_at.is_some() {
                    state.apply(&Event::Exited {
                        container: i,
                        exit_code: info.exit_code,
                        started_at: info.started_at,
                        at: info.finished_at.unwrap_or(at),
                    });
                    if let Some(reason) = info.exit_reason() {
                        state.apply(&Event::ExitReason {
                            container: i,
                            reason,
                        });
                    }
                }
            }
            Err(RuntimeError::NotFound { .. }) if had_id => state.apply(&Event::Vanished {
                container: i,
                at: now_ms(),
                reason: "container vanished while the agent was down".into(),
            }),
            // Never created (the crash came before `create`): the engine creates it now.
            Err(RuntimeError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(task = %state.id, container = %name, error = %e, "cannot inspect while adopting");
            }
        }
    }
}

/// What a resync asks Docker after the event stream broke: each container that has a Docker id
/// and is not known STOPPED, by index, with its id.
pub(super) fn resync_targets(state: &TaskState) -> Vec<(usize, String)> {
    state
        .containers
        .iter()
        .enumerate()
        .filter(|(_, c)| c.known != Status::Stopped)
        .filter_map(|(i, c)| c.docker_id.clone().map(|id| (i, id)))
        .collect()
}

/// Docker's inspect of each resync target, in order. Runs as one of the actor's effects, so a
/// stalled Engine holds no command: the loop goes on while it waits (see [`resync_apply`]).
pub(super) async fn resync_inspect<R: Runtime>(
    rt: &R,
    targets: Vec<(usize, String)>,
) -> Vec<(usize, String, Result<ContainerInfo, RuntimeError>)> {
    let mut out = Vec::with_capacity(targets.len());
    for (i, id) in targets {
        let info = rt.inspect(&id).await;
        out.push((i, id, info));
    }
    out
}

/// Raise known statuses from a resync's inspects (never lowering them): a container that no
/// longer runs is STOPPED, one that still runs although its stop failed is stopped again at once.
/// An answer about a container that has stopped or changed meanwhile is ignored.
pub(super) fn resync_apply(
    state: &mut TaskState,
    inspected: Vec<(usize, String, Result<ContainerInfo, RuntimeError>)>,
) {
    for (i, id, info) in inspected {
        let Some(c) = state.containers.get(i) else {
            continue;
        };
        if c.known == Status::Stopped || c.docker_id.as_deref() != Some(id.as_str()) {
            continue;
        }
        let ev = match info {
            Ok(info) if info.running => {
                // Still running although a stop failed: the Engine is back, send it again now.
                if state.retry_stop_now(i, false) {
                    tracing::info!(task = %state.id, container = %state.containers[i].name, "still running after a failed stop; stopping it again");
                }
                info.started_at
                    .map(|at| Event::Started { container: i, at })
            }
            Ok(info) if info.exit_code.is_some() || info.finished_at.is_some() => {
                state.apply(&Event::Exited {
                    container: i,
                    exit_code: info.exit_code,
                    started_at: info.started_at,
                    at: info.finished_at.unwrap_or_else(now_ms),
                });
                info.exit_reason().map(|reason| Event::ExitReason {
                    container: i,
                    reason,
                })
            }
            Ok(_) => None,
            Err(RuntimeError::NotFound { .. }) => Some(Event::Vanished {
                container: i,
                at: now_ms(),
                reason: VANISHED_REASON.into(),
            }),
            Err(e) => {
                tracing::warn!(task = %state.id, container = %state.containers[i].name, error = %e, "inspect failed during resync");
                None
            }
        };
        if let Some(ev) = ev {
            state.apply(&ev);
        }
    }
}

/// Map a Docker event (by container id) to an engine event (by container index).
pub(super) fn translate(state: &TaskState, ev: RuntimeEvent) -> Option<Event> {
    Some(match ev {
        RuntimeEvent::Start { id, at } => Event::Started {
            container: state.index_of_docker_id(&id)?,
            at,
        },
        RuntimeEvent::Die { id, exit_code, at } => Event::Exited {
            container: state.index_of_docker_id(&id)?,
            exit_code,
            started_at: None,
            at,
        },
        RuntimeEvent::Health { id, health } => Event::Health {
            container: state.index_of_docker_id(&id)?,
            health,
        },
        RuntimeEvent::Destroy { id, at } => {
            let i = state.index_of_docker_id(&id)?;
            Event::Vanished {
                container: i,
                at,
                reason: VANISHED_REASON.into(),
            }
        }
    })
}

/// After a `die` berth did not cause (no stop sent), one inspect says why it died. Is Docker
/// removing the container (`docker rm -f` behind berth's back)? Its `destroy` event may come only
/// after the task has finished, so not found, or marked as being removed, is a vanished container
/// (the reason says so). Otherwise, an OOM kill or a Docker state error becomes the container's
/// reason, as ECS gives it ([`crate::runtime::ContainerInfo::exit_reason`]); anything else is an ordinary exit.
pub(super) async fn after_unexpected_die<R: Runtime>(
    rt: &R,
    state: &TaskState,
    ev: &Event,
) -> Option<Event> {
    let Event::Exited { container, at, .. } = ev else {
        return None;
    };
    let c = &state.containers[*container];
    if c.stop_asked() {
        return None;
    }
    let id = c.docker_id.as_deref()?;
    let removed = match rt.inspect(id).await {
        Ok(info) if !info.removing => {
            return info.exit_reason().map(|reason| Event::ExitReason {
                container: *container,
                reason,
            });
        }
        Ok(_) | Err(RuntimeError::NotFound { .. }) => true,
        Err(_) => false,
    };
    removed.then(|| Event::Vanished {
        container: *container,
        at: *at,
        reason: VANISHED_REASON.into(),
    })
}
