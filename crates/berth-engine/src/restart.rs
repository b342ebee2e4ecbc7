//! The container restart rule (ECS's `restartPolicy`), as one pure function over the policy, the
//! exit and the times: [`judge`]. The decision core ([`crate::decide`]) asks it when a container
//! with an enabled policy exits on its own; the actor never decides a restart itself.
//!
//! ECS's rule (`ecs-agent/api/container/restart/restart_tracker.go`, `ShouldRestart`), followed
//! step by step: no restart when the policy is disabled, when the container's desired status is
//! STOPPED, when the exit code is unknown or listed in `ignoredExitCodes`, or when less than
//! `restartAttemptPeriod` has passed since the container's start — or since its last restart,
//! once it has one — counted up to the moment the exit is judged (ECS: `time.Since`), which for a
//! container that exited while the agent was down is the adoption. ECS counts a restart when it
//! decides it, before `docker start` (`RecordRestart`, then `startContainer`): so does berth
//! ([`crate::state::ContainerState::restart_count`]).
//!
//! The period is ECS's (60 – 1800 s, default 300, validated by the model). Tests shorten it
//! through [`crate::decide::Options::restart_period_override_ms`], which only the agent's
//! test-only environment variable sets.

use crate::state::{Millis, Status};
use berth_model::RestartPolicy;
use std::fmt;

/// Why an exit does not restart the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRestart {
    /// No policy, or `enabled: false`.
    Disabled,
    /// The container (or its task) is being stopped.
    DesiredStopped,
    /// Docker gave no exit code.
    NoExitCode,
    /// The exit code is in `ignoredExitCodes`.
    Ignored(i64),
    /// The container ran `ran_ms` since its start or last restart, less than the period.
    TooEarly { ran_ms: Millis, period_ms: Millis },
}

impl fmt::Display for NoRestart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoRestart::Disabled => f.write_str("restart policy is not enabled"),
            NoRestart::DesiredStopped => f.write_str("the container's desired status is STOPPED"),
            NoRestart::NoExitCode => f.write_str("the exit code is unknown"),
            NoRestart::Ignored(code) => write!(f, "exit code {code} is in ignoredExitCodes"),
            NoRestart::TooEarly { ran_ms, period_ms } => write!(
                f,
                "it ran {}.{:03} s since its start or last restart, less than its restartAttemptPeriod of {}.{:03} s",
                ran_ms / 1000,
                ran_ms % 1000,
                period_ms / 1000,
                period_ms % 1000
            ),
        }
    }
}

/// What [`judge`] looks at for one exited container.
#[derive(Debug, Clone, Copy)]
pub struct Exit<'a> {
    pub policy: Option<&'a RestartPolicy>,
    pub desired: Status,
    pub exit_code: Option<i64>,
    /// When the container first started (ECS: the container's `StartedAt`).
    pub started_at: Option<Millis>,
    /// When berth last restarted it (ECS: `LastRestartAt`).
    pub last_restart_at: Option<Millis>,
}

/// Restart the container (`Ok`), or why not. `now` is when the exit is judged;
/// `period_override_ms` replaces the policy's period (tests only).
pub fn judge(
    exit: Exit<'_>,
    now: Millis,
    period_override_ms: Option<u64>,
) -> Result<(), NoRestart> {
    let policy = exit
        .policy
        .filter(|p| p.enabled)
        .ok_or(NoRestart::Disabled)?;
    if exit.desired == Status::Stopped {
        return Err(NoRestart::DesiredStopped);
    }
    let code = exit.exit_code.ok_or(NoRestart::NoExitCode)?;
    if policy.ignored_exit_codes.contains(&code) {
        return Err(NoRestart::Ignored(code));
    }
    let period_ms = match period_override_ms {
        Some(ms) => Millis::try_from(ms).unwrap_or(Millis::MAX),
        None => Millis::from(policy.restart_attempt_period) * 1000,
    };
    // ECS: the last restart when there is one, else the start; a container that never started
    // has run for no time.
    let since = exit.last_restart_at.or(exit.started_at).unwrap_or(now);
    let ran_ms = now.saturating_sub(since).max(0);
    if ran_ms < period_ms {
        return Err(NoRestart::TooEarly { ran_ms, period_ms });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(ignored: &[i64], period: u32) -> RestartPolicy {
        RestartPolicy {
            enabled: true,
            ignored_exit_codes: ignored.to_vec(),
            restart_attempt_period: period,
        }
    }

    fn exit(p: &RestartPolicy, code: Option<i64>) -> Exit<'_> {
        Exit {
            policy: Some(p),
            desired: Status::Running,
            exit_code: code,
            started_at: Some(1_000),
            last_restart_at: None,
        }
    }

    #[test]
    fn an_exit_after_the_period_restarts() {
        let p = policy(&[], 60);
        assert_eq!(judge(exit(&p, Some(1)), 61_000, None), Ok(()));
        assert_eq!(
            judge(exit(&p, Some(1)), 60_999, None),
            Err(NoRestart::TooEarly {
                ran_ms: 59_999,
                period_ms: 60_000
            })
        );
    }

    #[test]
    fn the_period_counts_from_the_last_restart_once_there_is_one() {
        let p = policy(&[], 60);
        let e = Exit {
            last_restart_at: Some(100_000),
            ..exit(&p, Some(1))
        };
        assert!(matches!(
            judge(e, 150_000, None),
            Err(NoRestart::TooEarly { .. })
        ));
        assert_eq!(judge(e, 160_000, None), Ok(()));
    }

    #[test]
    fn every_reason_not_to_restart_in_ecs_order() {
        let p = policy(&[0, 2], 60);
        let disabled = RestartPolicy {
            enabled: false,
            ..p.clone()
        };
        let late = 1_000_000;
        assert_eq!(
            judge(
                Exit {
                    policy: Some(&disabled),
                    ..exit(&p, Some(1))
                },
                late,
                None
            ),
            Err(NoRestart::Disabled)
        );
        assert_eq!(
            judge(
                Exit {
                    policy: None,
                    ..exit(&p, Some(1))
                },
                late,
                None
            ),
            Err(NoRestart::Disabled)
        );
        assert_eq!(
            judge(
                Exit {
                    desired: Status::Stopped,
                    ..exit(&p, Some(1))
                },
                late,
                None
            ),
            Err(NoRestart::DesiredStopped)
        );
        assert_eq!(
            judge(exit(&p, None), late, None),
            Err(NoRestart::NoExitCode)
        );
        assert_eq!(
            judge(exit(&p, Some(2)), late, None),
            Err(NoRestart::Ignored(2))
        );
        assert_eq!(judge(exit(&p, Some(137)), late, None), Ok(()));
    }

    #[test]
    fn the_test_override_replaces_the_period() {
        let p = policy(&[], 1800);
        assert_eq!(judge(exit(&p, Some(1)), 3_000, Some(2_000)), Ok(()));
        assert!(judge(exit(&p, Some(1)), 2_500, Some(2_000)).is_err());
    }

    #[test]
    fn reasons_read_well() {
        assert_eq!(
            NoRestart::TooEarly {
                ran_ms: 1_250,
                period_ms: 60_000
            }
            .to_string(),
            "it ran 1.250 s since its start or last restart, less than its restartAttemptPeriod of 60.000 s"
        );
        assert_eq!(
            NoRestart::Ignored(0).to_string(),
            "exit code 0 is in ignoredExitCodes"
        );
    }
}
