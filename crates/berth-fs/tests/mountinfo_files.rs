//! The mountinfo parser on whole files: one captured on this kind of machine in a private mount
//! namespace with bind mounts on paths holding a space, a tab, a newline, a backslash and all of
//! them (plus a tmpfs whose source has a space, and propagation fields), and one shaped like a
//! systemd host running Docker (every optional field, overlay, nsfs roots, FUSE sources with
//! escapes, a path that is not UTF-8, a mount point named `-`, a garbage line).

use berth_fs::mountinfo::{self, Mount};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> Vec<Mount> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    mountinfo::parse_bytes(&bytes)
}

fn at<'a>(mounts: &'a [Mount], point: &[u8]) -> &'a Mount {
    let p = Path::new(OsStr::from_bytes(point));
    mounts
        .iter()
        .find(|m| m.mount_point == p)
        .unwrap_or_else(|| panic!("no mount at {p:?}"))
}

#[test]
fn captured_odd_paths_are_decoded_exactly() {
    let mounts = fixture("private-ns-odd-paths.mountinfo");
    let base = b"/tmp/berth-capture/";
    for (escaped_id, name) in [
        (65, &b"with space"[..]),
        (66, b"with\ttab"),
        (67, b"with\nnewline"),
        (68, b"back\\slash"),
        (69, b"all \\\t\nx"),
        (70, b"trailing "),
    ] {
        let point = [&base[..], name].concat();
        let m = at(&mounts, &point);
        assert_eq!(m.id, escaped_id);
        assert_eq!(m.parent_id, 44);
        assert_eq!(m.root, PathBuf::from("/tmp/berth-capture/src"));
        assert_eq!(m.fs_type, "ext4");
        assert_eq!(m.source, "/dev/vda");
        assert!(m.optional_fields.is_empty());
        assert!(m.super_options.starts_with("rw,discard"));
    }
    let tm = at(&mounts, b"/tmp/berth-capture/tm");
    assert_eq!(tm.fs_type, "tmpfs");
    assert_eq!(tm.source, "odd source");
    assert_eq!(tm.optional_fields, vec!["shared:2"]);
    assert_eq!(tm.super_options, "rw,size=1024k");
    let inner = at(&mounts, b"/tmp/berth-capture/tm/inner");
    assert_eq!(inner.root, PathBuf::from("/inner"));
    assert_eq!(inner.parent_id, tm.id);
    // Every line of the capture is a mount.
    let text = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/private-ns-odd-paths.mountinfo"),
    )
    .expect("fixture");
    assert_eq!(mounts.len(), text.iter().filter(|&&b| b == b'\n').count());
}

#[test]
fn captured_file_lists_mounts_below_a_directory_deepest_first() {
    let mounts = fixture("private-ns-odd-paths.mountinfo");
    let below: Vec<&Path> = mountinfo::at_or_below(&mounts, Path::new("/tmp/berth-capture/tm"))
        .iter()
        .map(|m| m.mount_point.as_path())
        .collect();
    assert_eq!(
        below,
        vec![
            Path::new("/tmp/berth-capture/tm/inner"),
            Path::new("/tmp/berth-capture/tm")
        ]
    );
    // Whole components: "/tmp/berth-capture/with" is not a prefix of "with space".
    assert!(mountinfo::at_or_below(&mounts, Path::new("/tmp/berth-capture/with")).is_empty());
    assert_eq!(
        mountinfo::at_or_below(&mounts, Path::new("/tmp/berth-capture")).len(),
        8
    );
}

#[test]
fn host_file_has_every_optional_field_shape() {
    let mounts = fixture("systemd-docker-host.mountinfo");
    assert_eq!(
        mounts.len(),
        22,
        "the garbage line is skipped, nothing else"
    );
    let vols = at(&mounts, b"/var/lib/docker/volumes");
    assert_eq!(vols.optional_fields, vec!["shared:1", "master:1"]);
    assert_eq!(vols.root, PathBuf::from("/var/lib/docker/volumes"));
    let sub = at(
        &mounts,
        b"/var/lib/berth/tasks/0123456789abcdef0123456789abcdef/volumes/scratch/sub",
    );
    assert_eq!(sub.optional_fields, vec!["master:1", "propagate_from:1"]);
    assert_eq!(sub.root, PathBuf::from("/srv/data"));
    assert_eq!(
        at(&mounts, b"/mnt/private").optional_fields,
        vec!["unbindable"]
    );
    let ns = at(&mounts, b"/run/docker/netns/4b1c2d3e");
    assert_eq!(ns.root, PathBuf::from("net:[4026532565]"));
    assert_eq!(ns.fs_type, "nsfs");
    let overlay = at(&mounts, b"/var/lib/docker/overlay2/3f2a9c/merged");
    assert!(
        overlay
            .super_options
            .contains("upperdir=/var/lib/docker/overlay2/3f2a9c/diff")
    );
    assert!(overlay.optional_fields.is_empty());
    let sshfs = at(&mounts, b"/home/me/remote share");
    assert_eq!(sshfs.fs_type, "fuse.sshfs");
    assert_eq!(sshfs.source, "me@host:/srv/My Files");
    let dash = at(&mounts, b"/mnt/-");
    assert_eq!(dash.source, "-");
    assert_eq!(dash.fs_type, "tmpfs");
    assert_eq!(at(&mounts, b"/mnt/empty-options").super_options, "");
    assert_eq!(at(&mounts, b"/mnt/no-optional-no-super").source, "none");
    let autofs = at(&mounts, b"/proc/sys/fs/binfmt_misc");
    assert_eq!(autofs.major_minor, "0:27");
}

#[test]
fn non_utf8_paths_survive_byte_for_byte() {
    let mounts = fixture("systemd-docker-host.mountinfo");
    let m = at(&mounts, b"/mnt/latin1-caf\xe9");
    assert_eq!(m.mount_point.as_os_str().as_bytes(), b"/mnt/latin1-caf\xe9");
}

#[test]
fn the_task_directory_mount_is_found_below_the_task() {
    let mounts = fixture("systemd-docker-host.mountinfo");
    let task = Path::new("/var/lib/berth/tasks/0123456789abcdef0123456789abcdef");
    let below = mountinfo::at_or_below(&mounts, task);
    assert_eq!(below.len(), 1);
    assert_eq!(below[0].id, 38);
    assert!(mountinfo::at_or_below(&mounts, Path::new("/var/lib/berth/tasks/0123")).is_empty());
}

#[test]
fn malformed_lines_are_skipped() {
    for bad in [
        "",
        "garbage",
        "1 2 3 4 5 6 7 8 9 10",
        "x 1 0:1 / /a rw - tmpfs t rw",
        "1 x 0:1 / /a rw - tmpfs t rw",
        "1 1 01 / /a rw - tmpfs t rw",
        "1 1 0:1 / /a rw shared:1 tmpfs t rw",
        "1 1 0:1 / /a rw -",
        "1 1 0:1 / /a rw - tmpfs",
    ] {
        assert!(mountinfo::parse_line(bad).is_none(), "{bad:?}");
    }
    assert!(mountinfo::parse_line("1 1 0:1 / /a rw - tmpfs t rw").is_some());
}
