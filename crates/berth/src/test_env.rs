//! Environment variables that exist for berth's own tests, never for operators: hidden (not in
//! `--help`, not configuration keys), read once by `berth run` and the agent.
//!
//! `BERTH_TEST_RESTART_ATTEMPT_PERIOD_MS`: the restart attempt period, in milliseconds, for every
//! container, in place of its `restartPolicy.restartAttemptPeriod`. ECS allows no period under
//! 60 s, so an end-to-end restart test would take minutes; a flag or configuration key would let
//! an operator run a period ECS refuses, so the seam is an environment variable, like
//! `BERTH_FAILPOINT`, and the agent logs a warning when it is set.
//!
//! `BERTH_TEST_ROLE_DURATION_SECS`: how long assumed role credentials last, in seconds, in place of
//! `--aws-role-duration`, whose floor is STS's 15 minutes: a refresh test would take half an hour.

use anyhow::{Result, bail};

/// The variable that shortens every restart attempt period (tests only).
pub const RESTART_ATTEMPT_PERIOD_MS: &str = "BERTH_TEST_RESTART_ATTEMPT_PERIOD_MS";

/// The restart period override, when the variable is set: a whole number of milliseconds.
pub fn restart_period_override() -> Result<Option<u64>> {
    let Some(raw) = std::env::var_os(RESTART_ATTEMPT_PERIOD_MS) else {
        return Ok(None);
    };
    let parsed = raw.to_str().and_then(|s| s.trim().parse::<u64>().ok());
    let Some(ms) = parsed else {
        bail!(
            "{RESTART_ATTEMPT_PERIOD_MS}={}: expected a whole number of milliseconds (for tests only; unset it to use each container's restartAttemptPeriod)",
            raw.to_string_lossy()
        );
    };
    tracing::warn!(
        variable = RESTART_ATTEMPT_PERIOD_MS,
        ms,
        "test setting: every restartAttemptPeriod is replaced"
    );
    Ok(Some(ms))
}

/// The variable that shortens assumed role credentials (tests only).
pub const ROLE_DURATION_SECS: &str = "BERTH_TEST_ROLE_DURATION_SECS";

/// The role duration override, when the variable is set: a whole number of seconds above zero.
pub fn role_duration_override() -> Result<Option<std::time::Duration>> {
    let Some(raw) = std::env::var_os(ROLE_DURATION_SECS) else {
        return Ok(None);
    };
    let parsed = raw
        .to_str()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| *s > 0);
    let Some(secs) = parsed else {
        bail!(
            "{ROLE_DURATION_SECS}={}: expected a whole number of seconds above zero (for tests only; unset it to use --aws-role-duration)",
            raw.to_string_lossy()
        );
    };
    tracing::warn!(
        variable = ROLE_DURATION_SECS,
        secs,
        "test setting: assumed role credentials last this long"
    );
    Ok(Some(std::time::Duration::from_secs(secs)))
}
