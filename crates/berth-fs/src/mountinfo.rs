//! Parsing `/proc/self/mountinfo` (proc(5)): one mount per line, octal escapes (`\040` for a space,
//! `\011` tab, `\012` newline, `\134` backslash) decoded in paths.
//!
//! Hand-written: no maintained crate parses mountinfo with the escapes and the optional fields the
//! way berth needs, and the format is ten lines of rules.

use std::path::PathBuf;

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: u32,
    pub parent_id: u32,
    pub major_minor: String,
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub options: String,
    pub fs_type: String,
    pub source: String,
}

/// Decode mountinfo's octal escapes (`\NNN`); anything else is kept as is.
pub fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
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

fn path(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(unescape(field)))
}

/// Parse one line; None when it is not a well-formed mountinfo line.
pub fn parse_line(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 2 {
        return None;
    }
    Some(Mount {
        id: l[0].parse().ok()?,
        parent_id: l[1].parse().ok()?,
        major_minor: l[2].to_string(),
        root: path(l[3]),
        mount_point: path(l[4]),
        options: l[5].to_string(),
        fs_type: r[0].to_string(),
        source: String::from_utf8_lossy(&unescape(r[1])).into_owned(),
    })
}

/// Parse a whole mountinfo text, skipping malformed lines.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

/// The calling process's mounts.
pub fn read_self() -> std::io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
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
        assert_eq!(m.fs_type, "ext3");
        assert_eq!(m.source, "/dev/root");
    }

    #[test]
    fn decodes_tab_newline_and_backslash() {
        assert_eq!(unescape(r"a\011b\012c\134d"), b"a\tb\nc\\d".to_vec());
        assert_eq!(unescape(r"trailing\"), b"trailing\\".to_vec());
        assert_eq!(unescape(r"\99x"), b"\\99x".to_vec());
    }

    #[test]
    fn reads_this_process_mounts() {
        let mounts = read_self().expect("mountinfo readable");
        assert!(mounts.iter().any(|m| m.mount_point == std::path::Path::new("/")));
    }
}
