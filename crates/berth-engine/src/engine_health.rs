//! Whether the Docker Engine answers: [`EngineHealth`] keeps when the Engine last answered and the
//! last error since, and turns them into a verdict — degraded, with why, once the Engine has not
//! answered for longer than the operator's limit (`--engine-unhealthy-after`). The agent feeds it
//! from a periodic ping ([`EngineHealth::period`]) and its health endpoint reads the verdict.
//!
//! Invariant: one answer clears the verdict (the Engine is back); a failure only counts once the
//! limit has passed since the last answer, so one refused call never makes the agent degraded.

use crate::report::rfc3339;
use crate::state::Millis;
use std::sync::Mutex;
use std::time::Duration;

/// The Engine's answers as the agent sees them.
#[derive(Debug)]
pub struct EngineHealth {
    unhealthy_after: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the Engine last answered (the agent's start counts as one: it connected then).
    last_answer: Millis,
    /// The last failure since then.
    last_error: Option<String>,
}

impl EngineHealth {
    /// An Engine that answered at `now`, judged degraded after `unhealthy_after` without answer.
    pub fn new(unhealthy_after: Duration, now: Millis) -> Self {
        EngineHealth {
            unhealthy_after,
            state: Mutex::new(State {
                last_answer: now,
                last_error: None,
            }),
        }
    }

    /// How often to ask the Engine: a quarter of the limit, between 100 ms and 10 s, so the
    /// verdict follows the limit closely.
    pub fn period(&self) -> Duration {
        (self.unhealthy_after / 4).clamp(Duration::from_millis(100), Duration::from_secs(10))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Two plain fields, each written in one statement: a panic elsewhere leaves them whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The Engine answered at `now`.
    pub fn answered(&self, now: Millis) {
        let mut s = self.state();
        s.last_answer = s.last_answer.max(now);
        s.last_error = None;
    }

    /// A call to the Engine failed with `error`.
    pub fn failed(&self, error: impl Into<String>) {
        self.state().last_error = Some(error.into());
    }

    /// Why the agent is degraded because of the Engine at `now`, or `None` while it answers (or
    /// has not been silent for longer than the limit).
    pub fn verdict(&self, now: Millis) -> Option<String> {
        let s = self.state();
        let limit = i64::try_from(self.unhealthy_after.as_millis()).unwrap_or(i64::MAX);
        if now.saturating_sub(s.last_answer) <= limit {
            return None;
        }
        let error = s
            .last_error
            .as_deref()
            .unwrap_or("no call has failed, but none was answered");
        Some(format!(
            "the Docker Engine has not answered since {} (over {}; --engine-unhealthy-after): {error}",
            rfc3339(s.last_answer),
            humantime::format_duration(self.unhealthy_after)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_only_after_the_limit_without_answer_and_ok_at_the_next_answer() {
        let h = EngineHealth::new(Duration::from_secs(60), 0);
        h.failed("refused");
        assert_eq!(h.verdict(59_000), None, "within the limit");
        let why = h.verdict(61_000).expect("degraded");
        assert!(
            why.starts_with("the Docker Engine has not answered since 1970-01-01T00:00:00")
                && why.ends_with(": refused"),
            "{why}"
        );
        h.answered(62_000);
        assert_eq!(h.verdict(62_500), None);
        assert_eq!(h.period(), Duration::from_secs(10));
        assert_eq!(
            EngineHealth::new(Duration::from_secs(2), 0).period(),
            Duration::from_millis(500)
        );
    }
}
