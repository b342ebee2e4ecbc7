//! Image cleanup's loop: the periodic cycle and the disk-pressure check on one task, and one
//! pass (survey → plan → remove) at a time, whoever asks (the cycle, the disk trigger, `berth
//! images` and `prune`), with its log and what it tells an [`Observer`] (the agent's events and
//! metrics). Generic over the runtime and the record of tracked images, so the fake runtime
//! drives it in tests; the disk is measured by a [`DiskUsage`] the caller gives (the agent's
//! `statvfs` of the Engine's data root).
//!
//! Triggers: the cycle runs every interval (the first one an interval after start, like ECS's
//! ticker) when asked for (the agent turns it off with the `prefer-cached` pull behaviour: the
//! cached images are needed); the disk is measured every check interval when a [`DiskUsage`] is
//! given and the high threshold is below 100, and a use above it runs a pressure pass. A tick
//! missed while a pass runs is delayed, not repeated. `berth images prune` removes every
//! candidate now ([`ImageGc::pass`] in [`Mode::Prune`]), whatever the settings.
//!
//! Limits: a measurement or survey that fails is logged and tried again at the next tick; a pass
//! holds its lock while it calls Docker, so a slow Engine delays the next pass (never runs two).

use super::policy::{Config, Usage};
use super::{Mode, Plan, Removed, SurveyError, remove, survey};
use crate::BoxError;
use crate::image_use::{ImageLeases, ImageRecords};
use crate::report::{Report, now_ms, rfc3339};
use crate::runtime::Runtime;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How full the file system that holds the images is.
pub trait DiskUsage: Send + Sync + 'static {
    /// What is measured (the Engine's data root), for logs.
    fn root(&self) -> &Path;
    /// Its use now.
    fn measure(&self) -> Result<Usage, BoxError>;
}

/// Told of every removal a pass tries (the agent counts them and sends the event); both methods
/// do nothing by default.
pub trait Observer: Send + Sync + 'static {
    /// An image is gone (`outcome.error` is None); `report` is its event.
    fn removed(&self, mode: Mode, outcome: &Removed, report: &Report) {
        let _ = (mode, outcome, report);
    }
    /// An image stays: a task holds it, or Docker refused (`outcome.error` says which).
    fn not_removed(&self, mode: Mode, outcome: &Removed) {
        let _ = (mode, outcome);
    }
}

/// An observer that is told nothing.
pub struct NoObserver;

impl Observer for NoObserver {}

impl Mode {
    /// The name a pass of this mode is reported under: `cycle`, `disk-pressure` or `prune`.
    pub fn trigger(self) -> &'static str {
        match self {
            Mode::Cycle => "cycle",
            Mode::Pressure { .. } => "disk-pressure",
            Mode::Prune => "prune",
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    pub plan: Plan,
    /// Empty for a dry run.
    pub removed: Vec<Removed>,
}

/// The agent's image cleanup (see the module header).
pub struct ImageGc<R, I> {
    rt: Arc<R>,
    records: Arc<I>,
    leases: Arc<ImageLeases>,
    config: Config,
    disk: Option<Arc<dyn DiskUsage>>,
    observer: Arc<dyn Observer>,
    /// One pass at a time.
    busy: tokio::sync::Mutex<()>,
}

impl<R: Runtime, I: ImageRecords> ImageGc<R, I> {
    /// Cleanup over `rt` and `records`, removing only through `leases` (the ones every actor of
    /// the agent takes); no disk trigger and no observer until given.
    pub fn new(rt: Arc<R>, records: Arc<I>, leases: Arc<ImageLeases>, config: Config) -> Self {
        ImageGc {
            rt,
            records,
            leases,
            config,
            disk: None,
            observer: Arc::new(NoObserver),
            busy: tokio::sync::Mutex::new(()),
        }
    }

    /// Measure the disk with `disk` (the disk trigger's input).
    pub fn with_disk(mut self, disk: Arc<dyn DiskUsage>) -> Self {
        self.disk = Some(disk);
        self
    }

    /// Tell `observer` of every removal.
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The leases removals go through.
    pub fn leases(&self) -> &Arc<ImageLeases> {
        &self.leases
    }

    /// The file system the disk trigger measures, when there is one.
    pub fn disk_root(&self) -> Option<&Path> {
        self.disk.as_deref().map(DiskUsage::root)
    }

    /// Decide, and unless `dry_run` remove, reporting every removal (log, observer). `tasks`
    /// are (task id, image) of every container of every task not yet STOPPED. Waits for a pass
    /// in progress.
    pub async fn pass(
        &self,
        mode: Mode,
        tasks: Vec<(String, String)>,
        dry_run: bool,
    ) -> Result<Pass, SurveyError> {
        let _one = self.busy.lock().await;
        let survey = survey(&*self.rt, &*self.records).await?;
        let plan = survey.plan(&tasks, &self.config.settings, mode, now_ms());
        if dry_run {
            return Ok(Pass {
                plan,
                removed: Vec::new(),
            });
        }
        let removed = remove(&*self.rt, &*self.records, &self.leases, &plan).await;
        let trigger = mode.trigger();
        for r in &removed {
            let image = r
                .names
                .first()
                .cloned()
                .unwrap_or_else(|| r.image_id.clone());
            match &r.error {
                None => {
                    tracing::info!(%image, image_id = %r.image_id, bytes = r.bytes, trigger, "image removed");
                    let report = Report::ImageRemoved {
                        time: rfc3339(now_ms()),
                        image,
                        image_id: r.image_id.clone(),
                        names: r.names.clone(),
                        bytes: r.bytes,
                        trigger: trigger.to_string(),
                    };
                    self.observer.removed(mode, r, &report);
                }
                Some(e) => {
                    tracing::warn!(%image, image_id = %r.image_id, error = %e, trigger, "image not removed");
                    self.observer.not_removed(mode, r);
                }
            }
        }
        Ok(Pass { plan, removed })
    }

    /// Bytes to free now, when the disk is above the high threshold.
    fn pressure(&self) -> Option<u64> {
        let disk = self.disk.as_deref()?;
        let root = disk.root();
        match disk.measure() {
            Ok(usage) => {
                let bytes = usage.bytes_to_free(self.config.high, self.config.low);
                if let Some(b) = bytes {
                    tracing::info!(data_root = %root.display(), used = usage.used, capacity = usage.capacity, high = self.config.high, low = self.config.low, bytes_to_free = b, "disk pressure: removing images");
                }
                bytes
            }
            Err(e) => {
                tracing::warn!(data_root = %root.display(), error = %e, "cannot measure the Engine's data root");
                None
            }
        }
    }

    /// The cycle (when `cycle`) and the disk trigger until `stop` is cancelled. `tasks` gives
    /// the images of the tasks not yet STOPPED at each pass.
    pub async fn run(
        self: Arc<Self>,
        cycle: bool,
        tasks: impl Fn() -> Vec<(String, String)> + Send + 'static,
        stop: CancellationToken,
    ) {
        let start = tokio::time::Instant::now();
        let mut cycle_tick =
            tokio::time::interval_at(start + self.config.interval, self.config.interval);
        cycle_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let check = self.config.check_interval;
        let mut disk_tick = tokio::time::interval_at(start + check, check);
        disk_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let disk = self.config.disk_trigger() && self.disk.is_some();
        loop {
            let mode = tokio::select! {
                () = stop.cancelled() => return,
                _ = cycle_tick.tick(), if cycle => Mode::Cycle,
                _ = disk_tick.tick(), if disk => match self.pressure() {
                    Some(bytes_to_free) => Mode::Pressure { bytes_to_free },
                    None => continue,
                },
            };
            if let Err(e) = self.pass(mode, tasks(), false).await {
                tracing::warn!(error = %e, trigger = mode.trigger(), "image cleanup could not look at Docker's images");
            }
        }
    }
}
