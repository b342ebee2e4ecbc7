//! A Linux error number that prints as its symbolic name (`EBUSY`), which is what operators grep
//! for and what berth's refusal messages show (`… is still mounted (EBUSY)`).
//!
//! Hand-written: neither `std` nor `rustix` gives the symbolic name of an errno (they print the
//! `strerror` text), and pulling in `nix` for a name table is not worth it. Only the errors the
//! filesystem calls here can return are named; any other prints as `errno N`.

use std::fmt;

/// A raw `errno` value from a failed system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// `EBUSY`: the mount is in use (an open file, a working directory, a submount).
    pub const BUSY: Errno = Errno(16);
    /// `EINVAL`: for an unmount, nothing is mounted there.
    pub const INVAL: Errno = Errno(22);
    /// `ENOENT`: no such file or directory.
    pub const NOENT: Errno = Errno(2);

    /// The errno of a `rustix` error.
    pub fn from_rustix(e: rustix::io::Errno) -> Errno {
        Errno(e.raw_os_error())
    }

    /// The errno of a `std` error (`EIO` when it carries none).
    pub fn from_io(e: &std::io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(5))
    }

    /// The symbolic name (`EBUSY`), when it is one of those berth-fs can meet.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "EPERM",
            2 => "ENOENT",
            4 => "EINTR",
            5 => "EIO",
            9 => "EBADF",
            12 => "ENOMEM",
            13 => "EACCES",
            15 => "ENOTBLK",
            16 => "EBUSY",
            17 => "EEXIST",
            18 => "EXDEV",
            20 => "ENOTDIR",
            21 => "EISDIR",
            22 => "EINVAL",
            23 => "ENFILE",
            24 => "EMFILE",
            28 => "ENOSPC",
            30 => "EROFS",
            36 => "ENAMETOOLONG",
            38 => "ENOSYS",
            39 => "ENOTEMPTY",
            40 => "ELOOP",
            95 => "EOPNOTSUPP",
            116 => "ESTALE",
            _ => return None,
        })
    }

    /// The system's description (`Device or resource busy`).
    pub fn message(self) -> String {
        let text = std::io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)"; the name already identifies it.
        match text.rfind(" (os error ") {
            Some(i) => text[..i].to_string(),
            None => text,
        }
    }
}

impl fmt::Display for Errno {
    /// `EBUSY`, or `errno 123` for one without a name here.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl From<rustix::io::Errno> for Errno {
    fn from(e: rustix::io::Errno) -> Self {
        Errno::from_rustix(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_kernel_numbers() {
        for (e, name) in [
            (rustix::io::Errno::BUSY, "EBUSY"),
            (rustix::io::Errno::XDEV, "EXDEV"),
            (rustix::io::Errno::LOOP, "ELOOP"),
            (rustix::io::Errno::NOTDIR, "ENOTDIR"),
            (rustix::io::Errno::NOTEMPTY, "ENOTEMPTY"),
            (rustix::io::Errno::INVAL, "EINVAL"),
            (rustix::io::Errno::NOENT, "ENOENT"),
            (rustix::io::Errno::PERM, "EPERM"),
            (rustix::io::Errno::ACCESS, "EACCES"),
            (rustix::io::Errno::ISDIR, "EISDIR"),
            (rustix::io::Errno::NOSYS, "ENOSYS"),
            (rustix::io::Errno::ROFS, "EROFS"),
            (rustix::io::Errno::MFILE, "EMFILE"),
            (rustix::io::Errno::NOTSUP, "EOPNOTSUPP"),
            (rustix::io::Errno::STALE, "ESTALE"),
        ] {
            assert_eq!(Errno::from(e).to_string(), name);
        }
        assert_eq!(Errno(4095).to_string(), "errno 4095");
        assert_eq!(Errno::from(rustix::io::Errno::INVAL), Errno::INVAL);
        assert_eq!(Errno::from(rustix::io::Errno::NOENT), Errno::NOENT);
        assert_eq!(Errno::BUSY.message(), "Device or resource busy");
    }
}
