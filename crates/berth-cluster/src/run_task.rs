//! ECS's RunTask and StopTask rules for tasks started outside a service, as pure values: how
//! many tasks one call may start ([`MAX_COUNT`], [`check_count`]) and what a user's stop writes
//! ([`USER_STOP_REASON`] with [`StopCode::UserInitiated`]), so the CLI that writes them and the
//! controller's tests agree on one wording.

use crate::record::StopCode;

/// ECS RunTask's `count` limit: the most tasks one call starts.
pub const MAX_COUNT: u32 = 10;

/// The stop reason a task stopped by its user carries (ECS's StopTask default).
pub const USER_STOP_REASON: &str = "Task stopped by user";

/// The stop code that goes with [`USER_STOP_REASON`].
pub const USER_STOP_CODE: StopCode = StopCode::UserInitiated;

/// A RunTask `count` out of ECS's range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--count: {count} is out of range; start 1 to {max} tasks at a time", max = MAX_COUNT)]
pub struct CountError {
    /// The count asked for.
    pub count: u32,
}

/// Whether one call may start `count` tasks (1 to [`MAX_COUNT`]).
pub fn check_count(count: u32) -> Result<(), CountError> {
    if (1..=MAX_COUNT).contains(&count) {
        Ok(())
    } else {
        Err(CountError { count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_one_to_ten_as_ecs_allows() {
        assert_eq!(check_count(0), Err(CountError { count: 0 }));
        assert!(check_count(1).is_ok());
        assert!(check_count(MAX_COUNT).is_ok());
        let e = check_count(MAX_COUNT + 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--count: 11 is out of range; start 1 to 10 tasks at a time"
        );
    }
}
