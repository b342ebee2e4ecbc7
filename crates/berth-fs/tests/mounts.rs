//! `remove_tree` and `unmount_all_under` against real mounts (root; each test in its own private
//! mount namespace, see `common`). Every mount source holds a sentinel file that must survive.

mod common;

use berth_fs::{
    Detection, Errno, KeepReason, Kept, Methods, TreeRemoval, WalkHooks, remove_tree,
    remove_tree_with, unmount_all_under,
};
use common::*;
use std::path::{Path, PathBuf};

/// A test layout: `<scratch>/root/tasks` is the root, `<scratch>/outside` holds mount sources.
struct Layout {
    s: Scratch,
}

impl Layout {
    fn new() -> Layout {
        let s = Scratch::with_prefix("berth-fs-test.");
        mkdir(&s.join("root/tasks"));
        mkdir(&s.join("outside"));
        Layout { s }
    }
    fn root(&self) -> PathBuf {
        self.s.join("root/tasks")
    }
    fn tree(&self) -> PathBuf {
        self.root().join("0123456789abcdef0123456789abcdef")
    }
    fn outside(&self, rel: &str) -> PathBuf {
        self.s.join("outside").join(rel)
    }
    fn remove(&self) -> TreeRemoval {
        remove_tree(&self.root(), &self.tree()).expect("remove_tree")
    }
    fn remove_with(&self, methods: Methods, hooks: &dyn WalkHooks) -> TreeRemoval {
        remove_tree_with(&self.root(), &self.tree(), methods, hooks).expect("remove_tree")
    }
}

fn kept_paths(r: &TreeRemoval) -> Vec<(PathBuf, KeepReason)> {
    r.kept.iter().map(|k| (k.path.clone(), k.reason)).collect()
}

ns_test! {
    fn bind_mount_from_the_same_filesystem_is_unmounted_and_the_tree_removed() {
        let l = Layout::new();
        let t = l.tree();
        write(&t.join("a/file"), "x");
        let src = l.outside("src");
        let sentinel = sentinel_source(&src);
        let sub = t.join("volumes/scratch/sub");
        mkdir(&sub);
        bind(&src, &sub);
        assert!(berth_fs::is_mount_point(&sub).expect("probe").is_some());

        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.unmounted, vec![sub.clone()]);
        assert_eq!(r.removed.files, 1);
        assert_eq!(r.removed.dirs, 5, "t, a, volumes, scratch, sub");
        assert!(!exists(&t));
        assert_sentinel(&sentinel);
        assert!(mounts_under(&l.s.path).is_empty());
    }
}

ns_test! {
    fn a_mount_on_the_tree_itself_is_unmounted_first() {
        let l = Layout::new();
        let t = l.tree();
        write(&t.join("ours"), "ours");
        let src = l.outside("src");
        let sentinel = sentinel_source(&src);
        bind(&src, &t);
        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.unmounted, vec![t.clone()]);
        assert_eq!((r.removed.files, r.removed.dirs), (1, 1), "the tree's own file underneath");
        assert!(!exists(&t));
        assert_sentinel(&sentinel);
    }
}

ns_test! {
    fn tmpfs_two_levels_deep_is_unmounted_and_its_contents_survive() {
        let l = Layout::new();
        let t = l.tree();
        let y = t.join("x/y");
        mkdir(&y);
        write(&t.join("x/own"), "ours");
        tmpfs(&y);
        let sentinel = sentinel_source(&y);
        // A second view of the same tmpfs outside the tree, to check its contents afterwards.
        let keep = l.outside("keep");
        mkdir(&keep);
        bind(&y, &keep);

        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.unmounted, vec![y]);
        assert_eq!((r.removed.files, r.removed.dirs), (1, 3));
        assert!(!exists(&t));
        assert_sentinel(&keep.join("SENTINEL"));
        assert_eq!(sentinel, t.join("x/y/SENTINEL"));
    }
}

ns_test! {
    fn busy_mount_refuses_the_whole_tree_then_goes_when_released() {
        let l = Layout::new();
        let t = l.tree();
        let own = [t.join("a/f1"), t.join("a/b/f2"), t.join("v/f3")];
        for f in &own {
            write(f, "ours");
        }
        let src = l.outside("src");
        let sentinel = sentinel_source(&src);
        let busy = t.join("v/busy");
        mkdir(&busy);
        bind(&src, &busy);
        let src2 = l.outside("src2");
        let sentinel2 = sentinel_source(&src2);
        let free = t.join("w/free");
        mkdir(&free);
        bind(&src2, &free);
        let held = std::fs::File::open(busy.join("SENTINEL")).expect("hold a file open");

        let r = l.remove();
        assert!(!r.is_removed());
        assert!(r.refused_before_deleting());
        assert_eq!(
            kept_paths(&r),
            vec![(busy.clone(), KeepReason::StillMounted { errno: Some(Errno::BUSY) })]
        );
        assert_eq!(
            r.kept[0].to_string(),
            format!("{} is still mounted (EBUSY)", busy.display())
        );
        assert_eq!(r.unmounted, vec![free.clone()], "the free one is unmounted");
        assert_eq!(r.removed, berth_fs::Counts::default(), "nothing deleted");
        for f in &own {
            assert!(exists(f), "{} deleted", f.display());
        }
        assert!(exists(&free), "the directory of the unmounted mount stays");
        assert!(is_mounted(&busy));
        assert_sentinel(&busy.join("SENTINEL"));
        assert_sentinel(&sentinel);
        assert_sentinel(&sentinel2);

        drop(held);
        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.unmounted, vec![busy]);
        assert!(!exists(&t));
        assert_sentinel(&sentinel);
        assert_sentinel(&sentinel2);
    }
}

ns_test! {
    fn unmount_all_under_goes_deepest_first_and_finds_hidden_and_stacked_mounts() {
        let l = Layout::new();
        let t = l.tree();
        let src = l.outside("src");
        let sentinel = sentinel_source(&src);
        let (a, b, c) = (t.join("a"), t.join("a/b"), t.join("a/b/c"));
        mkdir(&a);
        tmpfs(&a);
        mkdir(&b);
        tmpfs(&b);
        mkdir(&c);
        bind(&src, &c);
        // A mount hidden under a later one: h/x first, then a tmpfs over h.
        let (h, hx) = (t.join("h"), t.join("h/x"));
        mkdir(&hx);
        bind(&src, &hx);
        tmpfs(&h);
        // Two mounts stacked on one path.
        let s = t.join("s");
        mkdir(&s);
        bind(&src, &s);
        bind(&src, &s);

        let r = unmount_all_under(&t).expect("unmount");
        assert!(r.is_complete(), "{:?}", r.failed);
        let pos = |p: &Path| r.unmounted.iter().position(|u| u == p).expect("unmounted");
        assert!(pos(&c) < pos(&b) && pos(&b) < pos(&a), "{:?}", r.unmounted);
        assert!(pos(&h) < pos(&hx), "the upper mount first, then the one it hid");
        assert_eq!(r.unmounted.iter().filter(|u| **u == s).count(), 2);
        assert_eq!(r.unmounted.len(), 7);
        assert!(mounts_under(&t).is_empty());
        assert_sentinel(&sentinel);
    }
}

ns_test! {
    fn unmount_all_under_names_the_busy_mount() {
        let l = Layout::new();
        let t = l.tree();
        let src = l.outside("src");
        sentinel_source(&src);
        let busy = t.join("with space/busy");
        mkdir(&busy);
        bind(&src, &busy);
        let cwd_holder = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(&busy)
            .spawn()
            .expect("a process whose working directory is in the mount");
        let r = unmount_all_under(&t).expect("unmount");
        let mut child = cwd_holder;
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(r.failed.len(), 1);
        assert_eq!(r.failed[0].mount_point, busy);
        assert_eq!(r.failed[0].errno, Some(Errno::BUSY));
        assert_eq!(
            r.failed[0].to_string(),
            format!("{} is still mounted (EBUSY)", busy.display())
        );
        assert!(is_mounted(&busy));
    }
}

ns_test! {
    fn symlinks_to_outside_files_and_directories_are_unlinked_not_followed() {
        let l = Layout::new();
        let t = l.tree();
        let file = l.outside("file");
        write(&file, "must survive");
        let dir = l.outside("dir");
        let inner = sentinel_source(&dir);
        mkdir(&t.join("sub"));
        let links = [
            (t.join("lf"), file.clone()),
            (t.join("ld"), dir.clone()),
            (t.join("sub/ld2"), dir.clone()),
            (t.join("sub/abs-root"), PathBuf::from("/")),
            (t.join("sub/dangling"), l.outside("nothing-here")),
            (t.join("sub/up"), PathBuf::from("../../..")),
        ];
        for (link, target) in &links {
            std::os::unix::fs::symlink(target, link).expect("symlink");
        }
        // A mount reached only through a symlink in the tree is not below the tree.
        let mnt = l.outside("mnt");
        mkdir(&mnt);
        let msrc = l.outside("msrc");
        let msentinel = sentinel_source(&msrc);
        bind(&msrc, &mnt);
        std::os::unix::fs::symlink(&mnt, t.join("to-mount")).expect("symlink");

        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.removed.symlinks, 7);
        assert_eq!(r.removed.dirs, 2);
        assert!(r.unmounted.is_empty());
        assert!(!exists(&t));
        assert_sentinel(&file);
        assert_sentinel(&inner);
        assert!(is_mounted(&mnt));
        assert_sentinel(&msentinel);
    }
}

/// Swaps `target` for a symlink to `to` at the named hook point.
struct Swap {
    at: &'static str,
    target: PathBuf,
    to: PathBuf,
    moved: Option<PathBuf>,
}

impl Swap {
    fn swap(&self, point: &str, path: &Path) {
        if point != self.at || path != self.target {
            return;
        }
        match &self.moved {
            Some(moved) => std::fs::rename(&self.target, moved).expect("move the directory away"),
            None => std::fs::remove_dir_all(&self.target).expect("remove the directory"),
        }
        std::os::unix::fs::symlink(&self.to, &self.target).expect("symlink in its place");
    }
}

impl WalkHooks for Swap {
    fn before_open_dir(&self, path: &Path) {
        self.swap("before_open_dir", path);
    }
    fn after_open_dir(&self, path: &Path) {
        self.swap("after_open_dir", path);
    }
}

ns_test! {
    fn directory_swapped_for_a_symlink_before_it_is_opened_is_not_followed() {
        let l = Layout::new();
        let t = l.tree();
        write(&t.join("a/f1"), "ours");
        write(&t.join("a/deeper/f2"), "ours");
        write(&t.join("b"), "ours");
        let dir = l.outside("dir");
        let sentinel = sentinel_source(&dir);
        write(&dir.join("sub/precious"), "must survive");
        let hooks = Swap { at: "before_open_dir", target: t.join("a"), to: dir.clone(), moved: None };

        let r = l.remove_with(Methods::ALL, &hooks);
        assert!(r.is_removed(), "{r:?}");
        assert!(!exists(&t));
        assert_eq!(r.removed.symlinks, 1, "the swapped-in link itself");
        assert_sentinel(&sentinel);
        assert_sentinel(&dir.join("sub/precious"));
    }
}

ns_test! {
    fn directory_swapped_for_a_symlink_after_it_was_opened_is_left_alone() {
        let l = Layout::new();
        let t = l.tree();
        write(&t.join("a/f1"), "ours");
        let dir = l.outside("dir");
        let sentinel = sentinel_source(&dir);
        let moved = l.root().join("moved-away");
        let hooks = Swap {
            at: "after_open_dir",
            target: t.join("a"),
            to: dir.clone(),
            moved: Some(moved.clone()),
        };

        let r = l.remove_with(Methods::ALL, &hooks);
        // The opened descriptor is the moved directory: its own file went, the newcomer stays.
        assert_eq!(
            kept_paths(&r),
            vec![(t.join("a"), KeepReason::Replaced), (t.clone(), KeepReason::ContainsKept)]
        );
        assert!(!exists(&moved.join("f1")));
        assert_sentinel(&sentinel);
        // The next pass removes the link itself, never its target.
        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.removed.symlinks, 1);
        assert_sentinel(&sentinel);
    }
}

/// Mounts `src` (or a tmpfs) on `target` at the named hook point.
struct MountAt {
    at: &'static str,
    target: PathBuf,
    src: Option<PathBuf>,
}

impl MountAt {
    fn go(&self, point: &str, path: &Path) {
        if point == self.at && path == self.target {
            match &self.src {
                Some(src) => bind(src, &self.target),
                None => {
                    tmpfs(&self.target);
                    sentinel_source(&self.target);
                }
            }
        }
    }
}

impl WalkHooks for MountAt {
    fn after_unmount(&self, path: &Path) {
        self.go("after_unmount", path);
    }
    fn before_open_dir(&self, path: &Path) {
        self.go("before_open_dir", path);
    }
    fn after_open_dir(&self, path: &Path) {
        self.go("after_open_dir", path);
    }
    fn before_unlink(&self, path: &Path) {
        self.go("before_unlink", path);
    }
}

/// A tree with a directory `a/m` (holding a file of ours) and siblings; a mount appears on `a/m`
/// at `at`, with `methods` alone detecting it. Checks it is kept with `expect`, its contents and
/// the source's sentinel untouched, its ancestors kept, everything else removed.
fn mount_appears(at: &'static str, methods: Methods, same_fs: bool, expect: Detection) {
    let l = Layout::new();
    let t = l.tree();
    let m = t.join("a/m");
    write(&m.join("ours"), "ours");
    write(&t.join("a/sibling"), "ours");
    write(&t.join("b/c/d"), "ours");
    let src = l.outside("src");
    let sentinel = sentinel_source(&src);
    let hooks = MountAt {
        at,
        target: m.clone(),
        src: same_fs.then(|| src.clone()),
    };

    let r = l.remove_with(methods, &hooks);
    assert_eq!(
        kept_paths(&r),
        vec![
            (m.clone(), KeepReason::MountPoint(expect)),
            (t.join("a"), KeepReason::ContainsKept),
            (t.clone(), KeepReason::ContainsKept),
        ],
        "{r:?}"
    );
    assert!(
        r.kept[0]
            .to_string()
            .contains("is a mount point found during removal")
    );
    assert!(is_mounted(&m), "the mount stays");
    assert_sentinel(&m.join("SENTINEL"));
    if same_fs {
        assert_sentinel(&sentinel);
    }
    assert!(!exists(&t.join("a/sibling")) && !exists(&t.join("b")));
    detach_all_under(&t);
    assert_sentinel(&sentinel);
}

ns_test! {
    fn mount_appearing_before_open_is_kept_every_detection_method() {
        let only = |statx, openat2, device, mountinfo| Methods { statx, openat2, device, mountinfo };
        mount_appears("before_open_dir", Methods::ALL, true, Detection::OpenXdev);
        mount_appears("before_open_dir", only(false, true, false, false), true, Detection::OpenXdev);
        mount_appears("before_open_dir", only(true, false, false, false), true, Detection::StatxMountRoot);
        mount_appears("before_open_dir", only(false, false, false, true), true, Detection::MountInfo);
        // st_dev sees a tmpfs (another device), never a same-filesystem bind mount.
        mount_appears("before_open_dir", only(false, false, true, false), false, Detection::Device);
    }
}

ns_test! {
    fn mount_appearing_after_open_fails_rmdir_and_is_kept() {
        // The open descriptor is the directory underneath: its own file goes, the mount's stays.
        mount_appears("after_open_dir", Methods::ALL, true, Detection::RemoveBusy);
    }
}

ns_test! {
    fn mount_appearing_on_the_tree_itself_after_the_unmount_step_is_kept() {
        let l = Layout::new();
        let t = l.tree();
        write(&t.join("ours"), "ours");
        let src = l.outside("src");
        let sentinel = sentinel_source(&src);
        let hooks = MountAt { at: "after_unmount", target: t.clone(), src: Some(src.clone()) };
        let r = l.remove_with(Methods::ALL, &hooks);
        assert_eq!(r.kept.len(), 1, "{r:?}");
        assert_eq!(r.kept[0].path, t);
        assert!(matches!(r.kept[0].reason, KeepReason::MountPoint(_)));
        assert_eq!(r.removed, berth_fs::Counts::default());
        assert_sentinel(&sentinel);
        assert_sentinel(&t.join("SENTINEL"));
        detach_all_under(&t);
        assert!(exists(&t.join("ours")));
    }
}

ns_test! {
    fn file_bind_mount_appearing_before_unlink_is_kept() {
        let l = Layout::new();
        let t = l.tree();
        let f = t.join("a/file");
        write(&f, "ours");
        let src_file = l.outside("file-src");
        write(&src_file, "must survive");
        let hooks = MountAt { at: "before_unlink", target: f.clone(), src: Some(src_file.clone()) };
        let r = l.remove_with(Methods::ALL, &hooks);
        assert_eq!(
            kept_paths(&r),
            vec![
                (f.clone(), KeepReason::MountPoint(Detection::RemoveBusy)),
                (t.join("a"), KeepReason::ContainsKept),
                (t.clone(), KeepReason::ContainsKept),
            ]
        );
        assert_sentinel(&src_file);
        assert_sentinel(&f);
    }
}

ns_test! {
    fn file_bind_mount_in_the_tree_is_unmounted_first() {
        let l = Layout::new();
        let t = l.tree();
        let f = t.join("a/file");
        write(&f, "ours");
        let src_file = l.outside("file-src");
        write(&src_file, "must survive");
        bind(&src_file, &f);
        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.unmounted, vec![f]);
        assert_sentinel(&src_file);
    }
}

ns_test! {
    fn odd_names_spaces_tabs_newlines_backslashes() {
        let l = Layout::new();
        let t = l.tree();
        let names = [
            "with space",
            "tab\there",
            "new\nline",
            "back\\slash",
            "all \\\t\n x",
            "trailing ",
            "\\040 looks escaped",
        ];
        let mut sentinels = Vec::new();
        for (i, name) in names.iter().enumerate() {
            // Alternate depths, so some odd mounts are nested under other odd directories.
            let point = if i % 2 == 0 {
                t.join(name)
            } else {
                t.join(names[i - 1]).join("inner").join(name)
            };
            mkdir(&point);
            write(&point.join("ours"), "ours");
            let src = l.outside(&format!("src-{i}"));
            sentinels.push(sentinel_source(&src));
            bind(&src, &point);
        }
        let tm = t.join("tab\there").join("tmp fs\n");
        mkdir(&tm);
        tmpfs(&tm);
        assert_eq!(mounts_under(&t).len(), names.len() + 1);

        let r = l.remove();
        assert!(r.is_removed(), "{r:?}");
        assert_eq!(r.unmounted.len(), names.len() + 1);
        assert!(!exists(&t));
        for s in &sentinels {
            assert_sentinel(s);
        }
    }
}

ns_test! {
    fn is_mount_point_sees_same_filesystem_bind_mounts() {
        let l = Layout::new();
        let plain = l.s.join("plain");
        mkdir(&plain);
        let bound = l.s.join("bound");
        mkdir(&bound);
        bind(&plain, &bound);
        let link = l.s.join("link");
        std::os::unix::fs::symlink(&bound, &link).expect("symlink");
        assert_eq!(berth_fs::is_mount_point(&plain).expect("probe"), None);
        assert_eq!(
            berth_fs::is_mount_point(&bound).expect("probe"),
            Some(Detection::StatxMountRoot)
        );
        assert_eq!(berth_fs::is_mount_point(&link).expect("probe"), None, "not followed");
    }
}

#[test]
fn kept_messages_name_the_path() {
    {
        let k = Kept {
            path: PathBuf::from("/d/tasks/t/volumes/v/sub"),
            reason: KeepReason::StillMounted {
                errno: Some(Errno::BUSY),
            },
        };
        assert_eq!(
            k.to_string(),
            "/d/tasks/t/volumes/v/sub is still mounted (EBUSY)"
        );
        let k = Kept {
            path: PathBuf::from("/d/a\nb"),
            reason: KeepReason::ContainsKept,
        };
        assert_eq!(k.to_string(), "/d/a\\nb holds kept entries");
    }
}
