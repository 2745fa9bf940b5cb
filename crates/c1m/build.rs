//! Stamps the git commit into the binary as `C1M_GIT_COMMIT` for `c1m --version`: from the
//! environment variable of that name when set (container builds without .git pass it as a build
//! argument), else from `git`, else "unknown" (a source tarball builds fine).
//!
//! The executable is linked as a position-independent executable (rustc's default), so its own
//! image is randomized (ASLR) like its libraries, heap and stack: `c1m serve` parses untrusted
//! input from the network. The price is memory: the loader patches the ~235 KiB of pointer
//! tables (`.data.rel.ro` vtables and static string tables, `.got`) in each process at start,
//! which makes those pages private and dirty, and `c1m serve --max-conns 1000000` runs one
//! process per ~19,000 connections where the hard fd limit is 20,000 (54 processes). Measured
//! (BENCHMARKS.md, "Linked as PIE: the fixed cost"; `bench/pie-cost.sh`): Σ PSS of that idle
//! server 29.2 MiB as PIE vs 17.4 MiB linked `-no-pie`, 11.8 MiB more, ~12 B per connection at
//! 1M; a host whose fd limit allows one worker per CPU pays ~225 KiB per worker. Shrinking it
//! would mean fewer relocated pointers in the dependencies' tables, which no cheap change does.

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
