//! The filesystem root every reading and writing of /proc, /sys and /etc goes through.
//!
//! Owns: turning an absolute path such as `/proc/sys/net/ipv4/tcp_mem` into a path under the
//! chosen root (`/` on a live host, a temp directory in tests), sysctl keys to /proc/sys paths,
//! and the small parsers for /proc/meminfo, /sys/devices/system/cpu/online and
//! /proc/self/limits. Nothing here knows what a value *should* be; that is c1m-kernel's
//! `params` and `tune`.
//!
//! Why a type and not a bare `PathBuf`: so no code can forget the root and read the live host
//! from a test. Every helper takes the absolute path as the kernel documents it.
//!
//! API summary (shared by c1m-kernel's tune, doctor, sockets and top, and the serve dashboard):
//! - [`Root::new`], [`Root::live`], [`Root::path`]
//! - files: [`Root::read_to_string`], [`Root::read_opt`], [`Root::exists`],
//!   [`Root::list_dir`], [`Root::write_atomic`], [`Root::remove_file`]
//! - sysctls: [`sysctl_rel_path`], [`Root::read_sysctl`], [`Root::read_sysctl_raw`],
//!   [`Root::write_sysctl`], [`Root::has_sysctl`]
//! - host facts: [`Root::meminfo`], [`Root::cpus_online`], [`Root::page_size`],
//!   [`Root::self_nofile`]

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufRead};
use std::path::{Component, Path, PathBuf};

/// A directory that stands for `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    dir: PathBuf,
}

impl Default for Root {
    fn default() -> Self {
        Root::live()
    }
}

impl Root {
    /// A root at `dir` (a fake tree in tests, `/` live).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Root { dir: dir.into() }
    }

    /// The live host.
    pub fn live() -> Self {
        Root::new("/")
    }

    /// The directory standing for `/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True when this root is the live host's `/`.
    pub fn is_live(&self) -> bool {
        self.dir == Path::new("/")
    }

    /// Maps an absolute path (`/etc/sysctl.conf`) to its place under the root. A relative path is
    /// taken as relative to `/`. `..` components are refused so a key cannot escape the root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let mut out = self.dir.clone();
        for c in abs.as_ref().components() {
            if let Component::Normal(part) = c {
                out.push(part);
            }
        }
        out
    }

    /// Reads a whole text file under the root.
    pub fn read_to_string(&self, abs: impl AsRef<Path>) -> Result<String> {
        let p = self.path(abs);
        fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    }

    /// Reads a text file, `None` when it does not exist (a key this kernel lacks, a module not
    /// loaded); any other error is an error.
    pub fn read_opt(&self, abs: impl AsRef<Path>) -> Result<Option<String>> {
        let p = self.path(abs);
        match fs::read_to_string(&p) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    }

    /// Whether a path exists under the root.
    pub fn exists(&self, abs: impl AsRef<Path>) -> bool {
        self.path(abs).exists()
    }

    /// Regular files directly inside a directory, as absolute paths (root-relative), sorted by
    /// name the way sysctl.d and limits.d are applied. A missing directory is empty.
    pub fn list_dir(&self, abs: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
        let abs = abs.as_ref();
        let p = self.path(abs);
        let rd = match fs::read_dir(&p) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("listing {}", p.display())),
        };
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.with_context(|| format!("listing {}", p.display()))?;
            if entry.path().is_file() {
                names.push(entry.file_name());
            }
        }
        names.sort();
        Ok(names.into_iter().map(|n| abs.join(n)).collect())
    }

    /// Subdirectories directly inside a directory (root-relative, sorted); a missing
    /// directory has none. For systemd's `UNIT.d` drop-in directories.
    pub fn list_subdirs(&self, abs: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
        let abs = abs.as_ref();
        let p = self.path(abs);
        let rd = match fs::read_dir(&p) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("listing {}", p.display())),
        };
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.with_context(|| format!("listing {}", p.display()))?;
            if entry.path().is_dir() {
                names.push(entry.file_name());
            }
        }
        names.sort();
        Ok(names.into_iter().map(|n| abs.join(n)).collect())
    }

    /// Writes a file by writing a sibling temp file and renaming it over, creating parent
    /// directories, so a crash never leaves a half-written drop-in or state file.
    pub fn write_atomic(&self, abs: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        let p = self.path(abs);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let mut tmp = p.clone().into_os_string();
        tmp.push(".c1m-tmp");
        let tmp = PathBuf::from(tmp);
        fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &p).with_context(|| format!("renaming into {}", p.display()))
    }

    /// Removes a file; `false` when it was not there.
    pub fn remove_file(&self, abs: impl AsRef<Path>) -> Result<bool> {
        let p = self.path(abs);
        match fs::remove_file(&p) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("removing {}", p.display())),
        }
    }

    /// Whether the kernel under this root has the sysctl (its /proc/sys file exists).
    pub fn has_sysctl(&self, key: &str) -> bool {
        sysctl_rel_path(key).is_ok_and(|rel| self.path(rel).is_file())
    }

    /// Exact bytes of a sysctl file, `None` when the kernel lacks the key. Used to save values
    /// for a byte-for-byte revert.
    pub fn read_sysctl_raw(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let p = self.path(sysctl_rel_path(key)?);
        match fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading sysctl {key} at {}", p.display())),
        }
    }

    /// A sysctl's value with its whitespace normalised (`287898\t383866\t575796\n` becomes
    /// `287898 383866 575796`), `None` when the kernel lacks the key.
    pub fn read_sysctl(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .read_sysctl_raw(key)?
            .map(|b| normalize_value(&String::from_utf8_lossy(&b))))
    }

    /// Writes a sysctl's /proc/sys file in place (procfs files cannot be renamed over). Fails
    /// when the kernel lacks the key; callers that want "skip with a note" check
    /// [`Root::has_sysctl`] first.
    pub fn write_sysctl(&self, key: &str, value: &[u8]) -> Result<()> {
        let p = self.path(sysctl_rel_path(key)?);
        if !p.is_file() {
            bail!("sysctl {key} does not exist at {}", p.display());
        }
        fs::write(&p, value).with_context(|| format!("writing sysctl {key} at {}", p.display()))
    }

    /// /proc/meminfo as a map of field to bytes (`kB` fields are multiplied out; unitless
    /// fields such as HugePages_Total are kept as counts).
    pub fn meminfo(&self) -> Result<MemInfo> {
        let text = self.read_to_string("/proc/meminfo")?;
        Ok(parse_meminfo(&text))
    }

    /// Number of online CPUs from /sys/devices/system/cpu/online (`0-3,8-11`).
    pub fn cpus_online(&self) -> Result<usize> {
        Ok(self.cpu_ids_online()?.len())
    }

    /// The online CPUs' numbers, from /sys/devices/system/cpu/online (`0-3,8-11`).
    pub fn cpu_ids_online(&self) -> Result<Vec<u32>> {
        let text = self.read_to_string("/sys/devices/system/cpu/online")?;
        parse_cpu_ids(&text).context("parsing /sys/devices/system/cpu/online")
    }

    /// The kernel's base page size in bytes, from the first `KernelPageSize:` line of
    /// /proc/self/smaps (tcp_mem and sockstat count in these pages; 4096 on x86-64, 16 KiB or
    /// 64 KiB on some arm64 kernels, so it is read, never assumed).
    pub fn page_size(&self) -> Result<u64> {
        let p = self.path("/proc/self/smaps");
        let f = fs::File::open(&p).with_context(|| format!("opening {}", p.display()))?;
        for line in io::BufReader::new(f).lines() {
            let line = line.with_context(|| format!("reading {}", p.display()))?;
            if let Some(rest) = line.strip_prefix("KernelPageSize:") {
                return parse_kb(rest).with_context(|| format!("parsing {line:?}"));
            }
        }
        bail!("no KernelPageSize line in {}", p.display())
    }

    /// RLIMIT_NOFILE of the process reading (`/proc/self/limits`, "Max open files"), so a
    /// fake tree can stand in for the live one.
    pub fn self_nofile(&self) -> Result<Nofile> {
        let text = self.read_to_string("/proc/self/limits")?;
        parse_limits_nofile(&text).context("no \"Max open files\" line in /proc/self/limits")
    }
}

/// `net.ipv4.tcp_mem` → `/proc/sys/net/ipv4/tcp_mem`. Keys already written with `/` are taken
/// as paths (the sysctl(8) convention for names whose parts hold dots, e.g. VLAN interfaces).
pub fn sysctl_rel_path(key: &str) -> Result<PathBuf> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_' | '-'));
    if !ok {
        bail!("not a sysctl key: {key:?}");
    }
    let rel = if key.contains('/') {
        key.trim_matches('/').to_string()
    } else {
        key.replace('.', "/")
    };
    if rel.split('/').any(|part| part.is_empty() || part == "..") {
        bail!("not a sysctl key: {key:?}");
    }
    Ok(Path::new("/proc/sys").join(rel))
}

/// Collapses runs of whitespace to one space and trims, the way sysctl(8) prints values.
pub fn normalize_value(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// /proc/meminfo fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// Field name → value in bytes (or a bare count for unitless fields).
    pub fields: BTreeMap<String, u64>,
}

impl MemInfo {
    /// A field's value, e.g. `get("MemTotal")`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.fields.get(name).copied()
    }

    /// MemTotal in bytes.
    pub fn mem_total(&self) -> Result<u64> {
        self.get("MemTotal").context("no MemTotal in /proc/meminfo")
    }
}

/// Parses /proc/meminfo text.
pub fn parse_meminfo(text: &str) -> MemInfo {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let Some(Ok(n)) = parts.next().map(str::parse::<u64>) else {
            continue;
        };
        let v = match parts.next() {
            Some("kB") => n.saturating_mul(1024),
            _ => n,
        };
        fields.insert(name.trim().to_string(), v);
    }
    MemInfo { fields }
}

/// Counts CPUs in a kernel cpu list such as `0-3,8-11` or `0`.
pub fn parse_cpu_list(text: &str) -> Result<usize> {
    Ok(parse_cpu_ids(text)?.len())
}

/// The CPU numbers a kernel CPU list (`0-3,8-11`) names, in order.
pub fn parse_cpu_ids(text: &str) -> Result<Vec<u32>> {
    let text = text.trim();
    if text.is_empty() {
        bail!("empty cpu list");
    }
    let mut ids = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a
                    .trim()
                    .parse()
                    .with_context(|| format!("cpu range {part:?}"))?;
                let b: u32 = b
                    .trim()
                    .parse()
                    .with_context(|| format!("cpu range {part:?}"))?;
                if b < a {
                    bail!("cpu range {part:?} runs backwards");
                }
                ids.extend(a..=b);
            }
            None => ids.push(
                part.trim()
                    .parse::<u32>()
                    .with_context(|| format!("cpu {part:?}"))?,
            ),
        }
    }
    Ok(ids)
}

fn parse_kb(rest: &str) -> Result<u64> {
    let mut parts = rest.split_whitespace();
    let n: u64 = parts
        .next()
        .context("no number")?
        .parse()
        .context("bad number")?;
    match parts.next() {
        Some("kB") => Ok(n * 1024),
        Some(u) => bail!("unknown unit {u:?}"),
        None => Ok(n),
    }
}

/// A soft/hard RLIMIT_NOFILE pair; `None` stands for "unlimited".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nofile {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Finds "Max open files  <soft>  <hard>  files" in /proc/PID/limits text.
pub fn parse_limits_nofile(text: &str) -> Option<Nofile> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut parts = line["Max open files".len()..].split_whitespace();
    let mut limit = || -> Option<Option<u64>> {
        match parts.next()? {
            "unlimited" => Some(None),
            v => v.parse().ok().map(Some),
        }
    };
    Some(Nofile {
        soft: limit()?,
        hard: limit()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_paths() {
        assert_eq!(
            sysctl_rel_path("net.ipv4.tcp_mem").unwrap(),
            Path::new("/proc/sys/net/ipv4/tcp_mem")
        );
        assert_eq!(
            sysctl_rel_path("net/ipv4/conf/eth0.10/rp_filter").unwrap(),
            Path::new("/proc/sys/net/ipv4/conf/eth0.10/rp_filter")
        );
        assert!(sysctl_rel_path("net/../../etc/passwd").is_err());
        assert!(sysctl_rel_path("net.ipv4..x").is_err());
        assert!(sysctl_rel_path("a b").is_err());
    }

    #[test]
    fn path_stays_under_root() {
        let r = Root::new("/tmp/fake");
        assert_eq!(
            r.path("/etc/sysctl.conf"),
            Path::new("/tmp/fake/etc/sysctl.conf")
        );
        assert_eq!(r.path("/../etc/x"), Path::new("/tmp/fake/etc/x"));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), 2);
        assert_eq!(parse_cpu_list("0").unwrap(), 1);
        assert_eq!(parse_cpu_list("0-3,8-11").unwrap(), 8);
        assert!(parse_cpu_list("3-1").is_err());
        assert_eq!(
            parse_cpu_ids("0-3,6,8-9").unwrap(),
            vec![0, 1, 2, 3, 6, 8, 9]
        );
        assert_eq!(parse_cpu_ids("5\n").unwrap(), vec![5]);
        assert!(parse_cpu_ids("").is_err());
        assert!(parse_cpu_ids("x").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn meminfo_units() {
        let m = parse_meminfo("MemTotal:       24683656 kB\nHugePages_Total:       3\n");
        assert_eq!(m.mem_total().unwrap(), 24683656 * 1024);
        assert_eq!(m.get("HugePages_Total"), Some(3));
    }

    #[test]
    fn limits_line() {
        let t = "Limit                     Soft Limit           Hard Limit           Units\n\
                 Max open files            1024                 524288               files\n";
        assert_eq!(
            parse_limits_nofile(t),
            Some(Nofile {
                soft: Some(1024),
                hard: Some(524288)
            })
        );
        let u = "Max open files            unlimited            unlimited            files\n";
        assert_eq!(
            parse_limits_nofile(u),
            Some(Nofile {
                soft: None,
                hard: None
            })
        );
    }

    #[test]
    fn values_normalise() {
        assert_eq!(
            normalize_value("287898\t383866\t575796\n"),
            "287898 383866 575796"
        );
    }
}
