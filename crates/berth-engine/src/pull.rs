//! Image pull behaviours (ECS `ECS_IMAGE_PULL_BEHAVIOR`) and the outcome of a pull, as pure
//! functions; the record of images this agent pulled (needed by `once`) as a trait.
//!
//! | behaviour | pull needed? | when the pull fails |
//! |---|---|---|
//! | `default` | always | use the cached image if there is one; else the container cannot run |
//! | `always` | always | the task stops (never runs on a cached copy) |
//! | `once` | unless this agent pulled the image successfully before | the task stops |
//! | `prefer-cached` | only if the image is not present locally | use the cached image if there is one |
//!
//! "The container cannot run" stops the task when the container is essential (the decision core does
//! that for any essential container that stops); "the task stops" stops it whatever the container.
//! This is the outcome table of the seed `pull-dependent-containers-upfront.txt` (32 rows).

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum PullBehavior {
    #[default]
    Default,
    Always,
    Once,
    PreferCached,
}

impl PullBehavior {
    pub const ALL: [PullBehavior; 4] = [
        PullBehavior::Default,
        PullBehavior::Always,
        PullBehavior::Once,
        PullBehavior::PreferCached,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PullBehavior::Default => "default",
            PullBehavior::Always => "always",
            PullBehavior::Once => "once",
            PullBehavior::PreferCached => "prefer-cached",
        }
    }
}

impl fmt::Display for PullBehavior {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PullBehavior {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "default" => Ok(PullBehavior::Default),
            "always" => Ok(PullBehavior::Always),
            "once" => Ok(PullBehavior::Once),
            "prefer-cached" | "prefer_cached" => Ok(PullBehavior::PreferCached),
            other => Err(format!(
                "unknown image pull behavior {other:?}; use default, always, once or prefer-cached"
            )),
        }
    }
}

/// Whether a pull is needed before the container can be created.
pub fn pull_needed(behavior: PullBehavior, present_locally: bool, pulled_before: bool) -> bool {
    match behavior {
        PullBehavior::Default | PullBehavior::Always => true,
        PullBehavior::Once => !pulled_before,
        PullBehavior::PreferCached => !present_locally,
    }
}

/// What a failed pull leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Carry on with the image found in the local cache.
    UseCached,
    /// This container cannot run (the task stops if it is essential).
    ContainerStops,
    /// The whole task stops, whatever the container.
    TaskStops,
}

/// The outcome of a failed pull, given whether the image is (still) present locally.
pub fn after_failure(behavior: PullBehavior, present_locally: bool) -> AfterFailure {
    match behavior {
        PullBehavior::Always | PullBehavior::Once => AfterFailure::TaskStops,
        PullBehavior::Default | PullBehavior::PreferCached if present_locally => {
            AfterFailure::UseCached
        }
        PullBehavior::Default | PullBehavior::PreferCached => AfterFailure::ContainerStops,
    }
}

/// The images this agent pulled successfully (for `once`). Implementations persist it so it
/// survives a restart.
pub trait PullRecord: Send + Sync + 'static {
    fn pulled_before(&self, image: &str) -> bool;
    /// Record a successful pull. An error is logged by the caller; the pull itself still counts.
    fn record_pull(&self, image: &str) -> Result<(), PullRecordError>;
}

/// Why a pull was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum PullRecordError {
    /// The record of `image`'s pull could not be written; `source` is the record's error.
    #[error("recording the pull of {image}: {source}")]
    Record {
        image: String,
        #[source]
        source: crate::BoxError,
    },
}

impl PullRecordError {
    pub fn record(image: &str, source: impl Into<crate::BoxError>) -> Self {
        PullRecordError::Record {
            image: image.to_string(),
            source: source.into(),
        }
    }
}

/// A record kept in memory only (tests, and runs without a data directory).
#[derive(Debug, Default)]
pub struct MemoryPullRecord {
    images: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl PullRecord for MemoryPullRecord {
    fn pulled_before(&self, image: &str) -> bool {
        self.images
            .lock()
            .map(|s| s.contains(image))
            .unwrap_or(false)
    }
    fn record_pull(&self, image: &str) -> Result<(), PullRecordError> {
        // The set is consistent between statements: a panic elsewhere cannot corrupt it.
        self.images
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(image.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ecs_spellings() {
        assert_eq!("prefer-cached".parse(), Ok(PullBehavior::PreferCached));
        assert_eq!("ONCE".parse(), Ok(PullBehavior::Once));
        assert!("sometimes".parse::<PullBehavior>().is_err());
    }

    #[test]
    fn decision_table() {
        use PullBehavior::*;
        // (behaviour, present, pulled before) -> pull needed
        assert!(pull_needed(Default, true, true));
        assert!(pull_needed(Always, true, true));
        assert!(pull_needed(Once, true, false));
        assert!(!pull_needed(Once, false, true));
        assert!(!pull_needed(PreferCached, true, false));
        assert!(pull_needed(PreferCached, false, true));
        assert_eq!(after_failure(Default, true), AfterFailure::UseCached);
        assert_eq!(after_failure(Default, false), AfterFailure::ContainerStops);
        assert_eq!(after_failure(PreferCached, true), AfterFailure::UseCached);
        assert_eq!(
            after_failure(PreferCached, false),
            AfterFailure::ContainerStops
        );
        for present in [true, false] {
            assert_eq!(after_failure(Always, present), AfterFailure::TaskStops);
            assert_eq!(after_failure(Once, present), AfterFailure::TaskStops);
        }
    }
}
