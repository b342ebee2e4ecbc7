//! The pure decision core: given a task's state and the time, which containers to pull, create, start
//! or stop now, which are terminally blocked (and why), and whether the task must stop.
//!
//! No I/O, no async, no clock: [`decide`] is a function of its arguments, so it is table-tested and
//! property-tested in microseconds. [`TaskState::apply`] folds results and Docker events into the
//! state; [`TaskState::step`] runs `decide` to a fixpoint, applying the bookkeeping actions itself and
//! returning the Docker effects for the actor to perform.
//!
//! Containers are found by index: `dependsOn`, `volumesFrom` and `links` were resolved once, when the state
//! was built ([`TaskState::wiring`]); nothing here looks a container up by name.
//!
//! Rules (ECS semantics, see the reference `task-engine-semantics.md`):
//! - A dependency gates the dependent's create and start. A `START` dependency only needs the
//!   dependency *created* before the dependent is created (pipelining), and *running* before it starts;
//!   `COMPLETE`, `SUCCESS` and `HEALTHY` must hold before the dependent is even created, because they
//!   can still fail terminally.
//! - A link gates like a `START` dependency (as ECS orders it): its target must exist in Docker
//!   before the linking container is created (Docker resolves the link's name at create) and run
//!   before it starts (Docker refuses to start a container linked to one that is not running). A
//!   target that stopped before the linking container started can never be linked to.
//! - The pause container (when the task shares namespaces) gates every other container like a
//!   link, and stops last.
//! - A dependency that can never be met stops the dependent without running it (exit code 143, a
//!   reason naming the dependency).
//! - An essential container that stops (or will never run) stops the task.
//! - Shutdown runs in reverse dependency order: a running container is stopped only once every
//!   container that depends on it has stopped. Containers that never started are marked STOPPED with no
//!   Docker call.
//! - A container with an enabled `restartPolicy` that exits on its own is not STOPPED at once: its
//!   exit waits ([`crate::state::PendingExit`], the container still known RUNNING) for the next
//!   decision, which restarts it in place ([`Action::Restart`], counted then) when
//!   [`crate::restart::judge`] allows, and otherwise settles it STOPPED with its exit code, after
//!   which the usual rules apply (an essential one stops the task). A restart is not a stop: the
//!   task and the container's dependents keep running, and a `COMPLETE`/`SUCCESS` dependent waits
//!   until an exit is not restarted (ECS short-circuits the STOPPED transition alike). A stop of the
//!   task wins over a restart not yet performed: the container is settled STOPPED, never started.
//! - A stop is done when Docker says so: a failed stop leaves the container known RUNNING (desired
//!   STOPPED: "stopping"), with the error, and is sent again after [`STOP_RETRY`]'s delay (1 s
//!   doubling to 30 s; the delay is kept in the state, so `decide` stays pure and returns the
//!   retry as its timer). Only an exit, Docker's "no such container" or an inspect that says it
//!   does not run makes it STOPPED.

use crate::restart::{self, Exit};
use crate::retry::RetryPolicy;
use crate::state::{
    EXIT_CODE_NOT_RUN, Health, Millis, Op, PendingExit, Status, StopKind, TaskState,
};
use berth_model::{Condition, RestartPolicy};
use std::time::Duration;

/// Default seconds between SIGTERM and SIGKILL when a container sets no `stopTimeout` (ECS: 30 s).
pub const DEFAULT_STOP_TIMEOUT_SECS: u32 = 30;

/// When a failed stop is sent again: 1 s after the first failure, doubling to 30 s. The ECS agent
/// retries a stop five times within one call (1 s to 5 s apart; berth-docker does the same for an
/// unreachable Engine or a timeout) and then, while Docker does not answer its ping, leaves the
/// container's known status as it was; berth keeps trying on this schedule, and at once after
/// every event-stream resync and every `berth stop`.
pub const STOP_RETRY: RetryPolicy = RetryPolicy {
    first: Duration::from_secs(1),
    max: Duration::from_secs(30),
};

/// The stop reason ECS gives a task whose essential container exited.
pub const ESSENTIAL_EXITED: &str = "Essential container in task exited";

/// What the engine should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Obtain the container's image (Docker effect).
    Pull(usize),
    /// Create the container (Docker effect).
    Create(usize),
    /// Start the container (Docker effect).
    Start(usize),
    /// Stop the running container, SIGKILL after `timeout_secs` (Docker effect).
    Stop { container: usize, timeout_secs: u32 },
    /// Start the same (exited) container again under its restart policy (Docker effect).
    Restart(usize),
    /// Mark the container STOPPED without any Docker call (it never ran, or never will).
    MarkStopped {
        container: usize,
        reason: Option<String>,
        exit_code: Option<i64>,
    },
    /// The task's desired status becomes STOPPED.
    StopTask { reason: String, kind: StopKind },
}

impl Action {
    /// True for actions that need Docker (the actor performs them); false for bookkeeping.
    pub fn is_effect(&self) -> bool {
        matches!(
            self,
            Action::Pull(_)
                | Action::Create(_)
                | Action::Start(_)
                | Action::Stop { .. }
                | Action::Restart(_)
        )
    }
}

/// The outcome of [`decide`]: actions to take now, and when to look again if nothing happens before.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    pub actions: Vec<Action>,
    /// The earliest time at which a timer (a dependency's `startTimeout`) changes the decision.
    pub wake_at: Option<Millis>,
}

/// Engine options that change decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Pull every image at task start instead of once the container's dependencies allow its creation.
    pub pull_upfront: bool,
    /// Tests only: the restart attempt period in milliseconds for every container, in place of
    /// its `restartAttemptPeriod` (ECS's minimum, 60 s, is too long for a test). None: the policy's.
    pub restart_period_override_ms: Option<u64>,
}

/// Where a dependency stands for one dependent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dep {
    Met,
    Waiting,
    /// Can never be met; the message says why.
    Never(String),
}

/// Evaluate `condition` on dependency `d`; also returns the time at which its `startTimeout` expires.
fn dependency(
    state: &TaskState,
    d: usize,
    condition: Condition,
    now: Millis,
) -> (Dep, Option<Millis>) {
    let c = &state.containers[d];
    let name = &c.name;
    let stopped = c.known == Status::Stopped;
    let met_or_never = match condition {
        Condition::Start => {
            if c.ran() || c.known >= Status::Running && !stopped {
                Dep::Met
            } else if stopped {
                Dep::Never(format!("dependency {name} stopped before it started"))
            } else {
                Dep::Waiting
            }
        }
        Condition::Complete => {
            if stopped && c.ran() {
                Dep::Met
            } else if stopped {
                Dep::Never(format!("dependency {name} stopped before it ran"))
            } else {
                Dep::Waiting
            }
        }
        Condition::Success => match (stopped, c.ran(), c.exit_code) {
            (true, true, Some(0)) => Dep::Met,
            (true, true, Some(code)) => Dep::Never(format!(
                "dependency {name} exited with code {code}; condition SUCCESS needs exit code 0"
            )),
            (true, _, _) => Dep::Never(format!("dependency {name} stopped before it ran")),
            (false, _, _) => Dep::Waiting,
        },
        Condition::Healthy => match c.health {
            Health::Healthy if !stopped => Dep::Met,
            Health::Unhealthy => Dep::Never(format!(
                "dependency {name} reported unhealthy; condition HEALTHY cannot be met"
            )),
            _ if stopped => Dep::Never(format!(
                "dependency {name} stopped before it became healthy"
            )),
            _ => Dep::Waiting,
        },
    };
    if met_or_never != Dep::Waiting || condition == Condition::Start {
        return (met_or_never, None);
    }
    // startTimeout: counted from the dependency's start, for the conditions that can take long.
    match (state.def(d).start_timeout, c.started_at) {
        (Some(secs), Some(started)) => {
            let deadline = started + i64::from(secs) * 1000;
            if now >= deadline {
                (
                    Dep::Never(format!(
                        "dependency {name} did not reach {} within its startTimeout of {secs}s",
                        condition.as_str()
                    )),
                    None,
                )
            } else {
                (Dep::Waiting, Some(deadline))
            }
        }
        _ => (Dep::Waiting, None),
    }
}

/// Which steps container `i`'s dependencies allow, or why it can never run.
struct Gates {
    never: Option<String>,
    /// The image may be obtained: everything but the pause container allows the create. The
    /// pull does not wait for the pause container, so both proceed at once.
    pull: bool,
    create: bool,
    start: bool,
}

fn gates(state: &TaskState, i: usize, now: Millis, wake_at: &mut Option<Millis>) -> Gates {
    let mut g = Gates {
        never: None,
        pull: true,
        create: true,
        start: true,
    };
    let wiring = state.wiring(i);
    if let Some(why) = &wiring.unresolved {
        // Validation rejects unknown names; a hand-built state that has one can never start.
        g.never = Some(why.clone());
        return g;
    }
    for &(d, condition) in &wiring.depends_on {
        let (status, deadline) = dependency(state, d, condition, now);
        if let Some(t) = deadline {
            *wake_at = Some(wake_at.map_or(t, |w: Millis| w.min(t)));
        }
        match status {
            Dep::Never(why) => {
                g.never = Some(why);
                return g;
            }
            Dep::Met => {}
            Dep::Waiting => {
                g.start = false;
                let dc = &state.containers[d];
                let pipelined = condition == Condition::Start
                    && dc.known >= Status::Created
                    && dc.docker_id.is_some();
                if !pipelined {
                    g.create = false;
                }
            }
        }
    }
    // volumesFrom needs the source container to exist before this one is created.
    for &s in &wiring.volumes_from {
        let sc = &state.containers[s];
        if sc.docker_id.is_none() {
            if sc.known == Status::Stopped {
                g.never = Some(format!("volumesFrom source {} was never created", sc.name));
                return g;
            }
            g.create = false;
            g.start = false;
        }
    }
    // links: the target exists before this one is created, and runs when it starts.
    for &t in &wiring.links {
        let tc = &state.containers[t];
        if tc.known == Status::Stopped {
            g.never = Some(if tc.ran() {
                format!(
                    "link target {} exited before this container started; Docker links only to a running container",
                    tc.name
                )
            } else {
                format!("link target {} stopped before it started", tc.name)
            });
            return g;
        }
        if tc.known < Status::Running {
            g.start = false;
            if tc.known < Status::Created || tc.docker_id.is_none() {
                g.create = false;
            }
        }
    }
    // The pause container: its namespaces exist before this one is created (Docker resolves
    // `container:<pause>` at create) and run when it starts.
    g.pull = g.create;
    if let Some(p) = wiring.namespace_owner {
        let pc = &state.containers[p];
        if pc.known == Status::Stopped {
            g.never = Some(
                "the task's pause container, which owns the namespaces this container joins, stopped before it started"
                    .to_string(),
            );
            return g;
        }
        if pc.known < Status::Running {
            g.start = false;
            if pc.known < Status::Created || pc.docker_id.is_none() {
                g.create = false;
            }
        }
    }
    g
}

/// True when every container that depends on `i` (by `dependsOn`, `volumesFrom` or `links`; every
/// other container, for the pause container) has stopped.
fn dependents_stopped(state: &TaskState, i: usize) -> bool {
    state
        .wiring(i)
        .dependents
        .iter()
        .all(|&j| state.containers[j].known == Status::Stopped)
}

/// Decide what to do now. Pure: the same arguments give the same answer.
pub fn decide(state: &TaskState, opts: Options, now: Millis) -> Decision {
    let mut out = Decision::default();

    // 1. Does the task have to stop? The first essential container that stops (or is told to) ends it.
    let task_stopping = state.desired == Status::Stopped;
    if !task_stopping {
        let culprit = state.containers.iter().enumerate().find(|(i, c)| {
            state.def(*i).essential && (c.known == Status::Stopped || c.desired == Status::Stopped)
        });
        if let Some((_, c)) = culprit {
            let (reason, kind) = if c.ran() {
                (ESSENTIAL_EXITED.to_string(), StopKind::EssentialExited)
            } else {
                let reason = match &c.reason {
                    Some(r) => r.clone(),
                    None => format!("essential container {} stopped before it ran", c.name),
                };
                (reason, StopKind::Failed)
            };
            out.actions.push(Action::StopTask { reason, kind });
            // Everything else is decided once the stop has been applied.
            return out;
        }
    }

    for (i, c) in state.containers.iter().enumerate() {
        if c.known == Status::Stopped || c.in_flight.is_some() {
            continue;
        }
        // An exit under a restart policy: restart in place, or settle it STOPPED.
        if c.restart_owed || c.pending_exit.is_some() {
            out.actions.push(after_exit(state, i, opts, now));
            continue;
        }
        if c.desired == Status::Stopped {
            // 2. Shutdown: never-started containers need no Docker call; running ones stop in
            //    reverse dependency order.
            if c.known < Status::Running {
                out.actions.push(Action::MarkStopped {
                    container: i,
                    reason: c.reason.clone().or_else(|| {
                        Some(if task_stopping {
                            "task stopped before the container started".to_string()
                        } else {
                            "stopped before it started".to_string()
                        })
                    }),
                    exit_code: None,
                });
            } else if !c.stop_sent && dependents_stopped(state, i) {
                match c.stop_retry_at {
                    // A failed stop waits for its retry time; the timer wakes the actor then.
                    Some(t) if now < t => {
                        out.wake_at = Some(out.wake_at.map_or(t, |w: Millis| w.min(t)));
                    }
                    _ => out.actions.push(Action::Stop {
                        container: i,
                        timeout_secs: state
                            .def(i)
                            .stop_timeout
                            .unwrap_or(DEFAULT_STOP_TIMEOUT_SECS),
                    }),
                }
            }
            continue;
        }
        if c.known >= Status::Running {
            continue;
        }
        // 3. Bring the container up as far as its dependencies allow.
        let g = gates(state, i, now, &mut out.wake_at);
        if let Some(why) = g.never {
            out.actions.push(Action::MarkStopped {
                container: i,
                reason: Some(why),
                exit_code: Some(EXIT_CODE_NOT_RUN),
            });
            continue;
        }
        match c.known {
            Status::None if g.pull || opts.pull_upfront => out.actions.push(Action::Pull(i)),
            Status::Pulled if g.create => out.actions.push(Action::Create(i)),
            Status::Created if g.start => out.actions.push(Action::Start(i)),
            _ => {}
        }
    }
    out
}

/// What to do with container `i`, which exited under its restart policy (its exit pending, or a
/// restart already decided and counted but not performed): restart it, or mark it STOPPED with its
/// exit code. A stop of the container or its task wins over a restart not yet performed.
fn after_exit(state: &TaskState, i: usize, opts: Options, now: Millis) -> Action {
    let c = &state.containers[i];
    let settle = |exit_code| Action::MarkStopped {
        container: i,
        reason: None,
        exit_code,
    };
    if c.restart_owed {
        return if c.desired == Status::Stopped {
            settle(c.last_restart_exit_code)
        } else {
            Action::Restart(i)
        };
    }
    let exit_code = c.pending_exit.and_then(|p| p.exit_code);
    let verdict = restart::judge(
        Exit {
            policy: state.def(i).restart_policy.as_ref(),
            desired: c.desired,
            exit_code,
            started_at: c.started_at,
            last_restart_at: c.last_restart_at,
        },
        now,
        opts.restart_period_override_ms,
    );
    match verdict {
        Ok(()) => Action::Restart(i),
        Err(_) => settle(exit_code),
    }
}

/// Something that happened to a container: an effect's result or a Docker event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The image is available (pulled, or found in the cache where the pull behaviour allows it).
    Pulled {
        container: usize,
        at: Millis,
    },
    /// No image can be had; `message` is the stop reason (`CannotPullContainerError: ...`).
    /// `stop_task`: the pull behaviour stops the whole task (`always`, `once`), not only this
    /// container.
    PullFailed {
        container: usize,
        at: Millis,
        message: String,
        stop_task: bool,
    },
    /// The pull was given up because the task is stopping (a stop while it was in flight): the
    /// container never got its image and will not run; the shutdown marks it STOPPED like any
    /// container that never started.
    PullAbandoned {
        container: usize,
        at: Millis,
    },
    Created {
        container: usize,
        docker_id: String,
        at: Millis,
    },
    CreateFailed {
        container: usize,
        at: Millis,
        message: String,
    },
    Started {
        container: usize,
        at: Millis,
    },
    StartFailed {
        container: usize,
        at: Millis,
        message: String,
    },
    /// The restart's `docker start` succeeded: the container runs again.
    Restarted {
        container: usize,
        at: Millis,
    },
    /// The restart's `docker start` failed: the container stays STOPPED with the exit code of
    /// the exit it was to be restarted after; `message` is its reason.
    RestartFailed {
        container: usize,
        at: Millis,
        message: String,
    },
    Health {
        container: usize,
        health: Health,
    },
    /// The container's process ended (Docker `die` event, or the result of a stop).
    Exited {
        container: usize,
        exit_code: Option<i64>,
        started_at: Option<Millis>,
        at: Millis,
    },
    /// Docker's inspect of a stopped container explains its exit (an OOM kill, a state error):
    /// the container's reason, unless it already has one.
    ExitReason {
        container: usize,
        reason: String,
    },
    /// Stopping failed even after the runtime's retries, and Docker does not say the container has
    /// stopped: it stays RUNNING (stopping), with the error, and the stop is sent again later
    /// ([`STOP_RETRY`]).
    StopFailed {
        container: usize,
        at: Millis,
        message: String,
    },
    /// The container disappeared from Docker.
    Vanished {
        container: usize,
        at: Millis,
        reason: String,
    },
}

impl TaskState {
    /// Fold one event into the state. Statuses only move forward; events about a step that is
    /// already behind the container are ignored.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Pulled { container, at } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Pull);
                c.pull_stopped_at = Some(*at);
                c.raise_known(Status::Pulled);
            }
            Event::PullFailed {
                container,
                at,
                message,
                stop_task,
            } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Pull);
                c.pull_stopped_at = Some(*at);
                self.fail(*container, *at, message);
                if *stop_task {
                    self.request_stop(message, StopKind::Failed);
                }
            }
            Event::PullAbandoned { container, at } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Pull);
                c.pull_stopped_at = Some(*at);
            }
            Event::Created {
                container,
                docker_id,
                at,
            } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Create);
                c.docker_id = Some(docker_id.clone());
                c.created_at.get_or_insert(*at);
                c.raise_known(Status::Created);
            }
            Event::CreateFailed {
                container,
                at,
                message,
            } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Create);
                self.fail(*container, *at, message);
            }
            Event::Started { container, at } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Start);
                if c.known < Status::Stopped {
                    c.started_at.get_or_insert(*at);
                }
                c.raise_known(Status::Running);
            }
            Event::StartFailed {
                container,
                at,
                message,
            } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Start);
                if c.known < Status::Running {
                    self.fail(*container, *at, message);
                }
            }
            Event::Restarted { container, .. } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Restart);
                c.restart_owed = false;
            }
            Event::RestartFailed {
                container,
                at,
                message,
            } => {
                let c = &mut self.containers[*container];
                c.in_flight = c.in_flight.filter(|op| *op != Op::Restart);
                c.restart_owed = false;
                if c.known < Status::Stopped {
                    c.pending_exit = None;
                    c.exit_code = c.exit_code.or(c.last_restart_exit_code);
                    c.reason.get_or_insert_with(|| message.clone());
                    c.finished_at = Some(*at);
                    c.raise_desired(Status::Stopped);
                    c.raise_known(Status::Stopped);
                    self.note_essential_stop(*container, *at);
                }
            }
            Event::Health { container, health } => {
                let c = &mut self.containers[*container];
                if c.known < Status::Stopped {
                    c.health = *health;
                }
            }
            Event::Exited {
                container,
                exit_code,
                started_at,
                at,
            } => {
                let restartable = RestartPolicy::enabled_of(self.def(*container)).is_some();
                let c = &mut self.containers[*container];
                if c.in_flight == Some(Op::Stop) {
                    c.in_flight = None;
                }
                // An exit from before the last restart (a replayed `die`, or the exit a restart
                // decided before a crash has yet to undo) is already accounted for.
                if c.last_restart_at.is_some_and(|t| *at < t) {
                    return;
                }
                if restartable
                    && c.known < Status::Stopped
                    && c.desired < Status::Stopped
                    && !c.stop_sent
                    && (c.known == Status::Running || c.in_flight == Some(Op::Restart))
                {
                    // Judged by the next decision (restart or STOPPED); known stays RUNNING.
                    c.started_at = c.started_at.or(*started_at).or(Some(*at));
                    c.pending_exit = Some(PendingExit {
                        exit_code: *exit_code,
                        at: *at,
                    });
                    return;
                }
                c.stop_retry_at = None;
                if c.known < Status::Stopped {
                    c.pending_exit = None;
                    c.started_at = c.started_at.or(*started_at).or(Some(*at));
                    c.exit_code = *exit_code;
                    c.finished_at = Some(*at);
                    c.raise_known(Status::Stopped);
                    c.raise_desired(Status::Stopped);
                    self.note_essential_stop(*container, *at);
                }
            }
            Event::ExitReason { container, reason } => {
                let c = &mut self.containers[*container];
                // A pending exit keeps it too: it is the reason if the exit is not restarted.
                if c.known == Status::Stopped || c.pending_exit.is_some() {
                    c.reason.get_or_insert_with(|| reason.clone());
                }
            }
            Event::StopFailed {
                container,
                at,
                message,
            } => {
                let c = &mut self.containers[*container];
                if c.in_flight == Some(Op::Stop) {
                    c.in_flight = None;
                }
                if c.known < Status::Stopped {
                    c.stop_sent = false;
                    c.stop_error = Some(message.clone());
                    c.stop_failures = c.stop_failures.saturating_add(1);
                    let delay = STOP_RETRY.delay(c.stop_failures);
                    let delay = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
                    c.stop_retry_at = Some(at.saturating_add(delay));
                }
            }
            Event::Vanished {
                container,
                at,
                reason,
            } => {
                let c = &mut self.containers[*container];
                c.in_flight = None;
                c.stop_retry_at = None;
                if c.known == Status::Stopped && !c.stop_asked() && c.reason.is_none() {
                    // Killed and removed by someone else (`docker rm -f`): the die came first.
                    c.reason = Some(reason.clone());
                }
                if c.known < Status::Stopped {
                    c.pending_exit = None;
                    c.restart_owed = false;
                    c.reason.get_or_insert_with(|| reason.clone());
                    c.finished_at = Some(*at);
                    c.raise_known(Status::Stopped);
                    c.raise_desired(Status::Stopped);
                    self.note_essential_stop(*container, *at);
                }
            }
        }
    }

    /// Send every failed stop again at the next step instead of at its retry time, the delay
    /// starting again from its first (a `berth stop` of a task still stopping). Returns whether a
    /// container had a failed stop waiting.
    pub fn retry_stops_now(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.containers.len() {
            any |= self.retry_stop_now(i, true);
        }
        any
    }

    /// Send container `i`'s failed stop again at the next step (after an event-stream resync that
    /// found it still running); `reset` also starts the delay again from its first. Returns
    /// whether it had a failed stop waiting.
    pub fn retry_stop_now(&mut self, i: usize, reset: bool) -> bool {
        let c = &mut self.containers[i];
        let waiting = c.known < Status::Stopped
            && c.desired == Status::Stopped
            && !c.stop_sent
            && c.stop_retry_at.is_some();
        if waiting {
            c.stop_retry_at = None;
            if reset {
                c.stop_failures = 0;
            }
        }
        waiting
    }

    /// A step failed terminally: the container will never run.
    fn fail(&mut self, i: usize, at: Millis, message: &str) {
        let c = &mut self.containers[i];
        if c.known < Status::Stopped {
            c.reason.get_or_insert_with(|| message.to_string());
            c.finished_at = Some(at);
            c.raise_desired(Status::Stopped);
            c.raise_known(Status::Stopped);
            self.note_essential_stop(i, at);
        }
    }

    fn note_essential_stop(&mut self, i: usize, at: Millis) {
        if self.def(i).essential && self.execution_stopped_at.is_none() {
            self.execution_stopped_at = Some(at);
        }
    }

    /// Apply one bookkeeping action, or mark one effect as in flight.
    pub fn begin(&mut self, action: &Action, now: Millis) {
        match action {
            Action::Pull(i) => {
                let c = &mut self.containers[*i];
                c.in_flight = Some(Op::Pull);
                c.pull_started_at.get_or_insert(now);
            }
            Action::Create(i) => self.containers[*i].in_flight = Some(Op::Create),
            Action::Start(i) => self.containers[*i].in_flight = Some(Op::Start),
            Action::Restart(i) => {
                let c = &mut self.containers[*i];
                c.in_flight = Some(Op::Restart);
                if !c.restart_owed {
                    // Counted when decided, before `docker start` (ECS's `RecordRestart`).
                    c.restart_count = c.restart_count.saturating_add(1);
                    c.last_restart_at = Some(now);
                    c.last_restart_exit_code = c.pending_exit.and_then(|p| p.exit_code);
                    c.restart_owed = true;
                }
                c.pending_exit = None;
                c.health = Health::Unknown;
                // The restarted run has no reason to stop yet (an OOM kill of the exit is gone).
                c.reason = None;
            }
            Action::Stop { container, .. } => {
                let c = &mut self.containers[*container];
                c.in_flight = Some(Op::Stop);
                c.stop_sent = true;
            }
            Action::MarkStopped {
                container,
                reason,
                exit_code,
            } => {
                let c = &mut self.containers[*container];
                if c.known < Status::Stopped {
                    c.restart_owed = false;
                    if let Some(exit) = c.pending_exit.take() {
                        c.finished_at = Some(exit.at);
                    }
                    if let Some(r) = reason {
                        c.reason.get_or_insert_with(|| r.clone());
                    }
                    if c.exit_code.is_none() {
                        c.exit_code = *exit_code;
                    }
                    c.finished_at.get_or_insert(now);
                    c.raise_desired(Status::Stopped);
                    c.raise_known(Status::Stopped);
                    self.note_essential_stop(*container, now);
                }
            }
            Action::StopTask { reason, kind } => self.request_stop(reason, *kind),
        }
    }

    /// Run [`decide`] to a fixpoint: apply bookkeeping actions here, mark effects in flight, and
    /// return the effects (to perform) and the next timer.
    pub fn step(&mut self, opts: Options, now: Millis) -> (Vec<Action>, Option<Millis>) {
        let mut effects = Vec::new();
        // Each round either applies a bookkeeping action (which moves a status forward, bounded by
        // the number of containers times statuses) or returns; the bound is a safety net only.
        for _ in 0..(self.containers.len() * 8 + 8) {
            let decision = decide(self, opts, now);
            let mut bookkeeping = false;
            for action in &decision.actions {
                bookkeeping |= !action.is_effect();
                self.begin(action, now);
                if action.is_effect() {
                    effects.push(action.clone());
                }
            }
            if !bookkeeping {
                return (effects, decision.wake_at);
            }
        }
        (effects, None)
    }
}
