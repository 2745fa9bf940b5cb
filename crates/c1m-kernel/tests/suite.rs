//! All of c1m-kernel's integration tests in one binary (the same layout as crates/c1m/tests/suite.rs,
//! which says why). Run one file's tests with `cargo test --release -p c1m-kernel --test suite
//! NAME::`. A new test file needs a `mod` line here: `every_test_file_is_in_the_suite` fails
//! until it has one.

mod tune_support;

mod doctor_checks;
mod doctor_live;
mod sockets_bound_inactive;
mod sockets_live;
mod tune_apply;
mod tune_check;
mod tune_explain;
mod tune_plan;

#[path = "../../c1m/build_support/suite_guard.rs"]
mod suite_guard;

#[test]
fn every_test_file_is_in_the_suite() {
    suite_guard::check(
        include_str!("suite.rs"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests"),
    );
}
