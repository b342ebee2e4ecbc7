//! Image cleanup: which images go and why every other one stays ([`plan`], pure), one cleanup
//! pass over a runtime ([`survey`], [`remove`]), the operator's settings made into the agent's
//! configuration ([`policy`]: ECS's ranges, kubelet's thresholds, the bytes disk pressure asks
//! for) and the loop that runs passes ([`cleaner`]: the cycle, the disk trigger, one pass at a
//! time, its log and observer).
//!
//! The rules follow the ECS agent's image manager (`agent/engine/docker_image_manager.go`), with
//! kubelet's disk thresholds added (ECS has none). An image (one Docker image id, all its names)
//! is removed only when every one of these holds, checked in this order (the first that fails
//! is the reason it stays):
//!
//! 1. none of its names is excluded (the operator's list, `ECS_EXCLUDE_UNTRACKED_IMAGE`, plus the
//!    pause images, as ECS adds its pause image to the list);
//! 2. it is tracked (berth pulled it or a task of berth's used it), or the operator opted in to
//!    removing untracked images (`ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP`);
//! 3. no container uses it, berth's or not, running or not (a stopped container that is not yet
//!    cleaned up keeps its image: Docker would refuse, and its logs and `docker start` need it);
//! 4. no task that is not yet STOPPED names it (a task still pulling or waiting for a dependency);
//! 5. it is old enough: for a tracked image, the minimum age has passed since it was last used
//!    (a task started with it or stopped using it; ECS counts from the pull, berth from the last
//!    use, which is never earlier); for an untracked one, since Docker created it (ECS's rule for
//!    non-ECS images).
//!
//! Order: tracked images least recently used first (ECS and kubelet), then untracked ones smallest
//! first (ECS). How many go: a periodic cycle removes at most N ([`Mode::Cycle`], ECS's
//! `ECS_NUM_IMAGES_DELETE_PER_CYCLE`); under disk pressure as many as it takes to free the bytes
//! asked for ([`Mode::Pressure`], kubelet's low threshold); `berth images prune` every candidate
//! ([`Mode::Prune`]).
//!
//! A removal goes through [`crate::image_use::ImageLeases::begin_removal`], so it never races a
//! task start (see that module): a leased image is skipped, a task that starts meanwhile waits.
//! Each name is removed with `docker rmi` semantics (never forced; the last name deletes the
//! image; an untagged image is removed by id), the tracked references of a removed image are
//! forgotten (so `once` pulls it again), and the bytes freed are Docker's size of the image
//! (shared layers make the space actually freed smaller or equal).

pub mod cleaner;
pub mod policy;

pub use cleaner::{DiskUsage, ImageGc, NoObserver, Observer, Pass};
pub use policy::{Config, ConfigError, Given, Request, Usage};

use crate::image_ref::normalize;
use crate::image_use::{ImageLeases, ImageRecordError, ImageRecords, TrackedImage};
use crate::runtime::{ContainerSummary, ImageSummary, Runtime, RuntimeError};
use crate::state::Millis;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// The operator's cleanup settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Milliseconds a tracked image must stay unused before it may go (ECS default 1 h).
    pub minimum_age_ms: i64,
    /// Milliseconds since creation an untracked image must have (ECS default 1 h).
    pub untracked_minimum_age_ms: i64,
    /// Images removed per periodic cycle at most (ECS default 5).
    pub per_cycle: usize,
    /// Names never removed (normalized on comparison).
    pub exclude: Vec<String>,
    /// Remove untracked images too (ECS default false).
    pub untracked: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            minimum_age_ms: 3_600_000,
            untracked_minimum_age_ms: 3_600_000,
            per_cycle: 5,
            exclude: Vec::new(),
            untracked: false,
        }
    }
}

/// How much a pass removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The periodic cycle: at most [`Settings::per_cycle`] images.
    Cycle,
    /// Disk pressure: candidates until their sizes add up to this many bytes.
    Pressure { bytes_to_free: u64 },
    /// Every candidate.
    Prune,
}

/// Why an image stays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// One of its names is on the exclusion list.
    Excluded { name: String },
    /// berth never pulled nor used it, and untracked images are not removed.
    Untracked,
    /// A container (running or not) was made from it.
    InUse { container: String, running: bool },
    /// A task not yet STOPPED names it.
    NamedByTask { task: String },
    /// Not old enough yet: it may go from `eligible_at` on.
    TooRecent { eligible_at: Millis },
    /// A candidate, over this cycle's limit of removals.
    CycleLimit { limit: usize },
    /// A candidate, but the bytes asked for are freed by the ones before it.
    EnoughFreed,
}

impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Keep::Excluded { name } => write!(f, "excluded ({name})"),
            Keep::Untracked => f.write_str(
                "untracked (berth never pulled or used it; --image-cleanup-untracked removes such images)",
            ),
            Keep::InUse { container, running } => write!(
                f,
                "used by {} container {container}",
                if *running { "running" } else { "stopped" }
            ),
            Keep::NamedByTask { task } => write!(f, "named by task {task}, not yet STOPPED"),
            Keep::TooRecent { eligible_at } => write!(
                f,
                "used too recently (a candidate from {})",
                crate::report::rfc3339(*eligible_at)
            ),
            Keep::CycleLimit { limit } => {
                write!(f, "a candidate, over this cycle's limit of {limit}")
            }
            Keep::EnoughFreed => f.write_str("a candidate, not needed to get below the threshold"),
        }
    }
}

/// What becomes of one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Removed in this pass; `order` 0 goes first.
    Remove {
        order: usize,
    },
    Keep(Keep),
}

/// One Docker image and the decision about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub image_id: String,
    /// Its names, as Docker lists them.
    pub names: Vec<String>,
    pub size: u64,
    /// Tracked: these are the store's references that point at it.
    pub references: Vec<String>,
    pub first_pulled: Option<Millis>,
    /// Last use (tracked), or Docker's creation time (untracked).
    pub last_used: Option<Millis>,
    pub tasks: Vec<String>,
    pub decision: Decision,
}

impl Verdict {
    pub fn tracked(&self) -> bool {
        !self.references.is_empty()
    }
}

/// Every image with its decision (removals first, in order), and the tracked references Docker
/// no longer has.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub verdicts: Vec<Verdict>,
    pub absent: Vec<TrackedImage>,
}

impl Plan {
    /// The images to remove, in order.
    pub fn removals(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts
            .iter()
            .filter(|v| matches!(v.decision, Decision::Remove { .. }))
    }
}

/// Decide (see the module header). `tasks` are (task id, image) for every container of every
/// task that is not yet STOPPED.
pub fn plan(
    tracked: &[TrackedImage],
    images: &[ImageSummary],
    containers: &[ContainerSummary],
    tasks: &[(String, String)],
    settings: &Settings,
    mode: Mode,
    now: Millis,
) -> Plan {
    let by_ref: BTreeMap<String, &TrackedImage> = tracked
        .iter()
        .map(|t| (normalize(&t.reference), t))
        .collect();
    let excluded: BTreeSet<String> = settings.exclude.iter().map(|e| normalize(e)).collect();
    let named: BTreeMap<String, &str> = tasks
        .iter()
        .map(|(task, image)| (normalize(image), task.as_str()))
        .collect();
    let mut seen_refs = BTreeSet::new();
    let mut verdicts = Vec::new();
    // (tracked?, sort key, id) of the candidates.
    let mut candidates: Vec<(bool, i64, u64, usize)> = Vec::new();
    for image in images {
        let names: Vec<String> = image.repo_tags.iter().map(|n| normalize(n)).collect();
        let mine: Vec<&TrackedImage> = names
            .iter()
            .filter_map(|n| by_ref.get(n).copied())
            .collect();
        for t in &mine {
            seen_refs.insert(normalize(&t.reference));
        }
        let tracked_use = mine.iter().map(|t| t.last_used).max();
        let first_pulled = mine.iter().filter_map(|t| t.first_pulled).min();
        let mut tasks_of: Vec<String> = Vec::new();
        for t in &mine {
            for task in &t.tasks {
                if !tasks_of.contains(task) {
                    tasks_of.push(task.clone());
                }
            }
        }
        let keep = if let Some(name) = names.iter().find(|n| excluded.contains(*n)) {
            Some(Keep::Excluded { name: name.clone() })
        } else if mine.is_empty() && !settings.untracked {
            Some(Keep::Untracked)
        } else if let Some(c) = containers.iter().find(|c| c.image_id == image.id) {
            Some(Keep::InUse {
                container: if c.name.is_empty() {
                    c.id.chars().take(12).collect()
                } else {
                    c.name.clone()
                },
                running: c.running,
            })
        } else if let Some(task) = names.iter().find_map(|n| named.get(n)) {
            Some(Keep::NamedByTask {
                task: (*task).to_string(),
            })
        } else {
            let (since, age) = match tracked_use {
                Some(used) => (used, settings.minimum_age_ms),
                None => (image.created, settings.untracked_minimum_age_ms),
            };
            let eligible_at = since.saturating_add(age);
            (now < eligible_at).then_some(Keep::TooRecent { eligible_at })
        };
        let index = verdicts.len();
        if keep.is_none() {
            match tracked_use {
                Some(used) => candidates.push((true, used, 0, index)),
                None => candidates.push((false, 0, image.size, index)),
            }
        }
        verdicts.push(Verdict {
            image_id: image.id.clone(),
            names: image.repo_tags.clone(),
            size: image.size,
            references: mine.iter().map(|t| t.reference.clone()).collect(),
            first_pulled,
            last_used: tracked_use.or(Some(image.created)),
            tasks: tasks_of,
            decision: Decision::Keep(keep.unwrap_or(Keep::EnoughFreed)),
        });
    }
    // Tracked first, least recently used first; then untracked, smallest first; ties by id.
    candidates.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(verdicts[a.3].image_id.cmp(&verdicts[b.3].image_id))
    });
    let mut freed = 0u64;
    for (order, &(_, _, _, index)) in candidates.iter().enumerate() {
        let take = match mode {
            Mode::Cycle => order < settings.per_cycle,
            Mode::Pressure { bytes_to_free } => freed < bytes_to_free,
            Mode::Prune => true,
        };
        let v = &mut verdicts[index];
        v.decision = if take {
            freed = freed.saturating_add(v.size);
            Decision::Remove { order }
        } else if mode == Mode::Cycle {
            Decision::Keep(Keep::CycleLimit {
                limit: settings.per_cycle,
            })
        } else {
            Decision::Keep(Keep::EnoughFreed)
        };
    }
    verdicts.sort_by_key(|v| match v.decision {
        Decision::Remove { order } => (0, order),
        Decision::Keep(_) => (1, 0),
    });
    let absent = tracked
        .iter()
        .filter(|t| !seen_refs.contains(&normalize(&t.reference)))
        .cloned()
        .collect();
    Plan { verdicts, absent }
}

/// What [`survey`] read, for [`plan`].
#[derive(Debug, Clone, Default)]
pub struct Survey {
    pub tracked: Vec<TrackedImage>,
    pub images: Vec<ImageSummary>,
    pub containers: Vec<ContainerSummary>,
}

impl Survey {
    pub fn plan(
        &self,
        tasks: &[(String, String)],
        settings: &Settings,
        mode: Mode,
        now: Millis,
    ) -> Plan {
        plan(
            &self.tracked,
            &self.images,
            &self.containers,
            tasks,
            settings,
            mode,
            now,
        )
    }
}

/// Why a pass could not look at the images: Docker's lists or the tracked images could not be
/// read (each error's own words).
#[derive(Debug, thiserror::Error)]
pub enum SurveyError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Records(#[from] ImageRecordError),
}

/// Read Docker's images and containers and the tracked images, and note in the record what
/// Docker says each tracked reference is now (id and size; a failure to note is logged).
pub async fn survey<R: Runtime>(rt: &R, records: &dyn ImageRecords) -> Result<Survey, SurveyError> {
    let images = rt.list_images().await?;
    let containers = rt.list_containers().await?;
    let tracked = records.tracked()?;
    for t in &tracked {
        let key = normalize(&t.reference);
        if let Some(i) = images
            .iter()
            .find(|i| i.repo_tags.iter().any(|n| normalize(n) == key))
            && (t.image_id.as_deref() != Some(i.id.as_str()) || t.size != Some(i.size))
            && let Err(e) = records.identify(&t.reference, &i.id, i.size)
        {
            tracing::warn!(image = %t.reference, error = %e, "cannot note the image's id and size");
        }
    }
    Ok(Survey {
        tracked,
        images,
        containers,
    })
}

/// The outcome of one removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub image_id: String,
    pub names: Vec<String>,
    /// Docker's size of the image when it was deleted; 0 when it was not.
    pub bytes: u64,
    /// None: removed. Some: why not (a task holds it, or Docker's refusal).
    pub error: Option<String>,
}

/// Remove the plan's images in order (see the module header).
pub async fn remove<R: Runtime>(
    rt: &R,
    records: &dyn ImageRecords,
    leases: &Arc<ImageLeases>,
    plan: &Plan,
) -> Vec<Removed> {
    let mut out = Vec::new();
    for v in plan.removals() {
        let mut names: Vec<String> = v.names.clone();
        if names.is_empty() {
            names.push(v.image_id.clone());
        }
        let mut outcome = Removed {
            image_id: v.image_id.clone(),
            names: v.names.clone(),
            bytes: 0,
            error: None,
        };
        let guard = match leases.begin_removal(&names) {
            Ok(g) => g,
            Err(busy) => {
                outcome.error = Some(busy.to_string());
                out.push(outcome);
                continue;
            }
        };
        let mut deleted = false;
        for name in &names {
            match rt.remove_image(name).await {
                Ok(d) => deleted |= d,
                // Gone already (another client removed it): nothing left to do for this name.
                Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => {
                    outcome.error = Some(e.to_string());
                    break;
                }
            }
        }
        if outcome.error.is_none() {
            for reference in &v.references {
                if let Err(e) = records.forget(reference) {
                    tracing::warn!(image = %reference, error = %e, "cannot forget the removed image");
                }
            }
            if deleted {
                outcome.bytes = v.size;
            }
        }
        drop(guard);
        out.push(outcome);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(name: &str, size: u64, created: Millis) -> ImageSummary {
        ImageSummary {
            id: format!("sha256:{name}"),
            repo_tags: vec![format!("{name}:1")],
            size,
            created,
            labels: BTreeMap::new(),
        }
    }

    fn tracked(name: &str, last_used: Millis) -> TrackedImage {
        TrackedImage {
            reference: format!("{name}:1"),
            last_used,
            first_pulled: Some(last_used),
            last_pulled: Some(last_used),
            ..TrackedImage::default()
        }
    }

    fn settings() -> Settings {
        Settings {
            minimum_age_ms: 100,
            untracked_minimum_age_ms: 100,
            per_cycle: 2,
            exclude: vec!["pause:1".into()],
            untracked: false,
        }
    }

    fn decision(p: &Plan, name: &str) -> Decision {
        p.verdicts
            .iter()
            .find(|v| v.image_id == format!("sha256:{name}"))
            .map(|v| v.decision.clone())
            .unwrap_or_else(|| panic!("{name} in the plan"))
    }

    #[test]
    fn each_rule_keeps_its_image_and_the_rest_go_lru_at_most_n() {
        let images = [
            img("old", 10, 0),
            img("older", 10, 0),
            img("oldest", 10, 0),
            img("recent", 10, 0),
            img("pause", 10, 0),
            img("stranger", 10, 0),
            img("stopped", 10, 0),
            img("pending", 10, 0),
        ];
        let t = [
            tracked("old", 300),
            tracked("older", 200),
            tracked("oldest", 100),
            tracked("recent", 950),
            tracked("pause", 0),
            tracked("stopped", 0),
            tracked("pending", 0),
        ];
        let containers = [ContainerSummary {
            id: "c1".into(),
            name: "left-behind".into(),
            image: "stopped:1".into(),
            image_id: "sha256:stopped".into(),
            running: false,
            labels: BTreeMap::new(),
        }];
        let tasks = [("t1".to_string(), "pending:1".to_string())];
        let p = plan(
            &t,
            &images,
            &containers,
            &tasks,
            &settings(),
            Mode::Cycle,
            1000,
        );
        assert_eq!(decision(&p, "oldest"), Decision::Remove { order: 0 });
        assert_eq!(decision(&p, "older"), Decision::Remove { order: 1 });
        assert_eq!(
            decision(&p, "old"),
            Decision::Keep(Keep::CycleLimit { limit: 2 })
        );
        assert_eq!(
            decision(&p, "recent"),
            Decision::Keep(Keep::TooRecent { eligible_at: 1050 })
        );
        assert_eq!(
            decision(&p, "pause"),
            Decision::Keep(Keep::Excluded {
                name: "pause:1".into()
            })
        );
        assert_eq!(decision(&p, "stranger"), Decision::Keep(Keep::Untracked));
        assert_eq!(
            decision(&p, "stopped"),
            Decision::Keep(Keep::InUse {
                container: "left-behind".into(),
                running: false
            })
        );
        assert_eq!(
            decision(&p, "pending"),
            Decision::Keep(Keep::NamedByTask { task: "t1".into() })
        );
        let order: Vec<&str> = p.removals().map(|v| v.image_id.as_str()).collect();
        assert_eq!(order, ["sha256:oldest", "sha256:older"]);
    }

    #[test]
    fn untracked_images_go_only_when_opted_in_after_the_tracked_ones_smallest_first() {
        let images = [
            img("big", 30, 0),
            img("small", 5, 0),
            img("young", 1, 950),
            img("mine", 100, 0),
        ];
        let t = [tracked("mine", 0)];
        let mut s = settings();
        s.untracked = true;
        let p = plan(&t, &images, &[], &[], &s, Mode::Prune, 1000);
        let order: Vec<&str> = p.removals().map(|v| v.image_id.as_str()).collect();
        assert_eq!(order, ["sha256:mine", "sha256:small", "sha256:big"]);
        assert_eq!(
            decision(&p, "young"),
            Decision::Keep(Keep::TooRecent { eligible_at: 1050 })
        );
    }

    #[test]
    fn pressure_removes_lru_until_enough_bytes_are_freed() {
        let images = [img("a", 40, 0), img("b", 40, 0), img("c", 40, 0)];
        let t = [tracked("a", 10), tracked("b", 20), tracked("c", 30)];
        let p = plan(
            &t,
            &images,
            &[],
            &[],
            &settings(),
            Mode::Pressure { bytes_to_free: 50 },
            1000,
        );
        let order: Vec<&str> = p.removals().map(|v| v.image_id.as_str()).collect();
        assert_eq!(order, ["sha256:a", "sha256:b"], "two images free 80 >= 50");
        assert_eq!(decision(&p, "c"), Decision::Keep(Keep::EnoughFreed));
    }

    #[test]
    fn references_match_in_normal_form_and_absent_ones_are_listed() {
        let mut busybox = img("busybox", 10, 0);
        busybox.repo_tags = vec!["busybox:latest".into()];
        let t = [
            TrackedImage {
                reference: "docker.io/library/busybox".into(),
                ..TrackedImage::default()
            },
            tracked("gone", 0),
        ];
        let tasks = [("t".to_string(), "busybox".to_string())];
        let p = plan(&t, &[busybox], &[], &tasks, &settings(), Mode::Prune, 1000);
        assert_eq!(
            p.verdicts[0].decision,
            Decision::Keep(Keep::NamedByTask { task: "t".into() })
        );
        assert!(p.verdicts[0].tracked());
        assert_eq!(p.absent.len(), 1);
        assert_eq!(p.absent[0].reference, "gone:1");
    }
}
