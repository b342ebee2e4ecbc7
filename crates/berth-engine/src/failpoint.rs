//! Crash points for tests of crash safety: when the environment variable `BERTH_FAILPOINT` is
//! `POINT:CONTAINER` (e.g. `after-create:web`), the process aborts — like `kill -9`, with no cleanup
//! — when it reaches that point for that container. Points: `before-create` (the container's name
//! is already stored), `after-create`, `after-start`, `before-restart` (a restart is decided, counted and
//! stored; `docker start` not sent yet). Unset (always, in production), a check is one
//! load of a value read once.
//!
//! `BERTH_FAILPOINT_DELAY=POINT:CONTAINER:MS` instead holds that point for MS milliseconds (the
//! points that call [`delay`]: `before-restart`), so a test can act while the operation is in
//! flight.
//!
//! Hand-written rather than the `fail` crate: berth's crash tests run the released binary, which
//! must not need a special build.

use std::sync::OnceLock;

fn configured() -> Option<&'static (String, String)> {
    static POINT: OnceLock<Option<(String, String)>> = OnceLock::new();
    POINT
        .get_or_init(|| {
            let v = std::env::var("BERTH_FAILPOINT").ok()?;
            let (point, container) = v.split_once(':')?;
            Some((point.to_string(), container.to_string()))
        })
        .as_ref()
}

/// Abort the process if `BERTH_FAILPOINT` names this point and container.
pub fn hit(point: &str, container: &str) {
    if let Some((p, c)) = configured()
        && p == point
        && c == container
    {
        eprintln!("berth: failpoint {point}:{container} reached; aborting");
        std::process::abort();
    }
}

fn configured_delay() -> Option<&'static (String, String, std::time::Duration)> {
    static DELAY: OnceLock<Option<(String, String, std::time::Duration)>> = OnceLock::new();
    DELAY
        .get_or_init(|| {
            let v = std::env::var("BERTH_FAILPOINT_DELAY").ok()?;
            let mut parts = v.splitn(3, ':');
            let (point, container) = (parts.next()?, parts.next()?);
            let ms = parts.next()?.parse::<u64>().ok()?;
            Some((
                point.to_string(),
                container.to_string(),
                std::time::Duration::from_millis(ms),
            ))
        })
        .as_ref()
}

/// How long to hold this point for this container, if `BERTH_FAILPOINT_DELAY` names it.
pub fn delay(point: &str, container: &str) -> Option<std::time::Duration> {
    configured_delay()
        .filter(|(p, c, _)| p == point && c == container)
        .map(|(_, _, d)| *d)
}
