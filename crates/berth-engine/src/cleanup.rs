//! Task cleanup: the one way berth removes what a task left behind, used by `berth run`, the agent
//! and `berth gc`.
//!
//! Owns the order of the steps and the report of what they did:
//!
//! 1. the task's containers (by Docker id, or by the name decided before `create` when its answer
//!    was lost), forcibly, with their anonymous volumes;
//! 2. the task-scoped Docker volumes;
//! 3. the task directory `DATA_DIR/tasks/<task-id>/`, through `berth_fs::remove_tree` (unmount
//!    first; if any unmount fails, delete nothing; never delete through a mount or a symlink).
//!
//! There is no task-network step: no network mode berth supports today (bridge, host, none) gives a
//! task a network of its own; the step that removes one belongs between 2 and 3.
//!
//! Invariants: nothing is ever forced — every refusal is reported with its reason and the caller
//! decides when to try again ([`crate::retry::RetryPolicy`]'s default, the agent's schedule); a step's refusal does not stop
//! the next steps (each is safe alone); a task that has not finished (STOPPED with nothing in
//! flight) is refused as a whole, with nothing removed, so an actor that returned early (cancelled)
//! is never cleaned up under running containers. [`remove_task_directory`] is step 3 alone, for
//! directories whose task state is gone (`berth gc`).
//!
//! Limits: this module makes no system call itself (berth-fs does) and never talks to Docker other
//! than through the [`Runtime`] trait.

use crate::runtime::{Runtime, RuntimeError};
use crate::spec;
use crate::state::{Status, TaskState};
use std::fmt;
use std::path::{Path, PathBuf};

/// Something cleanup did not remove, and why.
#[derive(Debug)]
pub enum Refusal {
    /// The task has not finished; nothing was removed.
    NotFinished { task: String, known: Status },
    /// Docker refused to remove a container.
    Container { name: String, error: RuntimeError },
    /// Docker refused to remove a task-scoped volume.
    Volume { name: String, error: RuntimeError },
    /// An entry of the task directory was kept for its own reason (a mount that could not be
    /// unmounted, a mount point met during the walk, a failed system call).
    Kept(berth_fs::Kept),
    /// The task directory was not touched at all (outside the data directory, reached through a
    /// symlink, mountinfo unreadable).
    Directory(berth_fs::FsError),
}

impl fmt::Display for Refusal {
    /// One line, as people read it after `cleanup: refused: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotFinished { task, known } => write!(
                f,
                "task {task} has not finished (known status {known}); nothing removed"
            ),
            Refusal::Container { name, error } => write!(f, "container {name}: {error}"),
            Refusal::Volume { name, error } => write!(f, "volume {name}: {error}"),
            Refusal::Kept(kept) => kept.fmt(f),
            Refusal::Directory(error) => error.fmt(f),
        }
    }
}

/// What one cleanup did: exactly what was removed, and every refusal with its reason.
#[derive(Debug, Default)]
pub struct CleanupReport {
    /// Docker names of the containers removed (or already gone).
    pub removed_containers: Vec<String>,
    /// Task-scoped Docker volumes removed (or already gone).
    pub removed_volumes: Vec<String>,
    /// The task directory's removal — what was unmounted, deleted and kept — when it was attempted
    /// and got past berth-fs's path checks.
    pub directory: Option<berth_fs::TreeRemoval>,
    /// Everything not removed, in step order.
    pub refused: Vec<Refusal>,
}

impl CleanupReport {
    /// Nothing was refused: the task is gone (the caller may forget it).
    pub fn is_complete(&self) -> bool {
        self.refused.is_empty()
    }
}

/// Remove a finished task: its containers, its task-scoped volumes, then its directory under
/// `data_dir` (see the module docs for the order and the rules).
pub async fn cleanup_task<R: Runtime>(rt: &R, state: &TaskState, data_dir: &Path) -> CleanupReport {
    if !state.is_finished() {
        return CleanupReport {
            refused: vec![Refusal::NotFinished {
                task: state.id.clone(),
                known: state.known(),
            }],
            ..CleanupReport::default()
        };
    }
    let mut out = cleanup_docker(rt, state).await;
    let dir = remove_task_directory(data_dir, &state.id);
    out.directory = dir.directory;
    out.refused.extend(dir.refused);
    out
}

/// Steps 1 and 2 only: remove the task's containers (with their anonymous volumes) and its
/// task-scoped Docker volumes. [`cleanup_task`] is the whole cleanup; this is for callers that
/// keep the directory (tests of the Docker side).
pub async fn cleanup_docker<R: Runtime>(rt: &R, state: &TaskState) -> CleanupReport {
    let mut out = CleanupReport::default();
    for c in &state.containers {
        // Remove by id when known, else by the name decided before create (a create may have
        // succeeded in Docker even though its answer was lost).
        let target = c.docker_id.clone().unwrap_or_else(|| c.docker_name.clone());
        match rt.remove(&target).await {
            Ok(()) => out.removed_containers.push(c.docker_name.clone()),
            Err(error) => out.refused.push(Refusal::Container {
                name: c.docker_name.clone(),
                error,
            }),
        }
    }
    for name in spec::task_volume_names(state) {
        match rt.remove_volume(&name).await {
            Ok(()) => out.removed_volumes.push(name),
            Err(error) => out.refused.push(Refusal::Volume { name, error }),
        }
    }
    out
}

/// Step 3 alone: remove `DATA_DIR/tasks/<task_id>/` through berth-fs, whether or not any task
/// state is left (`berth gc` removes leftovers of crashes this way). The caller checks that
/// `task_id` is a plain name; berth-fs refuses any path that is not strictly inside
/// `DATA_DIR/tasks`.
pub fn remove_task_directory(data_dir: &Path, task_id: &str) -> CleanupReport {
    let (root, dir) = task_directory(data_dir, task_id);
    let mut out = CleanupReport::default();
    match berth_fs::remove_tree(&root, &dir) {
        Ok(removal) => {
            out.refused
                .extend(removal.causes().cloned().map(Refusal::Kept));
            out.directory = Some(removal);
        }
        Err(e) => out.refused.push(Refusal::Directory(e)),
    }
    out
}

/// What [`remove_task_directory`] would do, changing nothing (`berth gc --dry-run`).
pub fn plan_task_directory(
    data_dir: &Path,
    task_id: &str,
) -> Result<berth_fs::Plan, berth_fs::FsError> {
    let (root, dir) = task_directory(data_dir, task_id);
    berth_fs::plan_removal(&root, &dir)
}

/// The root every task-directory removal is confined to, and the task's directory in it.
fn task_directory(data_dir: &Path, task_id: &str) -> (PathBuf, PathBuf) {
    (data_dir.join("tasks"), spec::task_dir(data_dir, task_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_as_before() {
        let r = Refusal::Container {
            name: "berth-f-1-a-0123".into(),
            error: RuntimeError::conflict(
                crate::runtime::Object::Container("berth-f-1-a-0123".into()),
                "removal in progress",
            ),
        };
        assert_eq!(
            r.to_string(),
            "container berth-f-1-a-0123: conflict: removal in progress"
        );
        let r = Refusal::Volume {
            name: "berth-0123-v".into(),
            error: RuntimeError::Other("volume is in use".into()),
        };
        assert_eq!(r.to_string(), "volume berth-0123-v: volume is in use");
    }

    #[test]
    fn a_missing_task_directory_counts_as_removed() {
        let data = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(data.path().join("tasks")).expect("tasks");
        let r = remove_task_directory(data.path(), "0123456789abcdef0123456789abcdef");
        assert!(r.is_complete(), "{r:?}");
    }

    #[test]
    fn a_task_directory_is_removed_with_its_contents() {
        let data = tempfile::tempdir().expect("tmp");
        let dir = spec::scratch_dir(data.path(), "t1", "scratch");
        std::fs::create_dir_all(&dir).expect("scratch");
        std::fs::write(dir.join("f"), b"x").expect("file");
        let r = remove_task_directory(data.path(), "t1");
        assert!(r.is_complete(), "{r:?}");
        assert!(!spec::task_dir(data.path(), "t1").exists());
        let removal = r.directory.expect("attempted");
        assert_eq!(removal.removed.files, 1);
    }

    #[test]
    fn a_path_outside_the_tasks_directory_is_refused_untouched() {
        let data = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(data.path().join("tasks")).expect("tasks");
        std::fs::create_dir_all(data.path().join("keep")).expect("keep");
        let r = remove_task_directory(data.path(), "../keep");
        assert!(!r.is_complete());
        assert!(r.directory.is_none());
        assert!(
            matches!(r.refused.as_slice(), [Refusal::Directory(_)]),
            "{r:?}"
        );
        assert!(data.path().join("keep").exists());
    }
}
