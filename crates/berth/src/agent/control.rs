//! The agent's side of the control API: [`berth_api::control::ControlPlane`] over the task table,
//! the state store and the task actors. berth-api owns the routes, the (command, phase) rule and
//! the wire types; this module only answers its questions and carries out its commands.
//!
//! Invariants: the task table's lock is held only between statements, never across an `.await`
//! (senders and notifiers are cloned out first). A submitted task is accepted as a cluster's is
//! (`Agent::accept`): stored before its actor is spawned.
//! A stop is answered once it is durable (the task's actor saved the desired status STOPPED),
//! else 503 with the reason, like a submit.
//! Limits: a command races the task's own progress; what is found when acting is what is
//! answered (a stop that finds the actor gone reports the task as already stopped).

use super::{AcceptError, Accepted, Agent, Origin};
use berth_api::control::{
    CleanupView, ControlError, ControlPlane, Degraded, ImagesView, Phase, PruneResponse, Submitted,
    TaskView,
};
use berth_engine::{Command, SavedAck, Status};
use berth_model::TaskDefinition;
use std::sync::Arc;
use tokio::sync::broadcast;

/// How long a `stop` waits for the task's actor to save it before answering 503.
const STOP_SAVE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The control plane of one agent (the agent's `spawn` needs the `Arc`).
pub(super) struct Control(pub(super) Arc<Agent>);

fn store_error(e: impl std::fmt::Display) -> ControlError {
    ControlError::Store {
        message: e.to_string(),
    }
}

fn cleanup_view(c: &berth_store::Cleanup) -> CleanupView {
    CleanupView::new(c.refused.clone(), c.attempts, c.stopped_at)
}

/// A cleanup pass that could not look at the images (Docker's lists or the tracked images) is a
/// runtime error to the API, as before the records had their own error.
fn survey_error(e: berth_engine::image_gc::SurveyError) -> ControlError {
    ControlError::Runtime {
        message: e.to_string(),
    }
}

impl ControlPlane for Control {
    async fn images(&self) -> Result<ImagesView, ControlError> {
        let agent = &self.0;
        let pass = agent
            .image_gc
            .pass(
                berth_engine::image_gc::Mode::Prune,
                agent.active_images(),
                true,
            )
            .await
            .map_err(survey_error)?;
        Ok(crate::image_gc::images_view(&pass.plan))
    }

    async fn prune(&self, dry_run: bool) -> Result<PruneResponse, ControlError> {
        let agent = &self.0;
        let pass = agent
            .image_gc
            .pass(
                berth_engine::image_gc::Mode::Prune,
                agent.active_images(),
                dry_run,
            )
            .await
            .map_err(survey_error)?;
        Ok(crate::image_gc::prune_response(&pass, dry_run))
    }

    async fn submit(
        &self,
        definition: TaskDefinition,
        client_token: Option<String>,
    ) -> Result<Submitted, ControlError> {
        let agent = &self.0;
        if let Some((node, _)) = &agent.cluster_node {
            return Err(ControlError::BadRequest {
                message: format!(
                    "this agent is cluster node {node}: its tasks come from the cluster; submit with `berth cluster submit FILE --etcd ENDPOINTS`"
                ),
            });
        }
        let problems = agent.refusals(&definition);
        if !problems.is_empty() {
            return Err(ControlError::Invalid { problems });
        }
        // A disk that does not answer: refused at once, nothing queued (a save queued now would
        // complete, and run the task, whenever the disk answers).
        if let Some(hung) = agent.store_hung() {
            return Err(ControlError::Degraded { reason: hung });
        }
        let id = berth_engine::new_task_id();
        // The same token as a task the agent keeps: that task is the answer, nothing is created.
        if let Some(token) = &client_token
            && let Some(known) = agent.claim_token(token, &id)
        {
            if known.accepted {
                tracing::info!(task = %known.task, "submit with a known client token: answered with its task");
                return Ok(Submitted {
                    task: known.task,
                    warnings: Vec::new(),
                });
            }
            return Err(ControlError::Degraded {
                reason: format!(
                    "the submit with this client token (task {}) is still being saved: the data directory's disk has not answered yet; retry with the same token",
                    known.task
                ),
            });
        }
        // Stored (with every container's Docker name) before anything is created. A store that
        // cannot be written refuses the task with 503 and the reason: nothing was accepted, the
        // client may submit again once the agent is healthy. A save that does not finish within
        // --store-write-timeout is answered 503 too, but may complete later (AcceptError::Timeout).
        match agent
            .accept(definition, id, Origin::Local { client_token })
            .await
        {
            Ok(Accepted { id, warnings }) => Ok(Submitted { task: id, warnings }),
            Err(e @ AcceptError::Timeout { .. }) => Err(ControlError::Degraded {
                reason: e.to_string(),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "submit refused: the task state cannot be saved");
                Err(ControlError::Degraded {
                    reason: agent.degraded().map_or_else(
                        || format!("the task state cannot be saved: {e}"),
                        |d| d.reason,
                    ),
                })
            }
        }
    }

    fn limits(&self) -> berth_model::Limits {
        self.0.limits
    }

    async fn list(&self) -> Result<Vec<TaskView>, ControlError> {
        let agent = &self.0;
        let records = match agent.store.tasks() {
            Ok(r) => r,
            // A store that cannot be read after an I/O error: the tasks the agent tracks, as
            // their actors last published them (without their cleanup records).
            Err(e) if agent.degraded().is_some() => {
                tracing::warn!(error = %e, "listing tasks from memory: the state store cannot be read");
                return Ok(agent
                    .snapshots()
                    .iter()
                    .map(|s| TaskView::new(s, None))
                    .collect());
            }
            Err(e) => return Err(store_error(e)),
        };
        Ok(records
            .iter()
            .map(|r| {
                let state = agent.snapshot(&r.state.id);
                TaskView::new(
                    state.as_ref().unwrap_or(&r.state),
                    Some(cleanup_view(&r.cleanup)),
                )
            })
            .collect())
    }

    async fn get(&self, id: &str) -> Result<Option<TaskView>, ControlError> {
        let agent = &self.0;
        let rec = match agent.store.get_task(id) {
            Ok(r) => r,
            Err(e) if agent.degraded().is_some() => {
                tracing::warn!(task = %id, error = %e, "showing the task from memory: the state store cannot be read");
                return Ok(agent.snapshot(id).map(|s| TaskView::new(&s, None)));
            }
            Err(e) => return Err(store_error(e)),
        };
        let Some(rec) = rec else {
            return Ok(None);
        };
        let state = agent.snapshot(id).unwrap_or(rec.state);
        Ok(Some(TaskView::new(
            &state,
            Some(cleanup_view(&rec.cleanup)),
        )))
    }

    fn phase(&self, id: &str) -> Option<Phase> {
        self.0.tasks().get(id).map(|e| {
            let s = e.snapshot.borrow();
            Phase::of(s.known(), s.desired)
        })
    }

    async fn stop(&self, id: &str, reason: &str) -> Result<(), ControlError> {
        let agent = &self.0;
        // A disk that does not answer cannot make the stop durable: refused, not acknowledged.
        if let Some(hung) = agent.store_hung() {
            return Err(ControlError::Degraded { reason: hung });
        }
        let sender = agent.tasks().get(id).map(|e| e.commands.clone());
        let sender = sender.ok_or_else(|| ControlError::NotFound {
            task: id.to_string(),
        })?;
        // Answered once the stop is durable: the actor saves the desired status STOPPED, then
        // answers (or says why the save failed, a 503 like a submit's).
        let (saved, answer) = SavedAck::new();
        let sent = sender
            .send(Command::StopSaved {
                reason: reason.to_string(),
                saved,
            })
            .await;
        match sent {
            Ok(()) => match tokio::time::timeout(STOP_SAVE_WAIT, answer).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(e))) => {
                    tracing::warn!(task = %id, error = %e, "stop refused: it cannot be saved");
                    Err(ControlError::Degraded {
                        reason: agent.degraded().map_or_else(
                            || format!("the stop of task {id} cannot be saved: {e}"),
                            |d| d.reason,
                        ),
                    })
                }
                // The actor ended before a save: the task stopped meanwhile, or the agent exits.
                Ok(Err(_))
                    if agent
                        .snapshot(id)
                        .is_some_and(|s| s.known() == Status::Stopped) =>
                {
                    Err(ControlError::AlreadyStopped {
                        task: id.to_string(),
                    })
                }
                Ok(Err(_)) => Err(ControlError::ActorGone {
                    task: id.to_string(),
                }),
                Err(_) => Err(ControlError::Degraded {
                    reason: format!(
                        "the stop of task {id} was not saved within {}s (the task's state store \
                         or its actor is stalled); it is taken in and saved as soon as possible, \
                         send it again to be sure",
                        STOP_SAVE_WAIT.as_secs()
                    ),
                }),
            },
            // The actor has finished: the task stopped since its phase was read.
            Err(_)
                if agent
                    .snapshot(id)
                    .is_some_and(|s| s.known() == Status::Stopped) =>
            {
                Err(ControlError::AlreadyStopped {
                    task: id.to_string(),
                })
            }
            Err(_) => Err(ControlError::ActorGone {
                task: id.to_string(),
            }),
        }
    }

    fn clean_up_now(&self, id: &str) -> Result<(), ControlError> {
        let now = self.0.tasks().get(id).map(|e| e.cleanup_now.clone());
        let now = now.ok_or_else(|| ControlError::NotFound {
            task: id.to_string(),
        })?;
        // Wakes the cleanup timer now, or as soon as the task has stopped.
        now.notify_one();
        Ok(())
    }

    fn events(&self) -> broadcast::Receiver<String> {
        self.0.events.subscribe()
    }

    fn task_count(&self) -> usize {
        self.0.tasks().len()
    }

    fn degraded(&self) -> Option<Degraded> {
        self.0.health()
    }
}
