//! The agent's image cleanup: its options (ECS's names accepted), the periodic cycle, the
//! disk-pressure check, one pass (survey → plan → remove) with its events and metrics, and the
//! answers of `berth images` / `berth images prune`. The rules are the engine's
//! (`berth_engine::image_gc`); the race with task starts is closed by the engine's leases
//! (`berth_engine::image_use`), which every actor of this agent takes.
//!
//! Options and defaults, from the ECS agent's `agent/config/config.go` (defaults, minimums) and
//! `parse.go`, and kubelet's image GC (`--image-gc-high-threshold` 85, `--image-gc-low-threshold`
//! 80, its 5-minute image GC period):
//!
//! | option | environment | default |
//! |---|---|---|
//! | `--disable-image-cleanup` | `BERTH_DISABLE_IMAGE_CLEANUP`, `ECS_DISABLE_IMAGE_CLEANUP` | false |
//! | `--image-cleanup-interval` | `BERTH_IMAGE_CLEANUP_INTERVAL`, `ECS_IMAGE_CLEANUP_INTERVAL` | 30m |
//! | `--image-minimum-cleanup-age` | `BERTH_IMAGE_MINIMUM_CLEANUP_AGE`, `ECS_IMAGE_MINIMUM_CLEANUP_AGE` | 1h |
//! | `--images-per-cycle` | `BERTH_NUM_IMAGES_DELETE_PER_CYCLE`, `ECS_NUM_IMAGES_DELETE_PER_CYCLE` | 5 |
//! | `--image-cleanup-exclude` | `BERTH_IMAGE_CLEANUP_EXCLUDE`, `ECS_EXCLUDE_UNTRACKED_IMAGE` | none (the pause images always) |
//! | `--image-cleanup-untracked` | `BERTH_IMAGE_CLEANUP_UNTRACKED`, `ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP` | false |
//! | `--untracked-image-minimum-cleanup-age` | `NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE` | 1h |
//! | `--image-gc-high-threshold` / `--image-gc-low-threshold` | | 85 / 80 (%) |
//! | `--image-gc-check-interval` | | 5m |
//!
//! ECS's ranges: under the ECS variable names an interval below 10 minutes and a count below 1 are
//! ignored with a warning (the default is used), as the ECS agent does. berth's own option accepts
//! an interval from 1 s (below 10 minutes it warns) and refuses a count below 1 with the option's
//! name. Thresholds are percentages of the Engine's data-root file system (`docker info` →
//! `DockerRootDir`, measured with `statvfs`); low must not exceed high; 100 turns the disk trigger
//! off (kubelet's rule). Under pressure (used above high) candidates go, least recently used first,
//! until the bytes over low are freed (kubelet's amount to free), the per-cycle count not applying.
//!
//! Triggers: the cycle runs every interval (the first one an interval after start, like ECS's
//! ticker); with the `prefer-cached` pull behaviour the cycle is off (ECS: the cached images are
//! needed), the disk trigger stays. `--disable-image-cleanup` turns both off. `berth images prune`
//! removes every candidate now, whatever the settings; `--dry-run` only lists them. One pass at a
//! time.
//!
//! Test seam: `BERTH_TEST_DISK_USAGE_FILE` names a file holding `USED CAPACITY` (bytes); when
//! set, the disk trigger reads usage from it at each check instead of `statvfs` (tests cannot fill
//! the shared Engine's disk). Nothing else reads it.

use crate::config::{Key, Resolved, duration, strings};
use crate::metrics::{Metrics, Timed};
use anyhow::{Context as _, bail};
use berth_docker::DockerRuntime;
use berth_engine::image_gc::{self, Decision, Mode, Plan, Settings};
use berth_engine::image_use::ImageLeases;
use berth_engine::report::{Report, now_ms, rfc3339};
use berth_store::Store;
use clap::FromArgMatches as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// ECS's default cleanup interval and the minimum below which its variable is ignored.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(30 * 60);
const ECS_MINIMUM_INTERVAL: Duration = Duration::from_secs(10 * 60);
const DEFAULT_AGE: Duration = Duration::from_secs(3600);
const DEFAULT_PER_CYCLE: usize = 5;

/// The image cleanup options of `berth agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct ImageGcArgs {
    /// Turn automatic image cleanup off (the cycle and the disk trigger; `berth images prune`
    /// still works; `=false` turns it back on after the file). Environment:
    /// BERTH_DISABLE_IMAGE_CLEANUP, or ECS's ECS_DISABLE_IMAGE_CLEANUP.
    #[arg(
        long,
        env = "BERTH_DISABLE_IMAGE_CLEANUP",
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        add = Key::new().env(&[ECS_DISABLE]).shown(|r| Ok(Some((!shown(r)?.enabled).into())))
    )]
    pub disable_image_cleanup: bool,

    /// Time between image cleanup cycles, e.g. `30m`. Environment: BERTH_IMAGE_CLEANUP_INTERVAL,
    /// or ECS's ECS_IMAGE_CLEANUP_INTERVAL (ignored below 10m, as ECS ignores it). Default: 30m.
    #[arg(
        long,
        value_name = "DURATION",
        env = "BERTH_IMAGE_CLEANUP_INTERVAL",
        value_parser = humantime::parse_duration,
        add = Key::new().env(&[ECS_INTERVAL]).shown(|r| Ok(Some(duration(shown(r)?.interval))))
    )]
    pub image_cleanup_interval: Option<Duration>,

    /// How long an image must stay unused (no task started with it or stopped using it) before
    /// cleanup may remove it, e.g. `1h`. Environment: BERTH_IMAGE_MINIMUM_CLEANUP_AGE, or ECS's
    /// ECS_IMAGE_MINIMUM_CLEANUP_AGE. Default: 1h.
    #[arg(
        long,
        value_name = "DURATION",
        env = "BERTH_IMAGE_MINIMUM_CLEANUP_AGE",
        value_parser = humantime::parse_duration,
        add = Key::new().env(&[ECS_AGE]).shown(|r| {
            Ok(Some(duration(ms(shown(r)?.settings.minimum_age_ms))))
        })
    )]
    pub image_minimum_cleanup_age: Option<Duration>,

    /// Images removed per cleanup cycle at most (1 or more). Environment:
    /// BERTH_NUM_IMAGES_DELETE_PER_CYCLE, or ECS's ECS_NUM_IMAGES_DELETE_PER_CYCLE. Default: 5.
    #[arg(
        long,
        value_name = "N",
        env = "BERTH_NUM_IMAGES_DELETE_PER_CYCLE",
        value_parser = clap::value_parser!(u32).range(1..),
        add = Key::new().env(&[ECS_PER_CYCLE]).shown(|r| {
            let n = shown(r)?.settings.per_cycle;
            Ok(Some(i64::try_from(n).unwrap_or(i64::MAX).into()))
        })
    )]
    pub images_per_cycle: Option<u32>,

    /// Images never removed, as `name:tag`: a comma-separated list or a JSON array (berth's pause
    /// images are always kept). Environment: BERTH_IMAGE_CLEANUP_EXCLUDE, or ECS's
    /// ECS_EXCLUDE_UNTRACKED_IMAGE.
    #[arg(
        long,
        value_name = "LIST",
        env = "BERTH_IMAGE_CLEANUP_EXCLUDE",
        value_parser = parse_list,
        add = Key::new().list().env(&[ECS_EXCLUDE]).shown(|r| {
            Ok(Some(strings(shown(r)?.settings.exclude.iter().cloned())))
        })
    )]
    pub image_cleanup_exclude: Option<ImageList>,

    /// Also remove images berth never pulled nor used (after its own, smallest first, aged by
    /// their creation; `=false` turns off what the file turned on). Environment:
    /// BERTH_IMAGE_CLEANUP_UNTRACKED, or ECS's ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP.
    #[arg(
        long,
        env = "BERTH_IMAGE_CLEANUP_UNTRACKED",
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        add = Key::new().env(&[ECS_UNTRACKED]).shown(|r| Ok(Some(shown(r)?.settings.untracked.into())))
    )]
    pub image_cleanup_untracked: bool,

    /// How old (since Docker created it) an untracked image must be before it may go.
    /// Environment: ECS's NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE. Default: 1h.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        add = Key::new().env(&[ECS_UNTRACKED_AGE]).shown(|r| {
            Ok(Some(duration(ms(shown(r)?.settings.untracked_minimum_age_ms))))
        })
    )]
    pub untracked_image_minimum_cleanup_age: Option<Duration>,

    /// Disk use (percent of the Engine's data-root file system) above which images are removed
    /// until it is below --image-gc-low-threshold (kubelet's thresholds); 100 turns this off.
    #[arg(long, value_name = "PERCENT", default_value_t = 85, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub image_gc_high_threshold: u8,

    /// The disk use image removal brings the data root back to (at most the high threshold).
    #[arg(long, value_name = "PERCENT", default_value_t = 80, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub image_gc_low_threshold: u8,

    /// How often the data root's disk use is measured, e.g. `5m` (kubelet's image GC period).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    pub image_gc_check_interval: Duration,
}

/// ECS's names for the cleanup options (the BERTH_ ones are clap's); `NON_ECS_…` is the only
/// variable of `--untracked-image-minimum-cleanup-age`.
const ECS_DISABLE: &str = "ECS_DISABLE_IMAGE_CLEANUP";
const ECS_INTERVAL: &str = "ECS_IMAGE_CLEANUP_INTERVAL";
const ECS_AGE: &str = "ECS_IMAGE_MINIMUM_CLEANUP_AGE";
const ECS_PER_CYCLE: &str = "ECS_NUM_IMAGES_DELETE_PER_CYCLE";
const ECS_EXCLUDE: &str = "ECS_EXCLUDE_UNTRACKED_IMAGE";
const ECS_UNTRACKED: &str = "ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP";
const ECS_UNTRACKED_AGE: &str = "NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE";

/// The cleanup configuration `--print-config` shows the keys of (the exclusion list as
/// configured, without the pause images), resolved once for all of them.
fn shown(r: &Resolved<'_>) -> anyhow::Result<Rc<Config>> {
    r.once(|m| ImageGcArgs::from_arg_matches(m)?.config(&[]))
}

fn ms(m: i64) -> Duration {
    Duration::from_millis(u64::try_from(m).unwrap_or(0))
}

/// A list of image names (a newtype, so clap takes the whole list as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageList(pub Vec<String>);

/// A JSON array of strings (the configuration file's lists) or a comma-separated list (ECS's).
fn parse_list(text: &str) -> Result<ImageList, String> {
    let t = text.trim();
    if t.starts_with('[') {
        return serde_json::from_str::<Vec<String>>(t)
            .map(|v| ImageList(v.into_iter().map(|s| s.trim().to_string()).collect()))
            .map_err(|e| {
                format!("expected a JSON array of image names or a comma-separated list: {e}")
            });
    }
    Ok(ImageList(
        t.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    ))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

fn env_duration(name: &str) -> anyhow::Result<Option<Duration>> {
    env(name)
        .map(|v| {
            humantime::parse_duration(v.trim())
                .with_context(|| format!("{name}={v}: expected a duration such as 30m or 1h"))
        })
        .transpose()
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

impl ImageGcArgs {
    /// The configuration: each option, else its ECS variable, else ECS's default. `pause_images`
    /// join the exclusion list.
    pub fn config(&self, pause_images: &[String]) -> anyhow::Result<Config> {
        let enabled = !(self.disable_image_cleanup || env(ECS_DISABLE).is_some_and(|v| truthy(&v)));
        let interval = match self.image_cleanup_interval {
            Some(d) if d < Duration::from_secs(1) => {
                bail!("--image-cleanup-interval {d:?}: use at least 1s (ECS's minimum is 10m)")
            }
            Some(d) => {
                if d < ECS_MINIMUM_INTERVAL {
                    tracing::warn!(interval = %humantime::format_duration(d), "--image-cleanup-interval is below ECS's 10-minute minimum; berth takes it");
                }
                d
            }
            None => match env_duration(ECS_INTERVAL)? {
                Some(d) if d < ECS_MINIMUM_INTERVAL => {
                    tracing::warn!(value = %humantime::format_duration(d), "ECS_IMAGE_CLEANUP_INTERVAL is below ECS's 10-minute minimum: ignored, as ECS ignores it; using 30m");
                    DEFAULT_INTERVAL
                }
                Some(d) => d,
                None => DEFAULT_INTERVAL,
            },
        };
        let age = match self.image_minimum_cleanup_age {
            Some(d) => d,
            None => env_duration(ECS_AGE)?.unwrap_or(DEFAULT_AGE),
        };
        let untracked_age = match self.untracked_image_minimum_cleanup_age {
            Some(d) => d,
            None => env_duration(ECS_UNTRACKED_AGE)?.unwrap_or(DEFAULT_AGE),
        };
        let per_cycle = match self.images_per_cycle {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => match env(ECS_PER_CYCLE) {
                Some(v) => match v.trim().parse::<i64>() {
                    Ok(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
                    Ok(_) => {
                        tracing::warn!(value = %v, "ECS_NUM_IMAGES_DELETE_PER_CYCLE is below 1: ignored, as ECS ignores it; using 5");
                        DEFAULT_PER_CYCLE
                    }
                    Err(_) => bail!(
                        "ECS_NUM_IMAGES_DELETE_PER_CYCLE={v}: expected a whole number, 1 or more"
                    ),
                },
                None => DEFAULT_PER_CYCLE,
            },
        };
        let mut exclude = match &self.image_cleanup_exclude {
            Some(ImageList(list)) => list.clone(),
            None => match env(ECS_EXCLUDE) {
                Some(v) => {
                    parse_list(&v)
                        .map_err(|e| anyhow::anyhow!("{ECS_EXCLUDE}={v}: {e}"))?
                        .0
                }
                None => Vec::new(),
            },
        };
        exclude.extend(pause_images.iter().cloned());
        let untracked =
            self.image_cleanup_untracked || env(ECS_UNTRACKED).is_some_and(|v| truthy(&v));
        if self.image_gc_low_threshold > self.image_gc_high_threshold {
            bail!(
                "--image-gc-low-threshold {} is above --image-gc-high-threshold {}: the low one must be at most the high one",
                self.image_gc_low_threshold,
                self.image_gc_high_threshold
            );
        }
        if self.image_gc_check_interval < Duration::from_secs(1) {
            bail!("--image-gc-check-interval: use at least 1s");
        }
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Ok(Config {
            enabled,
            interval,
            settings: Settings {
                minimum_age_ms: ms(age),
                untracked_minimum_age_ms: ms(untracked_age),
                per_cycle,
                exclude,
                untracked,
            },
            high: self.image_gc_high_threshold,
            low: self.image_gc_low_threshold,
            check_interval: self.image_gc_check_interval,
        })
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

/// The data root's disk use: `statvfs` (blocks not available to unprivileged users count as used,
/// as `df` counts them), or the test seam's file.
pub fn measure(data_root: &Path) -> anyhow::Result<Usage> {
    if let Some(file) = std::env::var_os("BERTH_TEST_DISK_USAGE_FILE") {
        let text = std::fs::read_to_string(&file).with_context(|| {
            format!("BERTH_TEST_DISK_USAGE_FILE {}", Path::new(&file).display())
        })?;
        let mut n = text.split_whitespace().map(str::parse::<u64>);
        return match (n.next(), n.next()) {
            (Some(Ok(used)), Some(Ok(capacity))) => Ok(Usage { used, capacity }),
            _ => bail!(
                "BERTH_TEST_DISK_USAGE_FILE: expected `USED CAPACITY` in bytes, found {text:?}"
            ),
        };
    }
    let st = rustix::fs::statvfs(data_root)
        .with_context(|| format!("statvfs {}", data_root.display()))?;
    let capacity = st.f_blocks.saturating_mul(st.f_frsize);
    let available = st.f_bavail.saturating_mul(st.f_frsize);
    Ok(Usage {
        used: capacity.saturating_sub(available),
        capacity,
    })
}

/// The agent's image cleanup.
pub struct ImageGc {
    pub rt: Arc<Timed<DockerRuntime>>,
    pub store: Arc<Store>,
    pub leases: Arc<ImageLeases>,
    pub config: Config,
    pub data_root: Option<PathBuf>,
    pub metrics: Arc<Metrics>,
    pub events: broadcast::Sender<String>,
    /// One pass at a time (the cycle, the disk trigger and `berth images prune`).
    pub busy: tokio::sync::Mutex<()>,
}

fn trigger_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Cycle => "cycle",
        Mode::Pressure { .. } => "disk-pressure",
        Mode::Prune => "prune",
    }
}

/// What one pass did.
pub struct Pass {
    pub plan: Plan,
    pub removed: Vec<image_gc::Removed>,
}

impl ImageGc {
    /// Decide, and unless `dry_run` remove, reporting every removal (event, metrics, log).
    pub async fn pass(
        &self,
        mode: Mode,
        tasks: Vec<(String, String)>,
        dry_run: bool,
    ) -> Result<Pass, berth_engine::RuntimeError> {
        let _one = self.busy.lock().await;
        let survey = image_gc::survey(&*self.rt, &*self.store).await?;
        let plan = survey.plan(&tasks, &self.config.settings, mode, now_ms());
        if dry_run {
            return Ok(Pass {
                plan,
                removed: Vec::new(),
            });
        }
        let removed = image_gc::remove(&*self.rt, &*self.store, &self.leases, &plan).await;
        let trigger = trigger_name(mode);
        for r in &removed {
            let image = r
                .names
                .first()
                .cloned()
                .unwrap_or_else(|| r.image_id.clone());
            match &r.error {
                None => {
                    tracing::info!(%image, image_id = %r.image_id, bytes = r.bytes, trigger, "image removed");
                    self.metrics.image_removed(trigger, r.bytes);
                    let report = Report::ImageRemoved {
                        time: rfc3339(now_ms()),
                        image,
                        image_id: r.image_id.clone(),
                        names: r.names.clone(),
                        bytes: r.bytes,
                        trigger: trigger.to_string(),
                    };
                    if let Ok(line) = serde_json::to_string(&report) {
                        let _ = self.events.send(line);
                    }
                }
                Some(e) => {
                    tracing::warn!(%image, image_id = %r.image_id, error = %e, trigger, "image not removed");
                    self.metrics.image_removal_failed();
                }
            }
        }
        Ok(Pass { plan, removed })
    }

    /// Bytes to free now, when the data root is above the high threshold.
    fn pressure(&self) -> Option<u64> {
        let root = self.data_root.as_deref()?;
        match measure(root) {
            Ok(usage) => {
                let bytes = usage.bytes_to_free(self.config.high, self.config.low);
                if let Some(b) = bytes {
                    tracing::info!(data_root = %root.display(), used = usage.used, capacity = usage.capacity, high = self.config.high, low = self.config.low, bytes_to_free = b, "disk pressure: removing images");
                }
                bytes
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot measure the Engine's data root");
                None
            }
        }
    }

    /// The cycle and the disk trigger until `stop` is cancelled. `tasks` gives the images of the
    /// tasks not yet STOPPED at each pass.
    pub async fn run(
        self: Arc<Self>,
        cycle: bool,
        tasks: impl Fn() -> Vec<(String, String)> + Send + 'static,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let start = tokio::time::Instant::now();
        let mut cycle_tick =
            tokio::time::interval_at(start + self.config.interval, self.config.interval);
        cycle_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let check = self.config.check_interval;
        let mut disk_tick = tokio::time::interval_at(start + check, check);
        disk_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let disk = self.config.high < 100 && self.data_root.is_some();
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
                tracing::warn!(error = %e, trigger = trigger_name(mode), "image cleanup could not look at Docker's images");
            }
        }
    }
}

/// `GET /v1/images`'s answer from a plan made in prune mode.
pub fn images_view(plan: &Plan) -> berth_api::control::ImagesView {
    let images = plan
        .verdicts
        .iter()
        .map(|v| {
            let (candidate, reason) = match &v.decision {
                Decision::Remove { .. } => (true, None),
                Decision::Keep(k) => (false, Some(k.to_string())),
            };
            berth_api::control::ImageView {
                image_id: v.image_id.clone(),
                names: v.names.clone(),
                size: v.size,
                tracked: v.tracked(),
                first_pulled: v.first_pulled.map(rfc3339),
                last_used: v.last_used.map(rfc3339),
                tasks: v.tasks.clone(),
                candidate,
                reason,
            }
        })
        .collect();
    berth_api::control::ImagesView {
        images,
        absent: plan.absent.iter().map(|t| t.reference.clone()).collect(),
    }
}

/// `POST /v1/images/prune`'s answer.
pub fn prune_response(pass: &Pass, dry_run: bool) -> berth_api::control::PruneResponse {
    use berth_api::control::PrunedImage;
    let images: Vec<PrunedImage> = if dry_run {
        pass.plan
            .removals()
            .map(|v| PrunedImage {
                image_id: v.image_id.clone(),
                names: v.names.clone(),
                bytes: v.size,
                error: None,
            })
            .collect()
    } else {
        pass.removed
            .iter()
            .map(|r| PrunedImage {
                image_id: r.image_id.clone(),
                names: r.names.clone(),
                bytes: r.bytes,
                error: r.error.clone(),
            })
            .collect()
    };
    let bytes_freed = if dry_run {
        0
    } else {
        images.iter().map(|i| i.bytes).sum()
    };
    berth_api::control::PruneResponse {
        dry_run,
        images,
        bytes_freed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        gc: ImageGcArgs,
    }

    fn args(argv: &[&str]) -> ImageGcArgs {
        let mut all = vec!["berth"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all).expect("parses").gc
    }

    #[test]
    fn defaults_are_ecs_and_kubelet_ones() {
        let c = args(&[]).config(&["berth/pause:1".into()]).expect("config");
        assert!(c.enabled);
        assert_eq!(c.interval, Duration::from_secs(1800));
        assert_eq!(c.settings.minimum_age_ms, 3_600_000);
        assert_eq!(c.settings.per_cycle, 5);
        assert_eq!(c.settings.exclude, ["berth/pause:1"]);
        assert!(!c.settings.untracked);
        assert_eq!((c.high, c.low), (85, 80));
        assert_eq!(c.check_interval, Duration::from_secs(300));
    }

    #[test]
    fn options_are_read_and_bad_ones_name_themselves() {
        let c = args(&[
            "--image-cleanup-interval=2s",
            "--image-minimum-cleanup-age=0s",
            "--images-per-cycle=2",
            "--image-cleanup-exclude=keep:1, also:2",
            "--image-cleanup-untracked",
        ])
        .config(&[])
        .expect("config");
        assert_eq!(c.interval, Duration::from_secs(2));
        assert_eq!(c.settings.minimum_age_ms, 0);
        assert_eq!(c.settings.per_cycle, 2);
        assert_eq!(c.settings.exclude, ["keep:1", "also:2"]);
        assert!(c.settings.untracked);
        let json = args(&[r#"--image-cleanup-exclude=["a:1","b:2"]"#])
            .config(&[])
            .expect("config");
        assert_eq!(json.settings.exclude, ["a:1", "b:2"]);
        let e = args(&[
            "--image-gc-high-threshold=70",
            "--image-gc-low-threshold=75",
        ])
        .config(&[])
        .expect_err("low above high");
        assert!(e.to_string().contains("--image-gc-low-threshold 75"), "{e}");
        let e = Cli::try_parse_from(["berth", "--images-per-cycle=0"])
            .err()
            .expect("0 refused");
        assert!(e.to_string().contains("--images-per-cycle"), "{e}");
        let e = Cli::try_parse_from(["berth", "--image-gc-high-threshold=101"])
            .err()
            .expect("101 refused");
        assert!(e.to_string().contains("--image-gc-high-threshold"), "{e}");
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

    #[test]
    fn statvfs_measures_a_real_file_system() {
        let u = measure(Path::new("/")).expect("statvfs /");
        assert!(u.capacity > 0 && u.used <= u.capacity, "{u:?}");
    }
}
