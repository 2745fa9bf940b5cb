//! Stamps the git commit into the binary as `C1M_GIT_COMMIT` for `c1m --version`: from the
//! environment variable of that name when set (container builds without .git pass it as a build
//! argument), else from `git`, else "unknown" (a source tarball builds fine).
//!
//! Also links the `c1m` executable as non-PIE (`-no-pie`). A position-independent executable
//! has its ~200 KiB of pointer tables (vtables, static string tables: `.data.rel.ro`)
//! patched by the dynamic loader at every start, which makes those pages private and dirty in
//! each process; `c1m serve` execs one process per worker (54 at the default
//! `--max-conns 1000000`), so that was ~11 MB of the fixed cost, ~11 B per subscriber at 1M
//! (issue 16; BENCHMARKS.md "Memory per idle subscriber at 1M"). Linked at a fixed address
//! those tables are resolved by the linker and stay clean pages of the file, shared by all
//! processes. The cost is that the executable's own image is not randomized (libraries,
//! heap, stack and mmap still are).

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
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
