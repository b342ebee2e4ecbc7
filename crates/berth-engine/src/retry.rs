//! Retry schedules: [`RetryPolicy`], the one doubling schedule berth waits on between attempts.
//!
//! Three forms of the same schedule, so every caller gets the same delays:
//!
//! - [`RetryPolicy::delay`]`(n)`: the wait after the `n`-th failure in a row, pure. The decision
//!   core keeps the failure count in the task state (a stop's retry) and computes the time from
//!   it, so the schedule survives a restart; backon's schedules are iterators and have no such
//!   form, hence this one is written here (three lines).
//! - [`Backoff`]: a failure count over the policy, for loops that wait in their own `select!`
//!   (the agent's cleanup, the actor's save, the introspection API's bind).
//! - [`RetryPolicy::exponential`]: the policy as a `backon` builder, for retry loops run by backon
//!   (with its jitter and attempt limit where the caller wants them: berth-docker's pulls and
//!   stops).
//!
//! Invariant: the three agree (tested): `first`, doubled after each failure, never above `max`
//! (a `first` above `max` is `max`).

use backon::ExponentialBuilder;
use std::time::Duration;

/// A doubling schedule: after `first`, then twice as long each time, never longer than `max`.
/// The default is the agent's schedule for a refused task cleanup: 10 s doubling to 10 min.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            first: Duration::from_secs(10),
            max: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// A fresh schedule, starting at `first`.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            policy: *self,
            attempts: 0,
        }
    }

    /// The schedule as a backon builder: `first` doubling to `max`, no limit on attempts (add
    /// `with_max_times`) and no jitter (add `with_jitter`). A `first` above `max` is `max`.
    pub fn exponential(&self) -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(self.first.min(self.max))
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times()
    }

    /// The wait after the `failures`-th failure in a row (1 = the first): `first`, doubled for
    /// each failure before it, never above `max`. The decision core computes a stop's next
    /// attempt from this without keeping a [`Backoff`] (its state is the failure count it stores).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.first.saturating_mul(1u32 << doublings).min(self.max)
    }
}

/// One run of retries on a [`RetryPolicy`]: its failure count, for loops that wait in their own
/// `select!` (a cleanup also tried at once on `berth rm`, a save also tried at every event).
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    attempts: u32,
}

impl Backoff {
    /// How long to wait before the next attempt; each call doubles the following one, up to the
    /// policy's maximum.
    pub fn next_delay(&mut self) -> Duration {
        self.attempts = self.attempts.saturating_add(1);
        self.policy.delay(self.attempts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    #[test]
    fn the_default_schedule_doubles_from_ten_seconds_to_ten_minutes() {
        let mut b = RetryPolicy::default().backoff();
        let secs: Vec<u64> = (0..9).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 320, 600, 600, 600]);
    }

    #[test]
    fn a_first_delay_above_the_maximum_is_capped() {
        let mut b = RetryPolicy {
            first: Duration::from_secs(5),
            max: Duration::from_secs(1),
        }
        .backoff();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn the_delay_after_n_failures_is_the_backoffs_nth_and_never_overflows() {
        let p = RetryPolicy::default();
        let mut b = p.backoff();
        for n in 1..=12 {
            assert_eq!(p.delay(n), b.next_delay(), "failure {n}");
        }
        assert_eq!(p.delay(0), p.first);
        assert_eq!(p.delay(u32::MAX), p.max);
    }

    #[test]
    fn backon_runs_the_same_schedule() {
        for p in [
            RetryPolicy::default(),
            RetryPolicy {
                first: Duration::from_millis(500),
                max: Duration::from_secs(8),
            },
            RetryPolicy {
                first: Duration::from_secs(5),
                max: Duration::from_secs(1),
            },
        ] {
            let from_backon: Vec<Duration> = p.exponential().build().take(12).collect();
            let pure: Vec<Duration> = (1..=12).map(|n| p.delay(n)).collect();
            assert_eq!(from_backon, pure, "{p:?}");
        }
        let limited = RetryPolicy::default()
            .exponential()
            .with_max_times(4)
            .build();
        assert_eq!(limited.count(), 4);
    }
}
