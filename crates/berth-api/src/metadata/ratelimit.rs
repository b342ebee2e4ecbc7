//! Per-id rate limiting: one token bucket per metadata id (ECS's default: 40 requests/s, burst 60).
//!
//! A bucket holds at most `burst` tokens, refills at `per_second` tokens a second, and each request
//! takes one; a request finding the bucket empty is answered 429. `per_second = 0` disables limiting.

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

/// The rate limit applied to each metadata id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Sustained requests per second; 0 = no limit.
    pub per_second: u32,
    /// Requests allowed at once after a quiet period (at least 1 when limiting).
    pub burst: u32,
}

impl RateLimit {
    /// ECS agent's defaults (`ECS_TASK_METADATA_RPS_LIMIT=40,60`).
    pub const ECS_DEFAULT: RateLimit = RateLimit {
        per_second: 40,
        burst: 60,
    };
    /// No limit.
    pub const DISABLED: RateLimit = RateLimit {
        per_second: 0,
        burst: 0,
    };

    pub fn is_disabled(&self) -> bool {
        self.per_second == 0
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit::ECS_DEFAULT
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_disabled() {
            f.write_str("0")
        } else {
            write!(f, "{}/{}", self.per_second, self.burst)
        }
    }
}

/// Why a rate limit could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a rate limit; write N/BURST (e.g. 40/60), N (burst = N), or 0 for none")]
pub struct RateLimitParseError(pub String);

impl FromStr for RateLimit {
    type Err = RateLimitParseError;

    /// `N/BURST`, `N` (burst N), `N,BURST` (the ECS variable's form), or `0` / `off` (disabled).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || RateLimitParseError(s.to_string());
        let t = s.trim();
        if t.eq_ignore_ascii_case("off") {
            return Ok(RateLimit::DISABLED);
        }
        let (rate, burst) = match t.split_once(['/', ',']) {
            Some((r, b)) => (r.trim(), Some(b.trim())),
            None => (t, None),
        };
        let per_second: u32 = rate.parse().map_err(|_| err())?;
        if per_second == 0 {
            return Ok(RateLimit::DISABLED);
        }
        let burst: u32 = match burst {
            Some(b) => b.parse().map_err(|_| err())?,
            None => per_second,
        };
        if burst == 0 {
            return Err(err());
        }
        Ok(RateLimit { per_second, burst })
    }
}

/// A token bucket (starts full).
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub(crate) fn new(limit: RateLimit, now: Instant) -> Self {
        TokenBucket {
            tokens: f64::from(limit.burst.max(1)),
            last: now,
        }
    }

    /// Take one token if there is one.
    pub(crate) fn try_take(&mut self, limit: RateLimit, now: Instant) -> bool {
        if limit.is_disabled() {
            return true;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * f64::from(limit.per_second))
            .min(f64::from(limit.burst.max(1)));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!("40/60".parse(), Ok(RateLimit::ECS_DEFAULT));
        assert_eq!("40,60".parse(), Ok(RateLimit::ECS_DEFAULT));
        assert_eq!(
            "10".parse(),
            Ok(RateLimit {
                per_second: 10,
                burst: 10
            })
        );
        assert_eq!("0".parse(), Ok(RateLimit::DISABLED));
        assert_eq!("off".parse(), Ok(RateLimit::DISABLED));
        assert!("x".parse::<RateLimit>().is_err());
        assert!("5/0".parse::<RateLimit>().is_err());
        assert_eq!(RateLimit::ECS_DEFAULT.to_string(), "40/60");
    }

    #[test]
    fn bucket_allows_the_burst_then_refills_at_the_rate() {
        let limit = RateLimit {
            per_second: 10,
            burst: 3,
        };
        let t0 = Instant::now();
        let mut b = TokenBucket::new(limit, t0);
        assert!((0..3).all(|_| b.try_take(limit, t0)));
        assert!(!b.try_take(limit, t0));
        // 100 ms at 10/s is one token.
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.try_take(limit, t1));
        assert!(!b.try_take(limit, t1));
        // Long idle refills only up to the burst.
        let t2 = t1 + Duration::from_secs(60);
        assert!((0..3).all(|_| b.try_take(limit, t2)));
        assert!(!b.try_take(limit, t2));
    }

    #[test]
    fn disabled_never_refuses() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(RateLimit::DISABLED, t0);
        assert!((0..10_000).all(|_| b.try_take(RateLimit::DISABLED, t0)));
    }
}
