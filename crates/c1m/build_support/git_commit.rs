//! Which git commit a build comes from, for `c1m --version`. Shared by build.rs and the test
//! tests/version_commit.rs (included by path in both), so the "no .git" answer is tested too.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What a build outside a git checkout (a source tarball, a container context without .git)
/// reports instead of a commit.
pub const UNKNOWN: &str = "unknown";

/// The environment variable that overrides detection (e.g. `docker build --build-arg`).
pub const OVERRIDE_ENV: &str = "C1M_GIT_COMMIT";

/// The 12-digit abbreviated commit of the checkout holding `dir`, or [`UNKNOWN`] when `dir` is
/// not in one or git is missing. (No `-dirty` mark: build.rs reruns only when HEAD moves, so a
/// mark taken at build time would go stale as soon as a file is edited.)
pub fn commit_of(dir: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => UNKNOWN.to_string(),
    }
}

/// Files whose change means HEAD moved: the checkout's HEAD, the ref it points to, and
/// packed-refs (worktrees keep HEAD in their own git dir, refs in the common one).
pub fn files_to_watch(dir: &Path) -> Vec<PathBuf> {
    let git = |args: &[&str]| -> Option<PathBuf> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    };
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ) else {
        return Vec::new();
    };
    let mut files = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
        if let Some(reference) = head.trim().strip_prefix("ref: ") {
            files.push(common.join(reference));
        }
    }
    files
}
