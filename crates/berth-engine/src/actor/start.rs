//! The start and restart effects, both `Runtime::start` of the container's Docker id.
//!
//! A start is ECS's `CannotStartContainerError` when it fails (worded for a missing GPU runtime
//! when the container asked for GPUs); once it is reported, with the metadata option, the
//! container's READY metadata file is written in the same effect (in the background of the task,
//! as ECS does it, and waited for by its cleanup).
//!
//! A start that fails is not decided on its error alone: its answer may have been lost after
//! Docker started the container (a dropped connection, a timeout). Docker's inspect decides
//! ([`started_after_all`]): running, or started and exited, is a start; only a container that
//! never started is a failed start.
//!
//! Restarts under a `restartPolicy` are decided by the decision core; the actor performs one as
//! `Runtime::start` of the same container (held by `BERTH_FAILPOINT_DELAY` at `before-restart`
//! in tests) and sends its `restarted` report; [`super::adopt`] finishes a restart a crash
//! interrupted.

use super::effects::{Context, NeedsId, docker_id_or_report};
use super::files::{ReadyFile, container_network_mode, metadata_file};
use crate::decide::Event;
use crate::gpu;
use crate::report::{self, Report, now_ms};
use crate::runtime::{ContainerInfo, Runtime, RuntimeError};

/// Perform `Action::Start(i)`.
pub(super) fn spawn_start<R: Runtime>(cx: &Context<'_, R>, i: usize) {
    let Some(id) = docker_id_or_report(cx, i, NeedsId::Start) else {
        return;
    };
    let (rt, tx, state) = (cx.rt.clone(), cx.effects.results.clone(), cx.state);
    let name = state.containers[i].name.clone();
    let gpu = state.def(i).gpu;
    let ready = metadata_file(state, cx.config, i).map(|(facts, paths)| ReadyFile {
        facts,
        paths,
        container: name.clone(),
        image: state.def(i).image.clone(),
        network_mode: container_network_mode(state, i),
    });
    cx.effects.spawn(async move {
        let started = rt.start(&id).await;
        crate::failpoint::hit("after-start", &name);
        let ev = match started {
            Ok(()) => Event::Started {
                container: i,
                at: now_ms(),
            },
            Err(e) => match started_after_all(&*rt, &id).await {
                Ok(Some(info)) => {
                    tracing::warn!(container = %name, error = %e, running = info.running, "the start's answer was lost, but Docker started the container");
                    if !info.running {
                        // Started and already exited: its exit follows its start.
                        let _ = tx.send(Event::Started {
                            container: i,
                            at: info.started_at.unwrap_or_else(now_ms),
                        });
                        Event::Exited {
                            container: i,
                            exit_code: info.exit_code,
                            started_at: info.started_at,
                            at: info.finished_at.unwrap_or_else(now_ms),
                        }
                    } else {
                        Event::Started {
                            container: i,
                            at: info.started_at.unwrap_or_else(now_ms),
                        }
                    }
                }
                Ok(None) => Event::StartFailed {
                    container: i,
                    at: now_ms(),
                    message: gpu::failure_reason("CannotStartContainerError", gpu, &e.to_string()),
                },
                Err(asked) => Event::StartFailed {
                    container: i,
                    at: now_ms(),
                    message: gpu::failure_reason(
                        "CannotStartContainerError",
                        gpu,
                        &format!("{e}; {asked}"),
                    ),
                },
            },
        };
        let ok = matches!(ev, Event::Started { .. });
        let _ = tx.send(ev);
        // After the start is reported, as ECS does it (in the background, not delaying
        // the task); still an effect, so the task's cleanup waits for it.
        if let Some(ready) = ready.filter(|_| ok) {
            ready.write(&*rt, &id).await;
        }
    });
}

/// After a start that failed, Docker's word on whether it started the container anyway (a start
/// whose answer was lost in transport or by a timeout): `Some(info)` when its inspect says it runs
/// or has run (a start time), `None` when it never started. An inspect that keeps failing (asked
/// [`super::ASK_AGAIN_ATTEMPTS`] times) is the error, worded for the start's reason.
async fn started_after_all<R: Runtime>(rt: &R, id: &str) -> Result<Option<ContainerInfo>, String> {
    match super::ask_again("container inspect", || rt.inspect(id)).await {
        Ok(info) if info.running || info.started_at.is_some() => Ok(Some(info)),
        Ok(_) | Err(RuntimeError::NotFound { .. }) => Ok(None),
        Err(e) => Err(format!(
            "whether Docker started it anyway is unknown (its inspect failed: {e})"
        )),
    }
}

/// Perform `Action::Restart(i)`.
pub(super) fn spawn_restart<R: Runtime>(cx: &Context<'_, R>, i: usize) {
    let Some(id) = docker_id_or_report(cx, i, NeedsId::Restart) else {
        return;
    };
    let (rt, tx, state) = (cx.rt.clone(), cx.effects.results.clone(), cx.state);
    let c = &state.containers[i];
    let (name, count, exit_code) = (c.name.clone(), c.restart_count, c.last_restart_exit_code);
    let task = state.id.clone();
    let reports = cx.reports.clone();
    cx.effects.spawn(async move {
        // The restart is decided, counted and saved: a crash here leaves it owed.
        crate::failpoint::hit("before-restart", &name);
        if let Some(hold) = crate::failpoint::delay("before-restart", &name) {
            tokio::time::sleep(hold).await;
        }
        let started = rt.start(&id).await;
        let ev = match started {
            Ok(()) => {
                tracing::info!(task = %task, container = %name, restart_count = count, exit_code = ?exit_code, "restarted container under its restart policy");
                let at = now_ms();
                let _ = reports.send(Report::Restarted {
                    time: report::rfc3339(at),
                    task,
                    container: name,
                    restart_count: count,
                    exit_code,
                    docker_id: id,
                });
                Event::Restarted { container: i, at }
            }
            Err(e) => Event::RestartFailed {
                container: i,
                at: now_ms(),
                message: format!("CannotStartContainerError: restart failed: {e}"),
            },
        };
        let _ = tx.send(ev);
    });
}
