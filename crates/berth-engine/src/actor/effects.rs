//! The actor's effects: [`Effects`], the tracker every effect runs on (each reports its result on
//! a channel and is dropped at its next `.await` once abandoned), and [`spawn_effect`], the
//! dispatcher from a decided [`Action`] to its effect: [`super::pull`], [`super::create`],
//! [`super::start`] (start and restart) and [`super::stop`], one function each.
//!
//! An effect borrows what it needs from the loop ([`Context`]) only while it is spawned: the
//! future it runs owns copies, so the loop goes on changing the state meanwhile. A start or a
//! restart needs the container's Docker id; a missing one is an engine bug, reported as the
//! effect's failure ([`docker_id_for`]) rather than sent to Docker.

use super::{Reports, RunConfig, create, pull, start, stop};
use crate::decide::{Action, Event};
use crate::report::now_ms;
use crate::runtime::Runtime;
use crate::secrets::TaskValues;
use crate::spec::VolumePlan;
use crate::state::TaskState;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The actor's effects: every one runs as a task of `tracker`, reports its result on `results`,
/// and stops at its next `.await` once `abandon` is cancelled.
pub(super) struct Effects {
    tracker: TaskTracker,
    pub abandon: CancellationToken,
    pub results: mpsc::UnboundedSender<Event>,
    /// Cancelled once the task's desired status is STOPPED: pulls in flight give up.
    pub stopping: CancellationToken,
}

impl Effects {
    pub fn new(results: mpsc::UnboundedSender<Event>) -> Self {
        Effects {
            tracker: TaskTracker::new(),
            abandon: CancellationToken::new(),
            results,
            stopping: CancellationToken::new(),
        }
    }

    pub fn spawn(&self, effect: impl Future<Output = ()> + Send + 'static) {
        self.tracker
            .spawn(self.abandon.clone().run_until_cancelled_owned(effect));
    }

    /// Let no new effect start, wait up to `grace` for those in flight, then abandon the rest
    /// and wait until they are gone (dropped at their next `.await`). Returns how many were
    /// abandoned.
    pub async fn finish(&self, grace: Duration) -> usize {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
        {
            return 0;
        }
        let abandoned = self.tracker.len();
        self.abandon.cancel();
        self.tracker.wait().await;
        abandoned
    }
}

/// What an effect is spawned with: the loop's runtime, settings, state and prepared facts.
pub(super) struct Context<'a, R> {
    pub rt: &'a Arc<R>,
    pub config: &'a RunConfig,
    pub state: &'a TaskState,
    /// How each task volume is provided.
    pub volumes: &'a [(String, VolumePlan)],
    /// The secrets and environment-file values read before the first decision.
    pub values: &'a TaskValues,
    pub reports: &'a Reports,
    pub effects: &'a Effects,
}

/// The Docker id container `i`'s start or restart acts on; None when there is none, after the
/// effect's failure has been reported in its place ([`docker_id_for`]).
pub(super) fn docker_id_or_report<R>(
    cx: &Context<'_, R>,
    i: usize,
    needs: NeedsId,
) -> Option<String> {
    docker_id_for(cx.state, i, needs)
        .map_err(|failure| {
            let _ = cx.effects.results.send(failure);
        })
        .ok()
}

/// Perform `action` as an effect on `cx.effects`: the one match from a decision to its effect.
pub(super) fn spawn_effect<R: Runtime>(cx: &Context<'_, R>, action: Action) {
    match action {
        Action::Pull(i) => pull::spawn(cx, i),
        Action::Create(i) => create::spawn(cx, i),
        Action::Start(i) => start::spawn_start(cx, i),
        Action::Restart(i) => start::spawn_restart(cx, i),
        Action::Stop {
            container,
            timeout_secs,
        } => stop::spawn(cx, container, timeout_secs),
        // Bookkeeping, applied by `TaskState::step`: never returned to the actor as an effect.
        Action::MarkStopped { .. } | Action::StopTask { .. } => {}
    }
}

/// An effect that acts on an existing container.
#[derive(Debug, Clone, Copy)]
pub(super) enum NeedsId {
    Start,
    Restart,
}

/// The Docker id of container `i`, or the failure its effect reports instead of calling the runtime.
///
/// The decision core starts only a container it knows as CREATED, and the `Created` event that
/// makes it so records the id, so a missing id is a bug in the engine, not an answer of Docker's.
/// It is not sent to Docker as an empty id: it becomes the start's failure, with an
/// internal-error reason, which the state machine folds in like any failed start (the container
/// STOPPED with that reason; the task stopping if it is essential). A stop needs no id: it goes
/// to the container's name (`stop_target` in `stop.rs`).
pub(super) fn docker_id_for(state: &TaskState, i: usize, needs: NeedsId) -> Result<String, Event> {
    let c = &state.containers[i];
    if let Some(id) = &c.docker_id {
        return Ok(id.clone());
    }
    let verb = match needs {
        NeedsId::Start => "start",
        NeedsId::Restart => "restart",
    };
    let message = format!(
        "internal error: berth has no Docker id for container {} to {verb} (please report this)",
        c.name
    );
    tracing::error!(task = %state.id, container = %c.name, "{message}");
    let at = now_ms();
    Err(match needs {
        NeedsId::Start => Event::StartFailed {
            container: i,
            at,
            message: format!("CannotStartContainerError: {message}"),
        },
        NeedsId::Restart => Event::RestartFailed {
            container: i,
            at,
            message: format!("CannotStartContainerError: {message}"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::test_support::one_container;
    use crate::decide::Options;
    use crate::state::Status;

    #[test]
    fn a_known_docker_id_is_the_target() {
        let mut s = one_container();
        s.containers[0].docker_id = Some("abc".into());
        assert_eq!(
            docker_id_for(&s, 0, NeedsId::Start).ok(),
            Some("abc".into())
        );
    }

    #[test]
    fn a_start_without_docker_id_fails_the_container_with_an_internal_error() {
        let mut s = one_container();
        s.begin(&Action::Start(0), 1);
        let failure = docker_id_for(&s, 0, NeedsId::Start).expect_err("no id");
        let Event::StartFailed { message, .. } = &failure else {
            panic!("a start failure: {failure:?}");
        };
        assert_eq!(
            message,
            "CannotStartContainerError: internal error: berth has no Docker id for container a to start (please report this)"
        );
        s.apply(&failure);
        let c = &s.containers[0];
        assert_eq!((c.known, c.in_flight), (Status::Stopped, None));
        assert_eq!(c.reason.as_deref(), Some(message.as_str()));
        // The essential container will never run: the task stops, with nothing more to do.
        let (effects, _) = s.step(Options::default(), 2);
        assert!(effects.is_empty(), "{effects:?}");
        assert_eq!(s.desired, Status::Stopped);
        assert_eq!(s.stopped_reason.as_deref(), Some(message.as_str()));
        assert!(s.is_finished());
    }
}
