//! Containers' Docker details (`inspect`) as the metadata endpoint and the introspection API read
//! them: one cache per server, by Docker id, with one lookup, one read, one log line when Docker
//! cannot be asked, and the server's rule for how long a read stays good ([`Keep`]).
//!
//! Invariant: an entry is only ever replaced whole under the lock, which is never held across the
//! read. Limit: two requests that miss at once both read (no read is shared).

use crate::lock;
use berth_engine::runtime::{ContainerDetails, Runtime};
use berth_engine::state::{ContainerState, Health, Status, TaskState};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Past this many entries, a [`Keep::WhileUnchanged`] cache drops its stale ones before adding.
const STALE_SWEEP_AT: usize = 4096;

/// How long a read is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// While the container's known status and health stay what they were at the read, for at
    /// most `ttl` (the metadata endpoint: its answers follow the container's life).
    WhileUnchanged { ttl: Duration },
    /// For good once the container has reached RUNNING (the introspection API: what it shows does
    /// not change after the start), until [`DetailsCache::retain_live`] drops it; before RUNNING,
    /// not kept.
    OnceRunning,
}

impl Keep {
    /// Whether a read `age` old, made while the container was `then` (known status, health),
    /// still answers for it `now`.
    fn reusable(self, then: (Status, Health), now: (Status, Health), age: Duration) -> bool {
        match self {
            Keep::WhileUnchanged { ttl } => then == now && age < ttl,
            Keep::OnceRunning => true,
        }
    }

    /// Whether a read made while the container was `known` is kept at all.
    fn keeps(self, known: Status) -> bool {
        match self {
            Keep::WhileUnchanged { .. } => true,
            Keep::OnceRunning => known >= Status::Running,
        }
    }
}

struct Cached {
    at: Instant,
    known: Status,
    health: Health,
    details: Arc<ContainerDetails>,
}

/// One server's details, by Docker id.
pub(crate) struct DetailsCache {
    keep: Keep,
    /// The server's name, for the log.
    server: &'static str,
    map: Mutex<HashMap<String, Cached>>,
}

impl DetailsCache {
    pub(crate) fn new(keep: Keep, server: &'static str) -> Self {
        DetailsCache {
            keep,
            server,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Container `i`'s details: a good cached read, else read now; None when it has no Docker id
    /// or Docker cannot tell (the answer shows it without them).
    pub(crate) async fn get<R: Runtime>(
        &self,
        rt: &R,
        state: &TaskState,
        i: usize,
    ) -> Option<Arc<ContainerDetails>> {
        let c = &state.containers[i];
        let docker_id = c.docker_id.as_deref()?;
        let now = Instant::now();
        if let Some(hit) = lock(&self.map).get(docker_id)
            && self.good(hit, c, now)
        {
            return Some(hit.details.clone());
        }
        match rt.inspect_details(docker_id).await {
            Ok(d) => {
                let d = Arc::new(d);
                self.store(docker_id, c, now, &d);
                Some(d)
            }
            Err(e) => {
                tracing::debug!(container = %c.name, error = %e, "{}: no docker details", self.server);
                None
            }
        }
    }

    fn good(&self, hit: &Cached, c: &ContainerState, now: Instant) -> bool {
        self.keep.reusable(
            (hit.known, hit.health),
            (c.known, c.health),
            now.saturating_duration_since(hit.at),
        )
    }

    fn store(&self, docker_id: &str, c: &ContainerState, now: Instant, d: &Arc<ContainerDetails>) {
        if !self.keep.keeps(c.known) {
            return;
        }
        let mut cache = lock(&self.map);
        if let Keep::WhileUnchanged { ttl } = self.keep
            && cache.len() >= STALE_SWEEP_AT
        {
            cache.retain(|_, v| now.saturating_duration_since(v.at) < ttl);
        }
        cache.insert(
            docker_id.to_string(),
            Cached {
                at: now,
                known: c.known,
                health: c.health,
                details: d.clone(),
            },
        );
    }

    /// Drop the entries of containers no task in `tasks` has any more (their task was cleaned
    /// up).
    pub(crate) fn retain_live(&self, tasks: &[Arc<TaskState>]) {
        let mut kept = lock(&self.map);
        if kept.is_empty() {
            return;
        }
        let live: HashSet<&str> = tasks
            .iter()
            .flat_map(|t| t.containers.iter().filter_map(|c| c.docker_id.as_deref()))
            .collect();
        kept.retain(|id, _| live.contains(id.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_metadata_endpoint_reuses_a_read_while_the_container_stays_as_it_was() {
        let keep = Keep::WhileUnchanged { ttl: SECOND };
        let running = (Status::Running, Health::Unknown);
        assert!(keep.reusable(running, running, SECOND / 2));
        assert!(!keep.reusable(running, running, SECOND), "too old");
        assert!(!keep.reusable(running, (Status::Stopped, Health::Unknown), Duration::ZERO));
        assert!(!keep.reusable(running, (Status::Running, Health::Healthy), Duration::ZERO));
        assert!(keep.keeps(Status::Created), "every read is kept");
    }

    #[test]
    fn the_introspection_api_keeps_a_read_once_the_container_ran() {
        let keep = Keep::OnceRunning;
        assert!(!keep.keeps(Status::Created));
        assert!(keep.keeps(Status::Running));
        assert!(keep.keeps(Status::Stopped));
        let then = (Status::Running, Health::Healthy);
        let now = (Status::Stopped, Health::Unhealthy);
        assert!(keep.reusable(then, now, SECOND * 3600), "for good");
    }
}
