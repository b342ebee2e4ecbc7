//! Parsing `/proc/self/mountinfo` (proc(5)): one mount per line,
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! (1)(2) (3)  (4)   (5)     (6)       (7)   (8) (9)   (10)         (11)
//! ```
//!
//! mount id, parent id, major:minor, root, mount point, mount options, zero or more optional fields
//! (`shared:N`, `master:N`, `propagate_from:N`, `unbindable`) ended by `-`, filesystem type, source,
//! super options. The kernel escapes space, tab, newline and backslash in paths as `\040`, `\011`,
//! `\012` and `\134`; they are decoded here. The text is parsed as bytes: a path need not be UTF-8.
//!
//! Hand-written: no maintained crate parses mountinfo with the escapes, non-UTF-8 paths and the
//! optional fields the way berth needs, and the format is ten lines of rules.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount's unique id (the same number `statx` returns in `stx_mnt_id`).
    pub id: u64,
    /// The id of the mount this one is mounted on (its own id for the namespace's root).
    pub parent_id: u64,
    /// `st_dev` of files on this mount, as `major:minor`.
    pub major_minor: String,
    /// The directory of the filesystem that forms this mount's root (`/` unless a bind mount of a
    /// subdirectory).
    pub root: PathBuf,
    /// Where it is mounted, relative to the process's root.
    pub mount_point: PathBuf,
    /// Per-mount options (`rw,nosuid,relatime`).
    pub options: String,
    /// Propagation and other optional fields (`shared:1`, `master:2`, `unbindable`).
    pub optional_fields: Vec<String>,
    /// Filesystem type (`ext4`, `tmpfs`, `fuse.sshfs`).
    pub fs_type: String,
    /// Filesystem-specific source (`/dev/sda1`, `tmpfs`, `none`).
    pub source: String,
    /// Per-superblock options.
    pub super_options: String,
}

impl Mount {
    /// Whether this mount is mounted at `dir` or anywhere below it (whole components compared:
    /// `/a/bc` is not below `/a/b`).
    pub fn is_at_or_below(&self, dir: &Path) -> bool {
        self.mount_point.starts_with(dir)
    }
}

/// Decode mountinfo's octal escapes (`\NNN`); anything else is kept as is.
pub fn unescape(field: &str) -> Vec<u8> {
    unescape_bytes(field.as_bytes())
}

/// [`unescape`] on raw bytes.
pub fn unescape_bytes(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = u32::from(digits[0] - b'0') * 64
                    + u32::from(digits[1] - b'0') * 8
                    + u32::from(digits[2] - b'0');
                if let Ok(byte) = u8::try_from(v) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn path(field: &[u8]) -> PathBuf {
    PathBuf::from(OsString::from_vec(unescape_bytes(field)))
}

fn text(field: &[u8]) -> String {
    String::from_utf8_lossy(field).into_owned()
}

fn number(field: &[u8]) -> Option<u64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Parse one line; None when it is not a well-formed mountinfo line.
pub fn parse_line(line: &str) -> Option<Mount> {
    parse_line_bytes(line.as_bytes())
}

/// [`parse_line`] on raw bytes (a line without its newline).
pub fn parse_line_bytes(line: &[u8]) -> Option<Mount> {
    // Fields are separated by exactly one space; escaped paths contain none.
    let fields: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
    if fields.len() < 9 {
        return None;
    }
    // The optional fields end at the first lone "-" after the six fixed fields.
    let dash = fields.iter().skip(6).position(|f| *f == b"-")? + 6;
    let after = &fields[dash + 1..];
    if after.len() < 2 {
        return None;
    }
    let major_minor = text(fields[2]);
    if !major_minor.contains(':') {
        return None;
    }
    Some(Mount {
        id: number(fields[0])?,
        parent_id: number(fields[1])?,
        major_minor,
        root: path(fields[3]),
        mount_point: path(fields[4]),
        options: text(fields[5]),
        optional_fields: fields[6..dash].iter().map(|f| text(f)).collect(),
        fs_type: text(&unescape_bytes(after[0])),
        source: text(&unescape_bytes(after[1])),
        super_options: after.get(2).map(|f| text(f)).unwrap_or_default(),
    })
}

/// Parse a whole mountinfo text, skipping malformed lines.
pub fn parse(text: &str) -> Vec<Mount> {
    parse_bytes(text.as_bytes())
}

/// [`parse`] on raw bytes: paths that are not UTF-8 are kept exactly.
pub fn parse_bytes(text: &[u8]) -> Vec<Mount> {
    text.split(|&c| c == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(parse_line_bytes)
        .collect()
}

/// The calling process's mounts.
pub fn read_self() -> std::io::Result<Vec<Mount>> {
    Ok(parse_bytes(&std::fs::read("/proc/self/mountinfo")?))
}

/// Mounts of `mounts` at `dir` or below it, deepest (most path components) first; among mounts on
/// the same path, the one mounted last (on top) first.
pub fn at_or_below<'a>(mounts: &'a [Mount], dir: &Path) -> Vec<&'a Mount> {
    let mut below: Vec<(usize, &Mount)> = mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_at_or_below(dir))
        .collect();
    // mountinfo lists a mount after the one it is mounted on, so on equal depth the later line is
    // the upper mount.
    below.sort_by(|(ia, a), (ib, b)| {
        let (da, db) = (
            a.mount_point.components().count(),
            b.mount_point.components().count(),
        );
        db.cmp(&da).then(ib.cmp(ia))
    });
    below.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_line_with_escaped_spaces_and_optional_fields() {
        let line = r"36 35 98:0 /mnt1 /mnt/with\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue";
        let m = parse_line(line).expect("valid line");
        assert_eq!(m.id, 36);
        assert_eq!(m.parent_id, 35);
        assert_eq!(m.major_minor, "98:0");
        assert_eq!(m.root, PathBuf::from("/mnt1"));
        assert_eq!(m.mount_point, PathBuf::from("/mnt/with space"));
        assert_eq!(m.optional_fields, vec!["master:1".to_string()]);
        assert_eq!(m.fs_type, "ext3");
        assert_eq!(m.source, "/dev/root");
        assert_eq!(m.super_options, "rw,errors=continue");
    }

    #[test]
    fn decodes_tab_newline_and_backslash() {
        assert_eq!(unescape(r"a\011b\012c\134d"), b"a\tb\nc\\d".to_vec());
        assert_eq!(unescape(r"trailing\"), b"trailing\\".to_vec());
        assert_eq!(unescape(r"\99x"), b"\\99x".to_vec());
        assert_eq!(unescape(r"end\040"), b"end ".to_vec());
        assert_eq!(unescape(r"short\04"), b"short\\04".to_vec());
        assert_eq!(unescape(r"\777"), b"\\777".to_vec());
    }

    #[test]
    fn reads_this_process_mounts() {
        let mounts = read_self().expect("mountinfo readable");
        assert!(mounts.iter().any(|m| m.mount_point == Path::new("/")));
    }

    #[test]
    fn orders_deepest_first_and_upper_first() {
        let text = "\
1 0 8:1 / / rw - ext4 /dev/sda1 rw
2 1 0:5 / /t/a rw - tmpfs tmpfs rw
3 2 0:6 / /t/a/b/c rw - tmpfs tmpfs rw
4 2 0:7 / /t/a/b rw - tmpfs tmpfs rw
5 4 0:8 / /t/a/b rw - tmpfs tmpfs rw
6 1 0:9 / /t/ab rw - tmpfs tmpfs rw
";
        let mounts = parse(text);
        let ids: Vec<u64> = at_or_below(&mounts, Path::new("/t/a"))
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(ids, vec![3, 5, 4, 2]);
    }
}
