//! Error kinds by name: errno values get their symbolic names (EADDRNOTAVAIL, ECONNREFUSED…)
//! so reports can be compared across runs and hosts; protocol and timeout kinds are strings.

use std::collections::BTreeMap;
use std::io;

/// Counts per error kind.
pub type ErrorCounts = BTreeMap<String, u64>;

pub fn errno_name(code: i32) -> String {
    let name = match code {
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ECONNRESET => "ECONNRESET",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::EPIPE => "EPIPE",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::EAGAIN => "EAGAIN",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EINVAL => "EINVAL",
        libc::ENOTCONN => "ENOTCONN",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::ENOSPC => "ENOSPC",
        _ => return format!("errno {code}"),
    };
    name.to_string()
}

/// The kind name of an I/O error: its errno name, or its std kind when it has no errno.
pub fn io_kind(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => errno_name(code),
        // A TLS failure says what failed (an unknown issuer, a wrong name), not "InvalidData".
        None if e.to_string().starts_with("TLS: ") => e.to_string(),
        None => format!("{:?}", e.kind()),
    }
}

pub fn bump(counts: &mut ErrorCounts, kind: &str) {
    match counts.get_mut(kind) {
        Some(n) => *n += 1,
        None => {
            counts.insert(kind.to_string(), 1);
        }
    }
}

pub fn merge(into: &mut ErrorCounts, from: &ErrorCounts) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(errno_name(libc::EADDRNOTAVAIL), "EADDRNOTAVAIL");
        assert_eq!(
            io_kind(&io::Error::from_raw_os_error(libc::ECONNREFUSED)),
            "ECONNREFUSED"
        );
        assert_eq!(errno_name(9999), "errno 9999");
        let mut c = ErrorCounts::new();
        bump(&mut c, "X");
        bump(&mut c, "X");
        assert_eq!(c["X"], 2);
    }
}
