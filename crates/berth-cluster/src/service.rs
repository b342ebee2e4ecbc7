//! ECS's service rules (CreateService, UpdateService, DeleteService, the REPLICA scheduler's
//! deployment configuration), as pure functions: a new service's defaults ([`new_service`]), the
//! largest desired count ([`MAX_DESIRED`]), the default percentages and their ranges
//! ([`check_desired`], [`check_min_healthy`], [`check_max`], [`check_percents`]), deployment ids
//! ([`new_deployment`]), the checks a service's tasks go through ([`check_tasks`]), what an update
//! changes ([`Change`]: which fields, and whether that is a new deployment, [`redeploys`]; a
//! service being removed is not updated) and what a removal writes ([`remove`]: refused while the
//! service is scaled above 0, unless forced).
//!
//! Two users: `berth cluster service` checks what it writes with them, and the controller
//! ([`crate::reconcile`]) refuses to act on an ACTIVE service record that breaks
//! [`check_record`] (another writer may put anything in etcd): the record is a problem of the
//! pass, its tasks are left as they are.
//!
//! Invariant the controller relies on: an ACTIVE service's desired count is at most
//! [`MAX_DESIRED`], its `minimumHealthyPercent` at most 100, its `maximumPercent` at least 100
//! and above the minimum, so a rolling update can always either stop an old task or start a new
//! one. The messages name the command-line options, since that is where a value comes from.

use crate::record::{Constraint, ServiceRecord, ServiceStatus, Strategy};
use berth_model::TaskDefinition;

/// ECS's quota of tasks per service: the largest desired count.
pub const MAX_DESIRED: u32 = 5000;
/// ECS's default `minimumHealthyPercent` (REPLICA services).
pub const DEFAULT_MIN_HEALTHY: u32 = 100;
/// ECS's default `maximumPercent`.
pub const DEFAULT_MAX: u32 = 200;

/// A service value that breaks ECS's rules, or an update that changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    #[error(
        "--desired-count: {count} is above {max}, ECS's limit of tasks per service; give 0 to {max}",
        max = MAX_DESIRED
    )]
    DesiredAbove { count: u32 },
    #[error(
        "--minimum-healthy-percent: {percent} is above 100; give 0 to 100 (the share of the desired count that stays healthy during a rolling update; default {default})",
        default = DEFAULT_MIN_HEALTHY
    )]
    MinHealthyAbove { percent: u32 },
    #[error(
        "--maximum-percent: {percent} is below 100; give 100 or more (the most tasks that may run during a rolling update, as a share of the desired count; default {default})",
        default = DEFAULT_MAX
    )]
    MaxBelow { percent: u32 },
    #[error(
        "--maximum-percent: {max} is not above --minimum-healthy-percent {min_healthy}: a rolling update could never make progress (it could neither stop an old task nor start a new one); raise --maximum-percent (e.g. {default}) or lower --minimum-healthy-percent",
        default = DEFAULT_MAX
    )]
    NoProgress { min_healthy: u32, max: u32 },
    #[error(
        "nothing to change: give --task-definition, --desired-count, --minimum-healthy-percent, --maximum-percent, --placement-constraints, --placement-strategy or --force-new-deployment"
    )]
    NothingToChange,
    /// A check every task of the service would fail (its constraints, strategy or what it
    /// reserves), in that check's words (which name the JSON path).
    #[error("{0}")]
    Tasks(String),
    /// An update of a service being removed (DRAINING).
    #[error(
        "service {name:?} is being removed (DRAINING) and cannot be updated; create it again once `berth cluster service ls` no longer lists it"
    )]
    BeingRemoved { name: String },
    /// A removal of a service still scaled above 0, not forced (ECS DeleteService's refusal,
    /// its first sentence in ECS's words).
    #[error(
        "service {name:?}: The service cannot be stopped while it is scaled above 0. Its desired count is {desired}: scale it to 0 first (`berth cluster service update {name} --desired-count 0`), or remove it with --force (its tasks are stopped)"
    )]
    ScaledAboveZero { name: String, desired: u32 },
}

/// `--desired-count`: 0 to [`MAX_DESIRED`].
pub fn check_desired(count: u32) -> Result<(), ServiceError> {
    if count > MAX_DESIRED {
        return Err(ServiceError::DesiredAbove { count });
    }
    Ok(())
}

/// `--minimum-healthy-percent` on its own: 0 to 100.
pub fn check_min_healthy(percent: u32) -> Result<(), ServiceError> {
    if percent > 100 {
        return Err(ServiceError::MinHealthyAbove { percent });
    }
    Ok(())
}

/// `--maximum-percent` on its own: at least 100.
pub fn check_max(percent: u32) -> Result<(), ServiceError> {
    if percent < 100 {
        return Err(ServiceError::MaxBelow { percent });
    }
    Ok(())
}

/// The two percentages together: the maximum above the minimum, or a rolling update could
/// neither stop an old task (the minimum forbids it) nor start a new one (the maximum does).
pub fn check_percents(min_healthy: u32, max: u32) -> Result<(), ServiceError> {
    check_min_healthy(min_healthy)?;
    check_max(max)?;
    if max <= min_healthy {
        return Err(ServiceError::NoProgress { min_healthy, max });
    }
    Ok(())
}

/// The rules the controller relies on, over a whole record: the desired count and the two
/// percentages.
pub fn check_record(svc: &ServiceRecord) -> Result<(), ServiceError> {
    check_desired(svc.desired_count)?;
    check_percents(svc.minimum_healthy_percent, svc.maximum_percent)
}

/// Runs the checks a service's tasks will go through (constraints, strategies, what a task
/// reserves), so a bad value is refused before it is written rather than by every controller
/// pass.
pub fn check_tasks(svc: &ServiceRecord) -> Result<(), ServiceError> {
    svc.task("check".to_owned(), svc.updated_at_ms)
        .map(drop)
        .map_err(ServiceError::Tasks)
}

/// A new ACTIVE service of `desired_count` tasks of `definition` at `now` (ECS CreateService's
/// defaults: no placement constraint, the default strategy, [`DEFAULT_MIN_HEALTHY`] and
/// [`DEFAULT_MAX`], a new deployment, nothing launched yet). Checked by [`check_record`] and
/// [`check_tasks`] once its caller has set what it was given.
pub fn new_service(
    name: String,
    definition: TaskDefinition,
    desired_count: u32,
    now: u64,
) -> ServiceRecord {
    ServiceRecord {
        name,
        definition,
        desired_count,
        placement_constraints: Vec::new(),
        placement_strategy: Vec::new(),
        minimum_healthy_percent: DEFAULT_MIN_HEALTHY,
        maximum_percent: DEFAULT_MAX,
        created_at_ms: now,
        status: ServiceStatus::Active,
        deployment: new_deployment(),
        launched: 0,
        updated_at_ms: now,
    }
}

/// What removing `svc` at `now` writes (ECS DeleteService): DRAINING with desired count 0, the
/// controller then stops its tasks and deletes it. None: it is being removed already. Refused
/// while it is scaled above 0, unless `force` (its tasks are stopped).
pub fn remove(
    svc: &ServiceRecord,
    force: bool,
    now: u64,
) -> Result<Option<ServiceRecord>, ServiceError> {
    if svc.status == ServiceStatus::Draining {
        return Ok(None);
    }
    if svc.desired_count > 0 && !force {
        return Err(ServiceError::ScaledAboveZero {
            name: svc.name.clone(),
            desired: svc.desired_count,
        });
    }
    let mut new = svc.clone();
    new.status = ServiceStatus::Draining;
    new.desired_count = 0;
    new.updated_at_ms = now;
    Ok(Some(new))
}

/// A new deployment id, ECS's form: `ecs-svc/` and 19 random digits.
pub fn new_deployment() -> String {
    format!(
        "ecs-svc/{:019}",
        rand::random_range(0..10_000_000_000_000_000_000u64)
    )
}

/// Whether `new` (an update of `old`) is a new deployment: a new definition or placement, or
/// `force`. A count or percentage change alone keeps the deployment.
pub fn redeploys(old: &ServiceRecord, new: &ServiceRecord, force: bool) -> bool {
    force
        || new.definition != old.definition
        || new.placement_constraints != old.placement_constraints
        || new.placement_strategy != old.placement_strategy
}

/// What an update changes (ECS UpdateService); None: unchanged.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Change {
    pub definition: Option<TaskDefinition>,
    pub desired_count: Option<u32>,
    pub minimum_healthy_percent: Option<u32>,
    pub maximum_percent: Option<u32>,
    pub placement_constraints: Option<Vec<Constraint>>,
    pub placement_strategy: Option<Vec<Strategy>>,
    pub force_new_deployment: bool,
}

impl Change {
    /// The checks that need no record: something to change, each given value in range.
    pub fn check(&self) -> Result<(), ServiceError> {
        let nothing = self.definition.is_none()
            && self.desired_count.is_none()
            && self.minimum_healthy_percent.is_none()
            && self.maximum_percent.is_none()
            && self.placement_constraints.is_none()
            && self.placement_strategy.is_none()
            && !self.force_new_deployment;
        if nothing {
            return Err(ServiceError::NothingToChange);
        }
        if let Some(n) = self.desired_count {
            check_desired(n)?;
        }
        if let Some(p) = self.minimum_healthy_percent {
            check_min_healthy(p)?;
        }
        if let Some(p) = self.maximum_percent {
            check_max(p)?;
        }
        Ok(())
    }

    /// The service as changed at `now`, and whether that is a new deployment ([`redeploys`]; it
    /// gets a [`new_deployment`] id). The error: the service is being removed, the combined
    /// percentages, or a check the service's tasks would fail.
    pub fn apply(
        &self,
        old: &ServiceRecord,
        now: u64,
    ) -> Result<(ServiceRecord, bool), ServiceError> {
        if old.status == ServiceStatus::Draining {
            return Err(ServiceError::BeingRemoved {
                name: old.name.clone(),
            });
        }
        let mut new = old.clone();
        if let Some(d) = &self.definition {
            new.definition = d.clone();
        }
        if let Some(n) = self.desired_count {
            new.desired_count = n;
        }
        if let Some(p) = self.minimum_healthy_percent {
            new.minimum_healthy_percent = p;
        }
        if let Some(p) = self.maximum_percent {
            new.maximum_percent = p;
        }
        if let Some(c) = &self.placement_constraints {
            new.placement_constraints = c.clone();
        }
        if let Some(s) = &self.placement_strategy {
            new.placement_strategy = s.clone();
        }
        check_percents(new.minimum_healthy_percent, new.maximum_percent)?;
        let redeploy = redeploys(old, &new, self.force_new_deployment);
        if redeploy {
            new.deployment = new_deployment();
        }
        new.updated_at_ms = now;
        check_tasks(&new)?;
        Ok((new, redeploy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecs_ranges_and_defaults() {
        assert!(check_desired(0).is_ok() && check_desired(MAX_DESIRED).is_ok());
        let e = check_desired(5001).unwrap_err().to_string();
        assert!(e.starts_with("--desired-count: 5001 is above 5000"), "{e}");
        assert!(check_percents(DEFAULT_MIN_HEALTHY, DEFAULT_MAX).is_ok());
        assert!(check_percents(0, 100).is_ok());
        let e = check_percents(101, 200).unwrap_err().to_string();
        assert!(
            e.starts_with("--minimum-healthy-percent: 101 is above 100"),
            "{e}"
        );
        let e = check_percents(50, 99).unwrap_err().to_string();
        assert!(e.starts_with("--maximum-percent: 99 is below 100"), "{e}");
        let e = check_percents(100, 100).unwrap_err().to_string();
        assert!(
            e.starts_with("--maximum-percent: 100 is not above --minimum-healthy-percent 100")
                && e.contains("never make progress"),
            "{e}"
        );
    }

    #[test]
    fn the_messages_are_whole_sentences_with_the_defaults() {
        assert_eq!(
            ServiceError::DesiredAbove { count: 5001 }.to_string(),
            "--desired-count: 5001 is above 5000, ECS's limit of tasks per service; give 0 to 5000"
        );
        assert_eq!(
            ServiceError::MinHealthyAbove { percent: 101 }.to_string(),
            "--minimum-healthy-percent: 101 is above 100; give 0 to 100 (the share of the desired count that stays healthy during a rolling update; default 100)"
        );
        assert_eq!(
            ServiceError::MaxBelow { percent: 99 }.to_string(),
            "--maximum-percent: 99 is below 100; give 100 or more (the most tasks that may run during a rolling update, as a share of the desired count; default 200)"
        );
        assert_eq!(
            ServiceError::NoProgress {
                min_healthy: 100,
                max: 100
            }
            .to_string(),
            "--maximum-percent: 100 is not above --minimum-healthy-percent 100: a rolling update could never make progress (it could neither stop an old task nor start a new one); raise --maximum-percent (e.g. 200) or lower --minimum-healthy-percent"
        );
    }

    #[test]
    fn deployment_ids_are_ecs_svc_and_19_digits() {
        let a = new_deployment();
        let digits = a.strip_prefix("ecs-svc/").unwrap_or_else(|| panic!("{a}"));
        assert_eq!(digits.len(), 19, "{a}");
        assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{a}");
        assert_ne!(a, new_deployment());
    }

    fn service() -> ServiceRecord {
        let definition = crate::testing::definition();
        ServiceRecord {
            name: "web".into(),
            definition,
            desired_count: 2,
            placement_constraints: vec![],
            placement_strategy: vec![],
            minimum_healthy_percent: 100,
            maximum_percent: 200,
            created_at_ms: 1,
            status: ServiceStatus::Active,
            deployment: "ecs-svc/1".into(),
            launched: 7,
            updated_at_ms: 1,
        }
    }

    #[test]
    fn a_record_is_checked_as_the_controller_relies_on() {
        assert_eq!(check_record(&service()), Ok(()));
        for (desired, min, max, wanted) in [
            (5001, 100, 200, ServiceError::DesiredAbove { count: 5001 }),
            (1, 101, 200, ServiceError::MinHealthyAbove { percent: 101 }),
            (1, 0, 99, ServiceError::MaxBelow { percent: 99 }),
            (
                1,
                100,
                100,
                ServiceError::NoProgress {
                    min_healthy: 100,
                    max: 100,
                },
            ),
        ] {
            let svc = ServiceRecord {
                desired_count: desired,
                minimum_healthy_percent: min,
                maximum_percent: max,
                ..service()
            };
            assert_eq!(check_record(&svc), Err(wanted));
        }
    }

    #[test]
    fn only_definition_placement_or_force_make_a_new_deployment() {
        let old = service();
        let count = Change {
            desired_count: Some(5),
            maximum_percent: Some(150),
            ..Change::default()
        };
        let (new, redeploy) = count.apply(&old, 9).unwrap();
        assert!(!redeploy);
        assert_eq!(
            (
                new.deployment.as_str(),
                new.desired_count,
                new.maximum_percent
            ),
            ("ecs-svc/1", 5, 150)
        );
        assert_eq!((new.launched, new.updated_at_ms), (7, 9));

        let mut def = old.definition.clone();
        def.revision = 2;
        for change in [
            Change {
                definition: Some(def),
                ..Change::default()
            },
            Change {
                placement_constraints: Some(vec![Constraint::DistinctInstance]),
                ..Change::default()
            },
            Change {
                placement_strategy: Some(vec![Strategy::Random]),
                ..Change::default()
            },
            Change {
                force_new_deployment: true,
                ..Change::default()
            },
        ] {
            let (new, redeploy) = change.apply(&old, 9).unwrap();
            assert!(redeploy, "{change:?}");
            assert_ne!(new.deployment, old.deployment);
        }
        // The same definition again is no change.
        let same = Change {
            definition: Some(old.definition.clone()),
            ..Change::default()
        };
        assert!(!same.apply(&old, 9).unwrap().1);
    }

    #[test]
    fn a_new_service_has_ecs_defaults() {
        let old = service();
        let svc = new_service("web".into(), old.definition.clone(), 3, 42);
        assert_eq!(
            (
                svc.minimum_healthy_percent,
                svc.maximum_percent,
                svc.status,
                svc.launched,
                svc.created_at_ms,
                svc.updated_at_ms
            ),
            (100, 200, ServiceStatus::Active, 0, 42, 42)
        );
        assert!(svc.placement_constraints.is_empty() && svc.placement_strategy.is_empty());
        assert!(svc.deployment.starts_with("ecs-svc/"), "{}", svc.deployment);
        assert_eq!(check_record(&svc), Ok(()));
        assert_eq!(check_tasks(&svc), Ok(()));
    }

    #[test]
    fn a_removal_drains_and_is_refused_while_scaled_above_zero() {
        let old = service();
        let e = remove(&old, false, 9).unwrap_err().to_string();
        assert!(
            e.contains("The service cannot be stopped while it is scaled above 0.")
                && e.contains("--desired-count 0")
                && e.contains("--force"),
            "{e}"
        );
        let forced = remove(&old, true, 9).unwrap().expect("written");
        assert_eq!(
            (forced.status, forced.desired_count, forced.updated_at_ms),
            (ServiceStatus::Draining, 0, 9)
        );
        let scaled_in = ServiceRecord {
            desired_count: 0,
            ..old.clone()
        };
        assert_eq!(
            remove(&scaled_in, false, 9).unwrap().map(|s| s.status),
            Some(ServiceStatus::Draining)
        );
        // Already being removed: nothing to write, and no update either.
        assert_eq!(remove(&forced, false, 10), Ok(None));
        let e = Change {
            desired_count: Some(1),
            ..Change::default()
        }
        .apply(&forced, 10)
        .unwrap_err()
        .to_string();
        assert!(e.contains("is being removed (DRAINING)"), "{e}");
    }

    #[test]
    fn an_update_is_checked_as_a_whole() {
        let old = service();
        let e = Change::default().check().unwrap_err().to_string();
        assert!(e.starts_with("nothing to change"), "{e}");
        let e = Change {
            maximum_percent: Some(100),
            ..Change::default()
        }
        .apply(&old, 9)
        .unwrap_err()
        .to_string();
        assert!(e.contains("never make progress"), "{e}");
        let e = Change {
            placement_strategy: Some(vec![Strategy::Binpack {
                field: "disk".into(),
            }]),
            ..Change::default()
        }
        .apply(&old, 9)
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("placementStrategy[0].field: binpack"), "{e}");
    }
}
