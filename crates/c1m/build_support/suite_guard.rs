//! The check behind each crate's `every_test_file_is_in_the_suite` test. With `autotests =
//! false` cargo no longer finds test files by itself, so a file under tests/ without a `mod`
//! line in tests/suite.rs would be silently skipped: this fails instead.

/// Panics naming every `tests/*.rs` file and `tests/*/mod.rs` directory that `suite_source`
/// (the text of tests/suite.rs) does not declare with a `mod NAME;` line.
pub fn check(suite_source: &str, tests_dir: &str) {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(tests_dir).expect("read tests/") {
        let path = entry.expect("tests/ entry").path();
        let module = if path.is_dir() && path.join("mod.rs").exists() {
            path.file_name().unwrap().to_string_lossy().into_owned()
        } else if path.extension().is_some_and(|e| e == "rs") {
            path.file_stem().unwrap().to_string_lossy().into_owned()
        } else {
            continue;
        };
        if module != "suite" && !suite_source.contains(&format!("\nmod {module};")) {
            missing.push(module);
        }
    }
    assert!(
        missing.is_empty(),
        "tests/suite.rs has no `mod` line for: {missing:?}"
    );
}
