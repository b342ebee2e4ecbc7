//! `berth gc`: remove leftover task directories (`DATA_DIR/tasks/<task-id>/`) — after a crash, or
//! after a cleanup that was refused because something was still mounted — through the engine's
//! task cleanup (`berth_engine::cleanup::remove_task_directory`, then `berth_fs::remove_tree`), the
//! same code `berth run` and the agent clean up with: unmount first, delete nothing if any unmount
//! fails, never delete through a mount or a symlink.
//!
//! Leftovers are the task directories that no known, not-yet-cleaned task owns: the tasks in the
//! agent's state store (`DATA_DIR/berth.redb`) are kept. gc takes the data directory's lock
//! exclusively, so it never runs beside an agent or a `berth run` (which holds it shared) on the same
//! data directory.
//!
//! Exit status: 0 everything was removed (or nothing to do, or `--dry-run`), 1 something was kept,
//! 75 (EX_TEMPFAIL) another berth process holds the data directory's lock.

use crate::datadir::{DataDirLock, LockError};
use anyhow::Context;
use berth_fs::{Plan, TreeRemoval, shown};
use serde_json::json;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// EX_TEMPFAIL (sysexits.h): the data directory is locked by another berth process; try later.
pub const EXIT_LOCKED: u8 = 75;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  berth gc --data-dir /var/lib/berth\n  berth gc --dry-run\n  berth gc --output json\n\nExit status: 0 everything was removed (or nothing to do, or --dry-run); 1 something was kept\n(the REASON column says why: usually a mount that could not be unmounted); 75 another berth\nprocess (agent or gc) holds DATA_DIR/berth.lock."
)]
pub struct Args {
    /// The data directory whose leftover task directories (DATA_DIR/tasks/*) to remove.
    /// Default: /var/lib/berth as root, else $XDG_STATE_HOME/berth.
    #[arg(long, env = "BERTH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Show what would be removed, and which mounts would be unmounted first; change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// `text`: a table for people; `json`: one JSON object per task directory, then a summary.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub output: Format,

    /// Also remove containers berth created from this data directory (label `berth.data-dir`)
    /// that no task in the state store owns (orphans of a crash or of a lost store).
    #[arg(long)]
    pub containers: bool,

    /// The Docker Engine (for --containers). Default: DOCKER_HOST, else the local socket.
    #[arg(long, value_name = "URI")]
    pub docker_host: Option<String>,

    /// Print the configuration gc would use (file, then environment, then flags: data-dir,
    /// docker-host) as TOML, each value followed by a comment naming the layer that set it, and
    /// exit.
    #[arg(long)]
    pub print_config: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table: TASK DIRECTORY, RESULT, REASON.
    Text,
    /// One JSON object per line.
    Json,
}

/// What happened to one entry of `tasks/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Removed,
    Kept,
    WouldRemove,
    /// Not a task directory, or owned by a known task: not touched, does not affect the exit status.
    Skipped,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Removed => "removed",
            Outcome::Kept => "kept",
            Outcome::WouldRemove => "would remove",
            Outcome::Skipped => "skipped",
        }
    }
}

struct Row {
    dir: PathBuf,
    outcome: Outcome,
    reason: String,
    removal: Option<TreeRemoval>,
    plan: Option<Plan>,
}

/// Task ids whose directories are not leftovers: tasks the agent's store still has (not cleaned
/// yet). Read under the lock; without a store, none.
fn owned_task_ids(data_dir: &Path) -> anyhow::Result<BTreeSet<String>> {
    if !data_dir.join(berth_store::db::DB_FILE).exists() {
        return Ok(BTreeSet::new());
    }
    let store = berth_store::Store::open(data_dir).context("opening the state store")?;
    Ok(store
        .tasks()
        .context("reading the state store")?
        .into_iter()
        .map(|r| r.state.id)
        .collect())
}

/// Whether `name` can be a task id: 1 to 128 ASCII letters, digits, `-` and `_`, not starting with
/// `-`. berth's own ids are 32 lowercase hex digits; anything else under `tasks/` is not berth's
/// and is left alone.
fn is_task_id(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::cmd_run::default_data_dir);
    let tasks = data_dir.join("tasks");
    if !data_dir.is_dir() {
        eprintln!(
            "berth: gc: {} does not exist: nothing to clean",
            data_dir.display()
        );
        print_rows(args.output, args.dry_run, &[]);
        return Ok(ExitCode::SUCCESS);
    }
    let _lock = match DataDirLock::acquire(&data_dir) {
        Ok(lock) => lock,
        Err(LockError::Held(path)) => {
            eprintln!(
                "berth: gc: another berth process (agent, gc, or a running `berth run`) holds {}; try again when it is done",
                path.display()
            );
            return Ok(ExitCode::from(EXIT_LOCKED));
        }
        Err(LockError::Other(e)) => return Err(e),
    };
    // The tasks directory is the root of every removal: refuse one that is a symlink to elsewhere.
    if std::fs::symlink_metadata(&tasks).is_ok_and(|m| m.file_type().is_symlink()) {
        anyhow::bail!(
            "{} is a symbolic link; refusing to remove anything through it",
            tasks.display()
        );
    }
    let owned = owned_task_ids(&data_dir)?;
    let rows = collect(&data_dir, &owned, args.dry_run)?;
    let data_dir = data_dir.canonicalize().unwrap_or(data_dir);
    print_rows(args.output, args.dry_run, &rows);
    let mut kept = rows.iter().any(|r| r.outcome == Outcome::Kept);
    if args.containers {
        kept |= orphan_containers(&args, &data_dir, &owned)?;
    }
    Ok(if kept {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Remove (or, with --dry-run, list) the containers of this data directory that no stored task
/// owns. Returns whether one could not be removed.
fn orphan_containers(
    args: &Args,
    data_dir: &Path,
    owned: &BTreeSet<String>,
) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        use berth_engine::Runtime as _;
        let docker = berth_docker::connect(args.docker_host.as_deref()).await?;
        let rt = berth_docker::DockerRuntime::new(docker)
            .with_engine(berth_docker::engine_address(args.docker_host.as_deref()));
        let ours = data_dir.display().to_string();
        let mut failed = false;
        let mut rows: Vec<[String; 3]> = Vec::new();
        for c in rt.list_managed().await.context("listing berth's containers")? {
            if c.data_dir.as_deref() != Some(ours.as_str()) || owned.contains(&c.task) {
                continue;
            }
            let (result, reason) = if args.dry_run {
                ("would remove", format!("task {} is not in the store", c.task))
            } else {
                match rt.remove(&c.id).await {
                    Ok(()) => ("removed", format!("task {} is not in the store", c.task)),
                    Err(e) => {
                        failed = true;
                        ("kept", e.to_string())
                    }
                }
            };
            if args.output == Format::Json {
                println!(
                    "{}",
                    json!({"event": "gcContainer", "container": c.name, "task": c.task, "result": result, "reason": reason})
                );
            } else {
                rows.push([c.name, result.to_string(), reason]);
            }
        }
        if args.output == Format::Text && !rows.is_empty() {
            println!();
            print!(
                "{}",
                crate::output::table(&["CONTAINER", "RESULT", "REASON"], &rows)
            );
        }
        Ok(failed)
    })
}

/// Go through `tasks/`: every task directory not in `owned` is removed (or planned, when `dry_run`).
fn collect(data_dir: &Path, owned: &BTreeSet<String>, dry_run: bool) -> anyhow::Result<Vec<Row>> {
    let tasks = &data_dir.join("tasks");
    let entries = match std::fs::read_dir(tasks) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", tasks.display())),
    };
    let mut names: Vec<(OsString, bool)> = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", tasks.display()))?;
        // DirEntry::file_type does not follow a symlink.
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        names.push((entry.file_name(), is_dir));
    }
    names.sort();
    let mut rows = Vec::new();
    for (name, is_dir) in names {
        let dir = tasks.join(&name);
        let skip = |reason: &str| Row {
            dir: dir.clone(),
            outcome: Outcome::Skipped,
            reason: reason.to_string(),
            removal: None,
            plan: None,
        };
        let Some(id) = name.to_str().filter(|n| is_task_id(n)) else {
            rows.push(skip("not a task id; gc removes only task directories"));
            continue;
        };
        if !is_dir {
            rows.push(skip("not a directory; gc removes only task directories"));
            continue;
        }
        if owned.contains(id) {
            rows.push(skip("owned by a known task that is not cleaned up yet"));
            continue;
        }
        rows.push(if dry_run {
            plan(data_dir, id, dir)
        } else {
            remove(data_dir, id, dir)
        });
    }
    Ok(rows)
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| shown(p))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plan(data_dir: &Path, id: &str, dir: PathBuf) -> Row {
    match berth_engine::cleanup::plan_task_directory(data_dir, id) {
        Ok(plan) => Row {
            dir,
            outcome: Outcome::WouldRemove,
            reason: if plan.mounts.is_empty() {
                "-".to_string()
            } else {
                format!("would first unmount {}", list(&plan.mounts))
            },
            removal: None,
            plan: Some(plan),
        },
        Err(e) => Row {
            dir,
            outcome: Outcome::Kept,
            reason: e.to_string(),
            removal: None,
            plan: None,
        },
    }
}

fn remove(data_dir: &Path, id: &str, dir: PathBuf) -> Row {
    let report = berth_engine::cleanup::remove_task_directory(data_dir, id);
    match report.directory {
        Some(removal) if removal.is_removed() => Row {
            dir,
            outcome: Outcome::Removed,
            reason: if removal.unmounted.is_empty() {
                "-".to_string()
            } else {
                format!("unmounted {}", list(&removal.unmounted))
            },
            removal: Some(removal),
            plan: None,
        },
        removal => {
            let mut reason = report
                .refused
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            if removal
                .as_ref()
                .is_some_and(TreeRemoval::refused_before_deleting)
            {
                reason.push_str("; nothing deleted");
            }
            Row {
                dir,
                outcome: Outcome::Kept,
                reason,
                removal,
                plan: None,
            }
        }
    }
}

fn print_rows(format: Format, dry_run: bool, rows: &[Row]) {
    let mut stdout = std::io::stdout().lock();
    let count = |o: Outcome| rows.iter().filter(|r| r.outcome == o).count();
    let _ = match format {
        Format::Text => print_table(&mut stdout, dry_run, rows, count),
        Format::Json => print_json(&mut stdout, dry_run, rows, count),
    };
}

fn print_table(
    out: &mut impl Write,
    dry_run: bool,
    rows: &[Row],
    count: impl Fn(Outcome) -> usize,
) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "no task directories to clean");
    }
    let cells: Vec<[String; 3]> = rows
        .iter()
        .map(|r| {
            [
                shown(&r.dir),
                r.outcome.as_str().to_string(),
                r.reason.clone(),
            ]
        })
        .collect();
    let header = ["TASK DIRECTORY", "RESULT", "REASON"];
    let w0 = cells
        .iter()
        .map(|c| c[0].chars().count())
        .chain([header[0].len()])
        .max()
        .unwrap_or(0);
    let w1 = cells
        .iter()
        .map(|c| c[1].len())
        .chain([header[1].len()])
        .max()
        .unwrap_or(0);
    writeln!(out, "{:<w0$}  {:<w1$}  {}", header[0], header[1], header[2])?;
    for c in &cells {
        writeln!(out, "{:<w0$}  {:<w1$}  {}", c[0], c[1], c[2])?;
    }
    if dry_run {
        writeln!(
            out,
            "dry run: {} would be removed, {} skipped; nothing was changed",
            count(Outcome::WouldRemove),
            count(Outcome::Skipped)
        )?;
    } else {
        writeln!(
            out,
            "{} removed, {} kept, {} skipped",
            count(Outcome::Removed),
            count(Outcome::Kept),
            count(Outcome::Skipped)
        )?;
        if count(Outcome::Kept) > 0 {
            writeln!(
                out,
                "kept directories stay until what holds them is gone; run `berth gc` again then"
            )?;
        }
    }
    Ok(())
}

fn print_json(
    out: &mut impl Write,
    dry_run: bool,
    rows: &[Row],
    count: impl Fn(Outcome) -> usize,
) -> std::io::Result<()> {
    for r in rows {
        let mut line = json!({
            "event": "gc",
            "taskDirectory": r.dir.to_string_lossy(),
            "result": r.outcome.as_str(),
            "reason": r.reason,
        });
        if let Some(removal) = &r.removal {
            line["unmounted"] = json!(
                removal
                    .unmounted
                    .iter()
                    .map(|p| p.to_string_lossy())
                    .collect::<Vec<_>>()
            );
            line["removed"] = json!({
                "files": removal.removed.files,
                "dirs": removal.removed.dirs,
                "symlinks": removal.removed.symlinks,
            });
            line["kept"] = json!(
                removal
                    .kept
                    .iter()
                    .map(|k| json!({
                        "path": k.path.to_string_lossy(),
                        "reason": k.to_string(),
                        "cause": k.is_cause(),
                    }))
                    .collect::<Vec<_>>()
            );
        }
        if let Some(plan) = &r.plan {
            line["wouldUnmount"] = json!(
                plan.mounts
                    .iter()
                    .map(|p| p.to_string_lossy())
                    .collect::<Vec<_>>()
            );
        }
        writeln!(out, "{line}")?;
    }
    let summary = json!({
        "event": "gcSummary",
        "dryRun": dry_run,
        "removed": count(Outcome::Removed),
        "kept": count(Outcome::Kept),
        "wouldRemove": count(Outcome::WouldRemove),
        "skipped": count(Outcome::Skipped),
    });
    writeln!(out, "{summary}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_plain_identifiers() {
        assert!(is_task_id("0123456789abcdef0123456789abcdef"));
        assert!(is_task_id("task_1-a"));
        for bad in ["", ".", "..", "-rf", "a/b", "a b", "a\nb", "é"] {
            assert!(!is_task_id(bad), "{bad:?}");
        }
        assert!(!is_task_id(&"a".repeat(129)));
    }
}
