//! The agent's image cleanup wiring: its options (ECS's names accepted) made into the engine's
//! configuration, the disk measurement of the Engine's data root, the observer that turns
//! removals into events and metrics, and the answers of `berth images` / `berth images prune`.
//! The race with task starts is closed by the engine's leases (`berth_engine::image_use`), which
//! every actor of this agent takes.
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
//! The rules (ECS's ranges, the thresholds, the bytes disk pressure asks for) and the loop (the
//! cycle, the disk trigger, one pass at a time, its log) are the engine's
//! (`berth_engine::image_gc::policy` and `cleaner`); this module reads the options and ECS's
//! variables into the engine's `Request`, measures the disk for it and turns its removals into
//! the agent's events and metrics.
//!
//! Test seam: `BERTH_TEST_DISK_USAGE_FILE` names a file holding `USED CAPACITY` (bytes); when
//! set, the disk trigger reads usage from it at each check instead of `statvfs` (tests cannot fill
//! the shared Engine's disk). Nothing else reads it.

use crate::config::{Key, Resolved, duration, strings};
use crate::metrics::{Metrics, Timed};
use anyhow::{Context as _, bail};
use berth_docker::DockerRuntime;
use berth_engine::image_gc::policy::DEFAULT_AGE;
use berth_engine::image_gc::{
    Config, Decision, DiskUsage, Given, Mode, Observer, Pass, Plan, Removed, Request, Usage,
};
use berth_engine::report::{Report, rfc3339};
use berth_store::Store;
use clap::FromArgMatches as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// The agent's image cleanup: the engine's loop over the timed Docker runtime and the store.
pub type ImageGc = berth_engine::image_gc::ImageGc<Timed<DockerRuntime>, Store>;

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

impl ImageGcArgs {
    /// The configuration: each option, else its ECS variable, else ECS's default, by the
    /// engine's rules (`berth_engine::image_gc::policy`). `pause_images` join the exclusion list.
    pub fn config(&self, pause_images: &[String]) -> anyhow::Result<Config> {
        let enabled = !(self.disable_image_cleanup || env(ECS_DISABLE).is_some_and(|v| truthy(&v)));
        let interval = match self.image_cleanup_interval {
            Some(d) => Given::Option(d),
            None => env_duration(ECS_INTERVAL)?.map_or(Given::Unset, Given::Ecs),
        };
        let minimum_age = match self.image_minimum_cleanup_age {
            Some(d) => d,
            None => env_duration(ECS_AGE)?.unwrap_or(DEFAULT_AGE),
        };
        let untracked_minimum_age = match self.untracked_image_minimum_cleanup_age {
            Some(d) => d,
            None => env_duration(ECS_UNTRACKED_AGE)?.unwrap_or(DEFAULT_AGE),
        };
        let per_cycle = match self.images_per_cycle {
            Some(n) => Given::Option(i64::from(n)),
            None => match env(ECS_PER_CYCLE) {
                Some(v) => match v.trim().parse::<i64>() {
                    Ok(n) => Given::Ecs(n),
                    Err(_) => bail!(
                        "ECS_NUM_IMAGES_DELETE_PER_CYCLE={v}: expected a whole number, 1 or more"
                    ),
                },
                None => Given::Unset,
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
        Ok(Config::new(Request {
            enabled,
            interval,
            minimum_age,
            untracked_minimum_age,
            per_cycle,
            exclude,
            untracked,
            high: self.image_gc_high_threshold,
            low: self.image_gc_low_threshold,
            check_interval: self.image_gc_check_interval,
        })?)
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

/// The Engine's data root, measured by [`measure`] for the disk trigger.
pub struct DataRoot(pub PathBuf);

impl DiskUsage for DataRoot {
    fn root(&self) -> &Path {
        &self.0
    }

    fn measure(&self) -> Result<Usage, berth_engine::BoxError> {
        // anyhow's `{:#}` keeps the context and its cause on one line, as the log showed it.
        measure(&self.0).map_err(|e| format!("{e:#}").into())
    }
}

/// Removals as the agent shows them: `berth_images_removed_total{trigger}`,
/// `berth_image_bytes_freed_total`, `berth_image_removal_failures_total`, and the
/// `image-removed` event on the agent's event stream.
pub struct AgentObserver {
    pub metrics: Arc<Metrics>,
    pub events: broadcast::Sender<String>,
}

impl Observer for AgentObserver {
    fn removed(&self, mode: Mode, outcome: &Removed, report: &Report) {
        self.metrics.image_removed(mode.trigger(), outcome.bytes);
        if let Ok(line) = serde_json::to_string(report) {
            let _ = self.events.send(line);
        }
    }

    fn not_removed(&self, _mode: Mode, _outcome: &Removed) {
        self.metrics.image_removal_failed();
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
    fn statvfs_measures_a_real_file_system() {
        let u = measure(Path::new("/")).expect("statvfs /");
        assert!(u.capacity > 0 && u.used <= u.capacity, "{u:?}");
    }
}
