//! The stop effect. A stop is done when Docker says so: after every stop call, failed or not, one
//! inspect decides ([`stop_container`]): not running is the exit, not found is a vanished
//! container, anything else is a failed stop (ECS's `CannotStopContainerError`) that leaves the
//! container RUNNING with its error, sent again on the decision core's retry timer, at once when
//! a `Stop` or `Kill` command comes, and at once after an event-stream resync or an adoption that
//! finds it still running.

use super::VANISHED_REASON;
use super::effects::Context;
use crate::decide::Event;
use crate::report::now_ms;
use crate::runtime::{Runtime, RuntimeError};
use crate::state::TaskState;

/// Perform `Action::Stop { container: i, timeout_secs }`.
pub(super) fn spawn<R: Runtime>(cx: &Context<'_, R>, i: usize, timeout_secs: u32) {
    let (rt, tx) = (cx.rt.clone(), cx.effects.results.clone());
    let target = stop_target(cx.state, i);
    cx.effects.spawn(async move {
        let ev = stop_container(&*rt, &target, i, timeout_secs).await;
        let _ = tx.send(ev);
    });
}

/// Who a stop is sent to: the container's Docker id, or — should the id be missing, which only an
/// engine bug can cause — its Docker name, decided before `create` and unique to this task.
fn stop_target(state: &TaskState, i: usize) -> String {
    let c = &state.containers[i];
    c.docker_id.clone().unwrap_or_else(|| {
        tracing::error!(task = %state.id, container = %c.name, "no Docker id to stop; stopping by name (please report this)");
        c.docker_name.clone()
    })
}

/// Stop a container and say what Docker says about it afterwards. A stop is done when Docker
/// says so: an inspect that finds it not running (after a stop that succeeded, or one that
/// failed: a 304 or a lost answer may hide a stop that happened) is its exit; "no such container"
/// means it is gone; anything else — the stop refused, a timeout, the Engine unreachable, the
/// container still running — is a failed stop, which leaves it RUNNING to be stopped again.
async fn stop_container<R: Runtime>(rt: &R, target: &str, i: usize, timeout_secs: u32) -> Event {
    let stopped = rt.stop(target, timeout_secs).await;
    if let Err(RuntimeError::NotFound { .. }) = stopped {
        return Event::Vanished {
            container: i,
            at: now_ms(),
            reason: VANISHED_REASON.into(),
        };
    }
    let failure = match (stopped, rt.inspect(target).await) {
        (_, Ok(info)) if !info.running => {
            return Event::Exited {
                container: i,
                exit_code: info.exit_code,
                started_at: info.started_at,
                at: info.finished_at.unwrap_or_else(now_ms),
            };
        }
        (_, Err(RuntimeError::NotFound { .. })) => {
            return Event::Vanished {
                container: i,
                at: now_ms(),
                reason: VANISHED_REASON.into(),
            };
        }
        (Err(e), _) => e.to_string(),
        (Ok(()), Ok(_)) => "Docker answered the stop but still runs the container".to_string(),
        (Ok(()), Err(e)) => format!("the stop was answered, but the inspect after it failed: {e}"),
    };
    Event::StopFailed {
        container: i,
        at: now_ms(),
        message: format!("{STOP_FAILURE_PREFIX}: {failure}"),
    }
}

/// The prefix of a failed stop's error (ECS's error name).
pub const STOP_FAILURE_PREFIX: &str = "CannotStopContainerError";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::test_support::one_container;

    #[test]
    fn a_stop_without_docker_id_goes_to_the_containers_docker_name() {
        let mut s = one_container();
        assert_eq!(stop_target(&s, 0), s.containers[0].docker_name);
        s.containers[0].docker_id = Some("abc".into());
        assert_eq!(stop_target(&s, 0), "abc");
    }
}
