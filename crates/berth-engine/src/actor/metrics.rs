//! [`EngineMetrics`]: the counters the engine keeps for `/metrics`, shared by every task of an
//! agent, and the tasks held because their state cannot be saved (the agent's `degraded`
//! health). Counters only grow; a task leaves the degraded list at its next successful save.

/// Counters the engine keeps for `/metrics` (shared by every task of an agent), and which tasks
/// are held because their state cannot be saved.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    /// Docker event streams re-subscribed after breaking.
    pub event_stream_reconnects: std::sync::atomic::AtomicU64,
    /// Docker calls that failed (pull, create, start, stop, inspect during adoption).
    pub docker_errors: std::sync::atomic::AtomicU64,
    /// Saves of a task state that failed (each retry counts).
    pub save_failures: std::sync::atomic::AtomicU64,
    /// Tasks whose last save failed, with that error: each is held (no effect performed) until a
    /// save succeeds.
    degraded: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl EngineMetrics {
    pub(super) fn count(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn degraded_map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, String>> {
        // The map is consistent between statements; a panic elsewhere cannot corrupt it.
        self.degraded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tasks held because their state cannot be saved, each with the save's last error, in id
    /// order. Empty when every save succeeds.
    pub fn degraded(&self) -> Vec<(String, String)> {
        self.degraded_map()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub(super) fn set_degraded(&self, task: &str, error: &str) {
        self.degraded_map()
            .insert(task.to_string(), error.to_string());
    }

    pub(super) fn clear_degraded(&self, task: &str) {
        self.degraded_map().remove(task);
    }
}
