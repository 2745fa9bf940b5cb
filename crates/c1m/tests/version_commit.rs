//! `c1m --version` names the version and the git commit the binary was built from, and a build
//! outside any git checkout (a source tarball) says "unknown" instead of failing.

#[path = "../build_support/git_commit.rs"]
#[allow(dead_code)] // OVERRIDE_ENV is build.rs's
mod git_commit;

use std::path::Path;
use std::process::Command;

#[test]
fn version_shows_crate_version_and_head_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let head = git_commit::commit_of(manifest);
    // CI runs from a clone, so the commit is known there; `unknown` here would mean build.rs
    // failed to find it.
    assert_ne!(head, git_commit::UNKNOWN, "tests run from a git checkout");
    assert_eq!(head.len(), 12, "{head}");
    assert_eq!(
        text.trim(),
        format!("c1m {} (commit {head})", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn outside_a_checkout_the_commit_is_unknown() {
    // A directory with no .git anywhere above it: /tmp is outside every checkout here.
    let dir = std::env::temp_dir().join(format!("c1m-tarball-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(git_commit::commit_of(&dir), git_commit::UNKNOWN);
    assert!(git_commit::files_to_watch(&dir).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
