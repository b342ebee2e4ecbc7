//! Property tests of the decision core over random tasks and random orders of results and events:
//! known status never decreases, nobody starts before its dependencies hold (a link's target
//! exists before the linking container is created and runs when it starts), running containers
//! are stopped only after their dependents (linking containers included), a failed stop never
//! marks a container STOPPED (it is sent again, no earlier than its retry time), and every task
//! ends.
//! Some containers have a restart policy (a shortened period, sometimes exit code 0 ignored):
//! restarts happen only under an enabled policy for an exit code it does not ignore, a restart
//! keeps the container RUNNING, and a task stopped meanwhile still ends.

mod common;

use berth_engine::decide::{Action, Event, Options};
use berth_engine::state::{Health, Status, StopKind, TaskState};
use berth_model::{Condition, Link, RestartPolicy};
use common::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Script {
    pull_ok: bool,
    create_ok: bool,
    start_ok: bool,
    /// Exit code once running (None: runs until stopped).
    exit: Option<i64>,
    /// Health reported once running.
    health: Option<bool>,
    /// A restart policy: None = none; Some(true) = enabled, exit code 0 ignored; Some(false) =
    /// enabled, nothing ignored.
    restart: Option<bool>,
    /// Whether the restart's `docker start` succeeds.
    restart_ok: bool,
    /// How many stops of it fail before one succeeds (the Engine refusing them).
    stop_failures: u8,
}

fn script() -> impl Strategy<Value = Script> {
    (
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
        prop::option::of(0i64..3),
        prop::option::of(prop::bool::weighted(0.8)),
        prop::option::of(prop::bool::ANY),
        prop::bool::weighted(0.9),
        prop::sample::select(vec![0u8, 0, 1, 3]),
    )
        .prop_map(
            |(pull_ok, create_ok, start_ok, exit, health, restart, restart_ok, stop_failures)| {
                Script {
                    pull_ok,
                    create_ok,
                    start_ok,
                    exit,
                    health,
                    restart,
                    restart_ok,
                    stop_failures,
                }
            },
        )
}

fn condition() -> impl Strategy<Value = Condition> {
    prop::sample::select(Condition::ALL.to_vec())
}

/// A random acyclic task: container i may depend on and link to only containers before it.
fn task_strategy() -> impl Strategy<Value = (TaskState, Vec<Script>)> {
    task_without_policies().prop_map(|(mut s, scripts)| {
        for (i, sc) in scripts.iter().enumerate() {
            if let Some(ignore_zero) = sc.restart {
                s.definition.container_definitions[i].restart_policy = Some(RestartPolicy {
                    enabled: true,
                    ignored_exit_codes: if ignore_zero { vec![0] } else { Vec::new() },
                    restart_attempt_period: 60,
                });
            }
        }
        (s, scripts)
    })
}

/// How many restarts a scripted container exits after again (then it runs until stopped).
const EXITS_AFTER_RESTART: u32 = 2;

/// The restart period the plays use (each step is 10 ms): some exits come early, some late.
const PERIOD_MS: u64 = 15;

fn task_without_policies() -> impl Strategy<Value = (TaskState, Vec<Script>)> {
    (1usize..6)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(
                    (
                        prop::collection::vec((0usize..n, condition()), 0..3),
                        prop::bool::weighted(0.6),
                        prop::bool::ANY,
                        prop::collection::vec(0usize..n, 0..2),
                    ),
                    n,
                ),
                prop::collection::vec(script(), n),
            )
        })
        .prop_map(|(specs, scripts)| {
            let n = specs.len();
            let mut defs = Vec::new();
            for (i, (deps, essential, with_health, links)) in specs.into_iter().enumerate() {
                let mut c = container(&format!("c{i}"));
                c.essential = essential;
                if with_health {
                    c = healthy(c);
                }
                let mut seen = Vec::new();
                for (d, cond) in deps {
                    if d < i && !seen.contains(&d) {
                        seen.push(d);
                        c = depends(c, &format!("c{d}"), cond);
                    }
                }
                // Validation refuses a link to a container waited for with COMPLETE or SUCCESS.
                for t in links {
                    let target = format!("c{t}");
                    let exits = c.depends_on.iter().any(|d| {
                        d.container_name == target
                            && matches!(d.condition, Condition::Complete | Condition::Success)
                    });
                    if t < i && !exits {
                        c.links.push(Link::with_alias(target, format!("l{t}")));
                    }
                }
                defs.push(c);
            }
            // HEALTHY needs a health check on the dependency (validation guarantees it).
            for i in 0..n {
                let deps = defs[i].depends_on.clone();
                for dep in deps {
                    if dep.condition == Condition::Healthy {
                        let d: usize = dep.container_name[1..].parse().unwrap_or(0);
                        if defs[d].health_check.is_none() {
                            defs[d] = healthy(defs[d].clone());
                        }
                    }
                }
            }
            if !defs.iter().any(|c| c.essential) {
                defs[n - 1].essential = true;
            }
            (state(defs), scripts)
        })
}

/// Whether `cond` on dependency `d` holds in `s` (the ground truth the property checks against).
fn holds(s: &TaskState, d: usize, cond: Condition) -> bool {
    let c = &s.containers[d];
    match cond {
        Condition::Start => c.ran(),
        Condition::Complete => c.known == Status::Stopped && c.ran(),
        Condition::Success => c.known == Status::Stopped && c.ran() && c.exit_code == Some(0),
        Condition::Healthy => c.health == Health::Healthy,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_event_orders_keep_the_invariants(
        (mut s, scripts) in task_strategy(),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 200),
        stop_at in prop::option::of(0usize..40),
    ) {
        let mut pending: Vec<Event> = Vec::new();
        let mut now = 0i64;
        let mut pick = picks.into_iter().cycle();
        let mut steps = 0usize;
        let mut stop_failures_left: Vec<u8> = scripts.iter().map(|sc| sc.stop_failures).collect();
        loop {
            steps += 1;
            prop_assert!(steps < 2_000, "task did not end: {s:#?}");
            now += 10;
            if Some(steps) == stop_at {
                s.request_stop("user", StopKind::Requested);
            }
            let before: Vec<(Status, Status)> = s.containers.iter().map(|c| (c.known, c.desired)).collect();
            let opts = Options {
                restart_period_override_ms: Some(PERIOD_MS),
                ..Options::default()
            };
            let (effects, wake_at) = s.step(opts, now);
            for (c, (k, d)) in s.containers.iter().zip(&before) {
                prop_assert!(c.known >= *k, "known went backwards");
                prop_assert!(c.desired >= *d, "desired went backwards");
            }
            for a in effects {
                match a {
                    Action::Pull(i) => pending.push(if scripts[i].pull_ok {
                        Event::Pulled { container: i, at: now }
                    } else {
                        Event::PullFailed { container: i, at: now, message: "no image".into(), stop_task: scripts[i].exit == Some(2) }
                    }),
                    Action::Create(i) => {
                        // Pipelining: only START dependencies may be merely created.
                        for dep in &s.def(i).depends_on {
                            let d = s.index_of(&dep.container_name).unwrap_or(0);
                            if dep.condition == Condition::Start {
                                prop_assert!(s.containers[d].docker_id.is_some());
                            } else {
                                prop_assert!(holds(&s, d, dep.condition), "created before {:?} held", dep.condition);
                            }
                        }
                        for link in &s.def(i).links {
                            let t = s.index_of(&link.container_name).unwrap_or(0);
                            prop_assert!(s.containers[t].docker_id.is_some(), "created before its link target exists");
                        }
                        pending.push(if scripts[i].create_ok {
                            Event::Created { container: i, docker_id: format!("id{i}"), at: now }
                        } else {
                            Event::CreateFailed { container: i, at: now, message: "bad".into() }
                        });
                    }
                    Action::Start(i) => {
                        for dep in &s.def(i).depends_on {
                            let d = s.index_of(&dep.container_name).unwrap_or(0);
                            prop_assert!(holds(&s, d, dep.condition), "started before {:?} held", dep.condition);
                        }
                        for link in &s.def(i).links {
                            let t = &s.containers[s.index_of(&link.container_name).unwrap_or(0)];
                            prop_assert!(t.known == Status::Running, "started while its link target is {}", t.known);
                        }
                        if scripts[i].start_ok {
                            pending.push(Event::Started { container: i, at: now });
                            // Docker reports health only for health-checked containers, and always
                            // eventually (healthy, or unhealthy after its retries).
                            let reported = s.def(i).health_check.as_ref().map(|_| scripts[i].health.unwrap_or(true));
                            if let Some(h) = reported {
                                pending.push(Event::Health { container: i, health: if h { Health::Healthy } else { Health::Unhealthy } });
                            }
                            if let Some(code) = scripts[i].exit {
                                pending.push(Event::Exited { container: i, exit_code: Some(code), started_at: None, at: now });
                            }
                        } else {
                            pending.push(Event::StartFailed { container: i, at: now, message: "no".into() });
                        }
                    }
                    Action::Stop { container: i, .. } => {
                        // Reverse order: everything that depends on i has stopped.
                        let name = s.containers[i].name.clone();
                        for (j, d) in s.definition.container_definitions.iter().enumerate() {
                            if d.depends_on.iter().any(|x| x.container_name == name)
                                || d.links.iter().any(|x| x.container_name == name)
                            {
                                prop_assert_eq!(s.containers[j].known, Status::Stopped, "stopped {} before its dependent {}", name, j);
                            }
                        }
                        // A failed stop is sent again only once its retry time has come.
                        if let Some(t) = s.containers[i].stop_retry_at {
                            prop_assert!(now >= t, "stop of {} sent again at {} before its retry time {}", name, now, t);
                        }
                        if stop_failures_left[i] > 0 {
                            stop_failures_left[i] -= 1;
                            pending.push(Event::StopFailed { container: i, at: now, message: "CannotStopContainerError: refused".into() });
                        } else {
                            pending.push(Event::Exited { container: i, exit_code: Some(143), started_at: None, at: now });
                        }
                    }
                    Action::Restart(i) => {
                        let c = &s.containers[i];
                        let policy = s.def(i).restart_policy.clone();
                        prop_assert!(policy.as_ref().is_some_and(|p| p.enabled), "restarted without a policy");
                        let code = c.last_restart_exit_code;
                        prop_assert!(code.is_some_and(|code| policy.is_some_and(|p| !p.ignored_exit_codes.contains(&code))), "restarted after an ignored exit code {code:?}");
                        prop_assert_eq!(c.known, Status::Running, "a restarted container stays RUNNING");
                        if scripts[i].restart_ok {
                            pending.push(Event::Restarted { container: i, at: now });
                            if c.restart_count <= EXITS_AFTER_RESTART && let Some(code) = scripts[i].exit {
                                pending.push(Event::Exited { container: i, exit_code: Some(code), started_at: None, at: now + 1 });
                            }
                        } else {
                            pending.push(Event::RestartFailed { container: i, at: now, message: "no".into() });
                        }
                    }
                    Action::MarkStopped { .. } | Action::StopTask { .. } => {}
                }
            }
            if s.is_finished() {
                break;
            }
            if pending.is_empty() && let Some(t) = wake_at {
                // A failed stop waits for its retry time: let the clock get there.
                prop_assert!(t > now, "a timer in the past: {t} <= {now}");
                now = t;
                continue;
            }
            if pending.is_empty() {
                // Nothing in flight and nothing to do: long-running containers (or a dependent
                // waiting for one to complete) only move on when someone stops the task, and a
                // stopping task must never get here.
                prop_assert!(s.containers.iter().all(|c| c.in_flight.is_none()));
                prop_assert!(s.desired != Status::Stopped, "stopping task stuck: {s:#?}");
                s.request_stop("user", StopKind::Requested);
                continue;
            }
            let k = pick.next().map(|ix| ix.index(pending.len())).unwrap_or(0);
            let ev = pending.remove(k);
            let known_before = match &ev {
                Event::StopFailed { container, .. } => Some((*container, s.containers[*container].known)),
                _ => None,
            };
            s.apply(&ev);
            if let Some((i, k)) = known_before {
                // Never STOPPED because a stop call failed: a container that ran still runs (one
                // whose exit came first stays as it was).
                prop_assert_eq!(s.containers[i].known, k, "a failed stop changed {}'s known status", i);
                if k < Status::Stopped {
                    prop_assert!(s.containers[i].stop_error.is_some() && s.containers[i].stop_retry_at.is_some());
                }
            }
        }
        prop_assert_eq!(s.known(), Status::Stopped);
        prop_assert!(s.stopped_reason.is_some() || s.desired == Status::Stopped);
    }
}
