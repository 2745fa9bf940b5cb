//! The filesystem root every reading and writing of /proc, /sys and /etc goes through. It
//! lives in c1m-sys (`c1m_sys::procfs`), where the serve dashboard reads through it too; this
//! module re-exports it so the kernel's code and its users keep one path.

pub use c1m_sys::procfs::root::{
    normalize_value, parse_cpu_list, parse_limits_nofile, parse_meminfo, sysctl_rel_path, MemInfo,
    Nofile, Root,
};
