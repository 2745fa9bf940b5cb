//! RLIMIT_NOFILE: read it and raise the soft limit to the hard one (redis' adjustOpenFilesLimit
//! habit). Hosts where the hard limit cannot be raised (no CAP_SYS_RESOURCE) are why c1m splits
//! into processes.

use crate::cvt;
use std::io;

/// Soft and hard RLIMIT_NOFILE of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Reads RLIMIT_NOFILE.
pub fn nofile() -> io::Result<NofileLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the duration of the call.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok(NofileLimit {
        soft: lim.rlim_cur,
        hard: lim.rlim_max,
    })
}

/// Raises the soft RLIMIT_NOFILE to the hard limit and returns the new limits.
pub fn raise_nofile_to_hard() -> io::Result<NofileLimit> {
    let cur = nofile()?;
    if cur.soft < cur.hard {
        let lim = libc::rlimit {
            rlim_cur: cur.hard,
            rlim_max: cur.hard,
        };
        // SAFETY: `lim` is a valid rlimit read only by the call.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    }
    nofile()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_reaches_hard_limit() {
        let after = raise_nofile_to_hard().unwrap();
        assert_eq!(after.soft, after.hard);
    }
}
