//! Per-object kernel memory, read from the running kernel's /proc/slabinfo where it can be
//! (root only: the file is 0400), else the figures measured on this project's box.
//!
//! Owns: parsing slabinfo and turning named caches into the sizes the memory math uses. The
//! named caches miss slab page slack and small kmalloc'ed pieces; the measured whole-slab
//! growth is 6 % above their sum (bench/object-sizes.sh on kernel 6.18: 3806 B per socket
//! against 3584 B named, 208 B per epoll watch against 192 B), so named sums get 1/16 added.

use serde::Serialize;

/// Kernel memory per object on this box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ObjSizes {
    /// An ESTABLISHED TCP socket with its descriptor: tcp_sock, sock_inode, dentry, filp.
    pub socket: u64,
    /// One epoll watch: epitem plus eppoll_entry.
    pub epoll_watch: u64,
    /// One TIME_WAIT socket (tw_sock_TCP).
    pub time_wait: u64,
    /// One conntrack entry (nf_conntrack).
    pub conntrack: u64,
    /// True when the figures come from this kernel's /proc/slabinfo.
    pub from_slab: bool,
}

impl ObjSizes {
    /// Measured with bench/object-sizes.sh on kernel 6.18.44, 2026-11-23 (docs/kernel.md):
    /// slab growth per socket 3806 B, per epoll watch 208 B; tw_sock_TCP and nf_conntrack
    /// objects are 256 B there.
    pub const MEASURED: ObjSizes = ObjSizes {
        socket: 3806,
        epoll_watch: 208,
        time_wait: 256,
        conntrack: 256,
        from_slab: false,
    };

    /// What one connection's socket costs with its epoll watch (c1m serve watches every one).
    pub fn per_socket(&self) -> u64 {
        self.socket + self.epoll_watch
    }
}

/// `sizeof(struct eppoll_entry)` on 64-bit kernels, for when its cache is merged into a
/// kmalloc cache and slabinfo does not name it.
const EPPOLL_ENTRY_BYTES: u64 = 64;

/// Object size of each named cache in slabinfo text (`name active num objsize ...`).
pub fn objsize(text: &str, cache: &str) -> Option<u64> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&cache))
        .and_then(|w| w.get(3)?.parse().ok())
}

/// Sizes from slabinfo text when it names the socket caches, else [`ObjSizes::MEASURED`].
pub fn sizes(slabinfo: Option<&str>) -> ObjSizes {
    let Some(text) = slabinfo else {
        return ObjSizes::MEASURED;
    };
    let get = |c: &str| objsize(text, c);
    let named = [
        get("TCP"),
        get("sock_inode_cache"),
        get("dentry"),
        get("filp"),
    ];
    if named.iter().any(Option::is_none) {
        return ObjSizes::MEASURED;
    }
    let slack = |n: u64| n + n / 16;
    let socket: u64 = named.iter().flatten().sum();
    let epi = get("eventpoll_epi").unwrap_or(128);
    let pwq = get("eventpoll_pwq").unwrap_or(EPPOLL_ENTRY_BYTES);
    ObjSizes {
        socket: slack(socket),
        epoll_watch: slack(epi + pwq),
        time_wait: get("tw_sock_TCP").unwrap_or(ObjSizes::MEASURED.time_wait),
        conntrack: get("nf_conntrack").unwrap_or(ObjSizes::MEASURED.conntrack),
        from_slab: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLABINFO: &str = "slabinfo - version: 2.1\n\
        # name <active_objs> <num_objs> <objsize> ...\n\
        nf_conntrack           0      0    320   16    1 : tunables 0 0 0 : slabdata 0 0 0\n\
        tw_sock_TCP           32     32    256   16    1 : tunables 0 0 0 : slabdata 2 2 0\n\
        TCP                   26     26   2368   13    8 : tunables 0 0 0 : slabdata 2 2 0\n\
        eventpoll_epi        288    288    128   32    1 : tunables 0 0 0 : slabdata 9 9 0\n\
        sock_inode_cache      76     76    832   19    4 : tunables 0 0 0 : slabdata 4 4 0\n\
        filp                 378    378    192   21    1 : tunables 0 0 0 : slabdata 18 18 0\n\
        dentry             64197  64197    192   21    1 : tunables 0 0 0 : slabdata 3057 3057 0\n";

    #[test]
    fn sizes_follow_the_running_kernel() {
        let s = sizes(Some(SLABINFO));
        // 2368 + 832 + 192 + 192 = 3584, + 1/16 = 3808.
        assert_eq!(s.socket, 3808);
        // eventpoll_pwq merged away: 128 + 64 = 192, + 12 = 204.
        assert_eq!(s.epoll_watch, 204);
        assert_eq!(s.time_wait, 256);
        assert_eq!(s.conntrack, 320);
        assert!(s.from_slab);
        // A bigger tcp_sock on another kernel shows up at once.
        let other = SLABINFO.replace("2368", "2496");
        assert_eq!(sizes(Some(&other)).socket, 3944);
    }

    #[test]
    fn unreadable_slabinfo_falls_back_to_the_measurement() {
        assert_eq!(sizes(None), ObjSizes::MEASURED);
        assert_eq!(sizes(Some("slabinfo - version: 2.1\n")), ObjSizes::MEASURED);
    }
}
