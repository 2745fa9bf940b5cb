//! All of c1m-proto's integration tests in one binary (the same layout as crates/c1m/tests/suite.rs,
//! which says why). Run one file's tests with `cargo test --release -p c1m-proto --test suite
//! NAME::`. A new test file needs a `mod` line here: `every_test_file_is_in_the_suite` fails
//! until it has one.

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod harness;

mod client_stress;
mod h2_python;
mod h2_stress;
mod http_stress;
mod ws_stress;
mod ws_tungstenite;

#[path = "../../c1m/build_support/suite_guard.rs"]
mod suite_guard;

#[test]
fn every_test_file_is_in_the_suite() {
    suite_guard::check(
        include_str!("suite.rs"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests"),
    );
}
