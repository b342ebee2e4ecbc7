//! Image cleanup's policy: the settings the agent runs with ([`Config`]) made from what the
//! operator asked ([`Request`]), by ECS's rules and kubelet's thresholds, and how many bytes disk
//! pressure asks to free ([`Usage::bytes_to_free`]). Pure: no clock, no environment, no file
//! system (the caller reads the options and variables and measures the disk).
//!
//! Rules, from the ECS agent's `agent/config/config.go` (defaults, minimums) and `parse.go`, and
//! kubelet's image GC (`--image-gc-high-threshold` 85, `--image-gc-low-threshold` 80):
//!
//! - the interval: berth's own option is taken from 1 s on (below ECS's 10 minutes with a
//!   warning), below that refused; ECS's `ECS_IMAGE_CLEANUP_INTERVAL` below 10 minutes is ignored
//!   with a warning (the default, 30 minutes, is used), as the ECS agent ignores it;
//! - the count per cycle: berth's option from 1 on, else refused; ECS's
//!   `ECS_NUM_IMAGES_DELETE_PER_CYCLE` below 1 is ignored with a warning (the default, 5);
//! - thresholds are percentages of the Engine's data-root file system, 0 to 100; low must not
//!   exceed high; 100 turns the disk trigger off (kubelet's rule); the disk check runs at least
//!   every second at most (an interval of 1 s or more);
//! - under pressure (use above high) the bytes over low are to be freed (kubelet's amount).

use super::Settings;
use std::time::Duration;

/// ECS's default cleanup interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30 * 60);
/// Below this ECS ignores its interval variable (and berth warns about its own option).
pub const ECS_MINIMUM_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// The shortest interval (cycle or disk check) berth takes.
pub const MINIMUM_INTERVAL: Duration = Duration::from_secs(1);
/// ECS's default minimum age, tracked and untracked.
pub const DEFAULT_AGE: Duration = Duration::from_secs(3600);
/// ECS's default number of images removed per cycle.
pub const DEFAULT_PER_CYCLE: usize = 5;

/// Where a setting came from: its range and what happens outside it depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given<T> {
    /// berth's own option (or its `BERTH_` variable): outside berth's range it is refused.
    Option(T),
    /// ECS's variable: outside ECS's range it is ignored with a warning, as ECS ignores it.
    Ecs(T),
    /// Neither: ECS's default.
    Unset,
}

/// What the operator asked for, read by the caller from options, variables and the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Automatic cleanup on (the cycle and the disk trigger).
    pub enabled: bool,
    pub interval: Given<Duration>,
    pub minimum_age: Duration,
    pub untracked_minimum_age: Duration,
    pub per_cycle: Given<i64>,
    /// Names never removed (the operator's, and the pause images).
    pub exclude: Vec<String>,
    pub untracked: bool,
    /// Percentages of the data root's file system.
    pub high: u8,
    pub low: u8,
    pub check_interval: Duration,
}

impl Default for Request {
    /// ECS's and kubelet's defaults.
    fn default() -> Self {
        Request {
            enabled: true,
            interval: Given::Unset,
            minimum_age: DEFAULT_AGE,
            untracked_minimum_age: DEFAULT_AGE,
            per_cycle: Given::Unset,
            exclude: Vec::new(),
            untracked: false,
            high: 85,
            low: 80,
            check_interval: Duration::from_secs(5 * 60),
        }
    }
}

/// The cleanup configuration the agent runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Automatic cleanup on (the cycle and the disk trigger).
    pub enabled: bool,
    pub interval: Duration,
    pub settings: Settings,
    pub high: u8,
    pub low: u8,
    pub check_interval: Duration,
}

/// A request the policy refuses, naming the option and what to give instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("--image-cleanup-interval {0:?}: use at least 1s (ECS's minimum is 10m)")]
    Interval(Duration),
    #[error("--images-per-cycle {0}: use 1 or more")]
    PerCycle(i64),
    #[error("--{option} {value}: use a percentage from 0 to 100")]
    Threshold { option: &'static str, value: u8 },
    #[error(
        "--image-gc-low-threshold {low} is above --image-gc-high-threshold {high}: the low one must be at most the high one"
    )]
    LowAboveHigh { low: u8, high: u8 },
    #[error("--image-gc-check-interval: use at least 1s")]
    CheckInterval(Duration),
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Config {
    /// The configuration for `r` (see the module header), warnings logged.
    pub fn new(r: Request) -> Result<Config, ConfigError> {
        let interval = match r.interval {
            Given::Option(d) if d < MINIMUM_INTERVAL => return Err(ConfigError::Interval(d)),
            Given::Option(d) => {
                if d < ECS_MINIMUM_INTERVAL {
                    tracing::warn!(interval = %humantime::format_duration(d), "--image-cleanup-interval is below ECS's 10-minute minimum; berth takes it");
                }
                d
            }
            Given::Ecs(d) if d < ECS_MINIMUM_INTERVAL => {
                tracing::warn!(value = %humantime::format_duration(d), "ECS_IMAGE_CLEANUP_INTERVAL is below ECS's 10-minute minimum: ignored, as ECS ignores it; using 30m");
                DEFAULT_INTERVAL
            }
            Given::Ecs(d) => d,
            Given::Unset => DEFAULT_INTERVAL,
        };
        let per_cycle = match r.per_cycle {
            Given::Option(n) if n < 1 => return Err(ConfigError::PerCycle(n)),
            Given::Option(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Given::Ecs(n) if n < 1 => {
                tracing::warn!(
                    value = n,
                    "ECS_NUM_IMAGES_DELETE_PER_CYCLE is below 1: ignored, as ECS ignores it; using 5"
                );
                DEFAULT_PER_CYCLE
            }
            Given::Ecs(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Given::Unset => DEFAULT_PER_CYCLE,
        };
        for (option, value) in [
            ("image-gc-high-threshold", r.high),
            ("image-gc-low-threshold", r.low),
        ] {
            if value > 100 {
                return Err(ConfigError::Threshold { option, value });
            }
        }
        if r.low > r.high {
            return Err(ConfigError::LowAboveHigh {
                low: r.low,
                high: r.high,
            });
        }
        if r.check_interval < MINIMUM_INTERVAL {
            return Err(ConfigError::CheckInterval(r.check_interval));
        }
        Ok(Config {
            enabled: r.enabled,
            interval,
            settings: Settings {
                minimum_age_ms: millis(r.minimum_age),
                untracked_minimum_age_ms: millis(r.untracked_minimum_age),
                per_cycle,
                exclude: r.exclude,
                untracked: r.untracked,
            },
            high: r.high,
            low: r.low,
            check_interval: r.check_interval,
        })
    }

    /// Whether the disk trigger can fire at all (high below 100).
    pub fn disk_trigger(&self) -> bool {
        self.high < 100
    }
}

/// Disk use of a file system, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub used: u64,
    pub capacity: u64,
}

impl Usage {
    /// Bytes to free to get from above `high` percent to `low` percent (kubelet's rule), or None
    /// when the use is not above `high` (or `high` is 100: the trigger is off).
    pub fn bytes_to_free(self, high: u8, low: u8) -> Option<u64> {
        if high >= 100 || self.capacity == 0 {
            return None;
        }
        let percent = u128::from(self.used) * 100 / u128::from(self.capacity);
        if percent <= u128::from(high) {
            return None;
        }
        let target = u128::from(self.capacity) * u128::from(low) / 100;
        u64::try_from(u128::from(self.used).saturating_sub(target)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ecs_and_kubelet_ones() {
        let c = Config::new(Request::default()).expect("config");
        assert!(c.enabled);
        assert_eq!(c.interval, Duration::from_secs(1800));
        assert_eq!(c.settings.minimum_age_ms, 3_600_000);
        assert_eq!(c.settings.untracked_minimum_age_ms, 3_600_000);
        assert_eq!(c.settings.per_cycle, 5);
        assert_eq!((c.high, c.low), (85, 80));
        assert_eq!(c.check_interval, Duration::from_secs(300));
    }

    #[test]
    fn berth_options_are_refused_out_of_range_and_ecs_variables_ignored() {
        let with = |interval, per_cycle| {
            Config::new(Request {
                interval,
                per_cycle,
                ..Request::default()
            })
        };
        let two = Duration::from_secs(2);
        let c = with(Given::Option(two), Given::Option(2)).expect("taken");
        assert_eq!((c.interval, c.settings.per_cycle), (two, 2));
        assert_eq!(
            with(Given::Option(Duration::from_millis(500)), Given::Unset),
            Err(ConfigError::Interval(Duration::from_millis(500)))
        );
        assert_eq!(
            with(Given::Unset, Given::Option(0)),
            Err(ConfigError::PerCycle(0))
        );
        let c = with(Given::Ecs(two), Given::Ecs(0)).expect("ignored");
        assert_eq!(
            (c.interval, c.settings.per_cycle),
            (DEFAULT_INTERVAL, DEFAULT_PER_CYCLE)
        );
        let hour = Duration::from_secs(3600);
        let c = with(Given::Ecs(hour), Given::Ecs(9)).expect("in ECS's range");
        assert_eq!((c.interval, c.settings.per_cycle), (hour, 9));
    }

    #[test]
    fn thresholds_and_the_check_interval_are_checked() {
        let e = Config::new(Request {
            high: 70,
            low: 75,
            ..Request::default()
        })
        .expect_err("low above high");
        assert!(e.to_string().contains("--image-gc-low-threshold 75"), "{e}");
        assert_eq!(
            Config::new(Request {
                high: 101,
                ..Request::default()
            }),
            Err(ConfigError::Threshold {
                option: "image-gc-high-threshold",
                value: 101
            })
        );
        assert_eq!(
            Config::new(Request {
                check_interval: Duration::ZERO,
                ..Request::default()
            }),
            Err(ConfigError::CheckInterval(Duration::ZERO))
        );
        let off = Config::new(Request {
            high: 100,
            ..Request::default()
        })
        .expect("100 is allowed");
        assert!(!off.disk_trigger());
    }

    #[test]
    fn pressure_frees_down_to_the_low_threshold() {
        let u = |used| Usage {
            used,
            capacity: 1000,
        };
        assert_eq!(
            u(850).bytes_to_free(85, 80),
            None,
            "at high is not above it"
        );
        assert_eq!(u(900).bytes_to_free(85, 80), Some(100));
        assert_eq!(u(999).bytes_to_free(100, 80), None, "100 turns it off");
        assert_eq!(
            Usage {
                used: 0,
                capacity: 0
            }
            .bytes_to_free(85, 80),
            None
        );
    }
}
