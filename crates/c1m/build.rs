//! Stamps the git commit into the binary as `C1M_GIT_COMMIT` for `c1m --version`: from the
//! environment variable of that name when set (container builds without .git pass it as a build
//! argument), else from `git`, else "unknown" (a source tarball builds fine).

#[path = "build_support/git_commit.rs"]
mod git_commit;

fn main() {
    println!("cargo:rerun-if-env-changed={}", git_commit::OVERRIDE_ENV);
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let commit = match std::env::var(git_commit::OVERRIDE_ENV) {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            for file in git_commit::files_to_watch(&dir) {
                println!("cargo:rerun-if-changed={}", file.display());
            }
            git_commit::commit_of(&dir)
        }
    };
    println!("cargo:rustc-env=C1M_GIT_COMMIT={commit}");
}
