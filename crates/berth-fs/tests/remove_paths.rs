//! `remove_tree` without mounts: which paths it refuses (outside the root, through a symlink), what
//! it counts, and how it copes with entries changing type under it. No root needed.

use berth_fs::{
    FsError, KeepReason, Methods, TreeRemoval, WalkHooks, remove_tree, remove_tree_with,
};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

struct T {
    _dir: tempfile::TempDir,
    base: PathBuf,
}

impl T {
    fn new() -> T {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(base.join("root/tasks")).expect("root");
        std::fs::create_dir_all(base.join("outside/dir")).expect("outside");
        std::fs::write(base.join("outside/dir/precious"), "must survive").expect("write");
        T { _dir: dir, base }
    }
    fn root(&self) -> PathBuf {
        self.base.join("root/tasks")
    }
    fn precious_intact(&self) {
        assert_eq!(
            std::fs::read_to_string(self.base.join("outside/dir/precious")).expect("precious"),
            "must survive"
        );
    }
}

fn write(p: &Path) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, "x").expect("write");
}

#[test]
fn refuses_paths_that_are_not_strictly_inside_the_root() {
    let t = T::new();
    let root = t.root();
    write(&t.base.join("root/tasks2/x/file"));
    write(&t.base.join("root/sibling/file"));
    let cases = [
        root.clone(),
        root.join(""),
        root.join("."),
        t.base.join("root"),
        root.join(".."),
        root.join("../sibling"),
        root.join("a/../../sibling"),
        t.base.join("root/tasks2/x"),
        t.base.join("outside/dir"),
        PathBuf::from("/"),
        PathBuf::from("relative/elsewhere"),
    ];
    for dir in &cases {
        match remove_tree(&root, dir) {
            Err(FsError::OutsideRoot { .. }) => {}
            other => panic!("{}: expected OutsideRoot, got {other:?}", dir.display()),
        }
    }
    assert!(t.base.join("root/tasks2/x/file").exists());
    assert!(t.base.join("root/sibling/file").exists());
    t.precious_intact();
    // A root containing `..` is refused too.
    assert!(matches!(
        remove_tree(&root.join("../tasks"), &root.join("../tasks/x")),
        Err(FsError::UnsafePath { .. })
    ));
}

#[test]
fn refuses_a_path_through_a_symlinked_directory() {
    let t = T::new();
    let root = t.root();
    symlink(t.base.join("outside"), root.join("link")).expect("symlink");
    let err = remove_tree(&root, &root.join("link/dir")).expect_err("refused");
    assert!(
        matches!(&err, FsError::UnsafePath { path, reason } if path == &root.join("link") && reason.contains("symbolic link")),
        "{err:?}"
    );
    assert!(err.to_string().contains("refusing to touch it"));
    t.precious_intact();
}

#[test]
fn the_tree_itself_being_a_symlink_unlinks_the_link_only() {
    let t = T::new();
    let root = t.root();
    symlink(t.base.join("outside/dir"), root.join("link")).expect("symlink");
    let r = remove_tree(&root, &root.join("link")).expect("remove");
    assert!(r.is_removed());
    assert_eq!(r.removed.symlinks, 1);
    assert_eq!(r.removed.total(), 1);
    assert!(std::fs::symlink_metadata(root.join("link")).is_err());
    t.precious_intact();
}

#[test]
fn a_missing_tree_counts_as_removed() {
    let t = T::new();
    let r = remove_tree(&t.root(), &t.root().join("nope")).expect("remove");
    assert!(r.is_removed());
    assert_eq!(r.removed.total(), 0);
    let r = remove_tree(&t.base.join("no-root"), &t.base.join("no-root/x")).expect("remove");
    assert!(r.is_removed());
}

#[test]
fn a_root_reached_through_a_symlink_is_fine() {
    let t = T::new();
    symlink(t.root(), t.base.join("root-link")).expect("symlink");
    write(&t.root().join("task/a/b"));
    let r = remove_tree(&t.base.join("root-link"), &t.base.join("root-link/task")).expect("remove");
    assert!(r.is_removed(), "{r:?}");
    assert!(!t.root().join("task").exists());
}

#[test]
fn counts_exactly_what_it_removed() {
    let t = T::new();
    let tree = t.root().join("task");
    for i in 0..20 {
        write(&tree.join(format!("d{}/e{}/f{i}", i % 4, i % 3)));
    }
    symlink("../..", tree.join("d0/up")).expect("symlink");
    symlink(t.base.join("outside/dir"), tree.join("d1/out")).expect("symlink");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        tree.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    std::fs::create_dir_all(tree.join("empty/also-empty")).expect("mkdir");
    let dirs = 1 + 4 + 12 + 2; // tree, d0..d3, each dN/eM that got a file, empty/also-empty
    let r = remove_tree(&t.root(), &tree).expect("remove");
    assert!(r.is_removed(), "{r:?}");
    assert_eq!(r.removed.files, 21);
    assert_eq!(r.removed.symlinks, 2);
    assert_eq!(r.removed.dirs, dirs);
    assert!(!tree.exists());
    t.precious_intact();
}

#[test]
fn a_deep_tree_does_not_overflow_anything() {
    let t = T::new();
    let tree = t.root().join("deep");
    let mut p = tree.clone();
    for _ in 0..600 {
        p.push("d");
    }
    std::fs::create_dir_all(&p).expect("deep dirs");
    std::fs::write(p.join("leaf"), "x").expect("leaf");
    let r = remove_tree(&t.root(), &tree).expect("remove");
    assert!(r.is_removed(), "{:?}", r.kept.first());
    assert_eq!((r.removed.dirs, r.removed.files), (601, 1));
}

/// Replaces a file with a directory just before it is unlinked.
struct FileBecomesDir(PathBuf);

impl WalkHooks for FileBecomesDir {
    fn before_unlink(&self, path: &Path) {
        if path == self.0 && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
            std::fs::remove_file(path).expect("remove");
            write(&path.join("inner"));
        }
    }
}

#[test]
fn a_file_turning_into_a_directory_is_probed_again() {
    let t = T::new();
    let tree = t.root().join("task");
    write(&tree.join("f"));
    let r = remove_tree_with(
        &t.root(),
        &tree,
        Methods::ALL,
        &FileBecomesDir(tree.join("f")),
    )
    .expect("remove");
    assert!(r.is_removed(), "{r:?}");
    assert_eq!((r.removed.files, r.removed.dirs), (1, 2));
}

/// Adds an entry to a directory just before it is removed.
struct Sneak(PathBuf);

impl WalkHooks for Sneak {
    fn before_rmdir(&self, path: &Path) {
        if path == self.0 {
            write(&path.join("late"));
        }
    }
}

#[test]
fn entries_appearing_late_keep_the_directory() {
    let t = T::new();
    let tree = t.root().join("task");
    write(&tree.join("a/f"));
    let r: TreeRemoval =
        remove_tree_with(&t.root(), &tree, Methods::ALL, &Sneak(tree.join("a"))).expect("remove");
    let kept: Vec<_> = r.kept.iter().map(|k| (k.path.clone(), k.reason)).collect();
    assert_eq!(
        kept,
        vec![
            (tree.join("a"), KeepReason::NotEmpty),
            (tree.clone(), KeepReason::ContainsKept)
        ]
    );
    assert_eq!(r.causes().count(), 1);
    assert!(tree.join("a/late").exists());
}
