//! All of c1m's integration tests in one binary: the harness (common/, ureq, tungstenite,
//! rustls) is compiled and linked once instead of once per file. Measured on the 2-core box
//! (release, after touching common/mod.rs, 2026-11-23T19:15Z, a few builds running beside):
//! 43 binaries 2m31 wall / 1m53 CPU, this one 1m03 wall / 40 s CPU.
//! Each file below is one module; run one with `cargo test --release -p c1m --test suite
//! serve_auth::`. A new test file needs a `mod` line here: `every_test_file_is_in_the_suite`
//! fails until it has one. Tests of different files now share one process: none may change
//! process-wide state another depends on (they raise RLIMIT_NOFILE to the hard limit, nothing
//! else).

mod auth;
mod browser;
mod common;
mod redis_support;
mod tls_support;

mod bench_fleet;
mod bench_http2;
mod bench_loopback;
mod bench_nchan;
mod bench_reconnect_storm;
mod bench_serve;
mod bench_soak;
mod bench_tls;
mod build_outputs;
mod conns_flag;
mod doctor_live;
mod serve_ack_priority;
mod serve_api;
mod serve_auth;
mod serve_backpressure;
mod serve_broker_control;
mod serve_broker_dead_link;
mod serve_broker_unavailable;
mod serve_browser;
mod serve_browser_auth;
mod serve_cluster;
mod serve_cluster_auth;
mod serve_cluster_tls;
mod serve_config;
mod serve_cors_admin;
mod serve_dashboard;
mod serve_edge;
mod serve_fixed_cost;
mod serve_heartbeat_skip;
mod serve_heartbeat_sweep;
mod serve_history_memory;
mod serve_http2;
mod serve_http2_websocket;
mod serve_http_framing;
mod serve_identity;
mod serve_idle;
mod serve_io_uring;
mod serve_js_client;
mod serve_lifecycle;
mod serve_limits;
mod serve_logs;
mod serve_many_channels;
mod serve_metrics;
mod serve_metrics_tls;
mod serve_namespaces;
mod serve_operations;
mod serve_packaging;
mod serve_per_ip;
mod serve_pipelining;
mod serve_presence;
mod serve_protocols;
mod serve_proxy;
mod serve_publish_idempotency;
mod serve_publish_move;
mod serve_reads;
mod serve_redis_cluster;
mod serve_redis_failover;
mod serve_resume_gaps;
mod serve_scale;
mod serve_smuggling_haproxy;
mod serve_steering;
mod serve_systemd_notify;
mod serve_tls;
mod serve_upgrade;
mod serve_webhooks;
mod serve_websocket;
mod top_plain;
mod top_tui;
mod version_commit;

#[path = "../build_support/suite_guard.rs"]
mod suite_guard;

#[test]
fn every_test_file_is_in_the_suite() {
    suite_guard::check(
        include_str!("suite.rs"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests"),
    );
}
