//! Validation of what dockerd (or anyone on the socket) names: volume names, which become a
//! directory under the mount root and so must never contain `/`, start with `.`, or be long; and
//! mount IDs, which are opaque keys (dockerd sends 64 hex digits) but are bounded and printable.

use crate::Error;

/// The longest accepted volume name (bytes). Docker itself allows long names; 200 keeps the mount
/// point path far below `PATH_MAX` and a single component below `NAME_MAX` (255).
pub const MAX_NAME_LEN: usize = 200;

/// The longest accepted mount ID (bytes).
pub const MAX_ID_LEN: usize = 128;

/// Check a volume name: Docker's own rule for local volume names, `[A-Za-z0-9][A-Za-z0-9_.-]*`,
/// at most [`MAX_NAME_LEN`] bytes. No `/`, and no leading `.` (so never `.` or `..`): the name is a
/// single path component strictly inside the mount root.
pub fn validate_name(name: &str) -> Result<(), Error> {
    let bad = |reason| {
        Err(Error::InvalidName {
            name: name.chars().take(MAX_NAME_LEN + 8).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 200 bytes");
    }
    let mut chars = name.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphanumeric()) {
        return bad("must start with a letter or digit");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        return bad("only letters, digits, '_', '.' and '-' are allowed");
    }
    Ok(())
}

/// Check a mount ID: 1 to [`MAX_ID_LEN`] bytes of ASCII letters, digits, `_`, `.`, `-` or `:`.
pub fn validate_id(id: &str) -> Result<(), Error> {
    let bad = |reason| {
        Err(Error::InvalidId {
            id: id.chars().take(MAX_ID_LEN + 8).collect(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("empty");
    }
    if id.len() > MAX_ID_LEN {
        return bad("longer than 128 bytes");
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':'))
    {
        return bad("only letters, digits, '_', '.', '-' and ':' are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["v1", "berth-0123456789ab-efs", "a.b_c-d", "9"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "", ".", "..", "../x", "a/b", "/abs", ".hidden", "a b", "é", "a\nb", &long,
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ids() {
        assert!(validate_id(&"f".repeat(64)).is_ok());
        for bad in ["", "a/b", "a b", &"x".repeat(MAX_ID_LEN + 1)] {
            assert!(validate_id(bad).is_err(), "{bad:?}");
        }
    }
}
