//! `c1m serve --check-config` and `--print-config` run as an operator would, before a restart:
//! the real binary, a real file, flags and environment together.

use std::process::Command;

fn c1m() -> Command {
    Command::new(env!("CARGO_BIN_EXE_c1m"))
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("c1m-serve-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_config_lists_every_problem_and_exits_2() {
    let bad = temp_file(
        "bad.toml",
        "max_conns = 0\nws_max_message = 0\nws_ping_interval = \"5s\"\nws_pong_timeout = \"10s\"\n",
    );
    let out = c1m()
        .args(["serve", "--check-config", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in ["--max-conns", "--ws-max-message", "--ws-ping-interval"] {
        assert!(err.contains(want), "{want} missing from: {err}");
    }

    // A key the server does not know is a problem too, named.
    let unknown = temp_file("unknown.toml", "max_conn = 10\n");
    let out = c1m()
        .args(["serve", "--check-config", "--config"])
        .arg(&unknown)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("max_conn"), "{err}");

    // Files named by the configuration are read as the start would read them.
    let missing_key = temp_file(
        "jwt.toml",
        "auth = \"required\"\njwt_key = \"/nonexistent/jwt.pem\"\n",
    );
    let out = c1m()
        .args(["serve", "--check-config", "--config"])
        .arg(&missing_key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/jwt.pem"), "{err}");

    let good = temp_file("good.toml", "max_conns = 1000\n");
    let out = c1m()
        .args(["serve", "--check-config", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn print_config_says_where_each_value_came_from() {
    let file = temp_file(
        "print.toml",
        "history_size = 7\nmax_conns = 5000\npublish_key = \"from-file\"\n",
    );
    let out = c1m()
        .args(["serve", "--print-config", "--max-conns", "6000", "--config"])
        .arg(&file)
        .env("C1M_GRACE", "9s")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.contains("max_conns = 6000  # flag --max-conns"),
        "{text}"
    );
    assert!(text.contains("grace = \"9s\"  # env C1M_GRACE"), "{text}");
    assert!(text.contains("history_size = 7  # file"), "{text}");
    assert!(
        text.contains("listen = \"0.0.0.0:8080\"  # default"),
        "{text}"
    );
    assert!(
        text.contains("# publish_key = (set, not shown)  # file"),
        "{text}"
    );
    assert!(!text.contains("from-file"), "{text}");
}

/// docs/CONFIG.md names every flag `c1m serve --help` lists (the generator test in
/// c1m-server keeps the texts equal; this one checks from the binary's side).
#[test]
fn config_reference_covers_every_flag_of_help() {
    let help = c1m().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/CONFIG.md"))
        .unwrap();
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches([',', '.', ')', ';']))
        .filter(|w| !["--help", "--config", "--check-config", "--print-config"].contains(w))
        .collect();
    // Only the flags that head an option line (not those mentioned inside help texts).
    let listed: Vec<&str> = flags
        .into_iter()
        .filter(|f| help.contains(&format!("      {f} ")))
        .collect();
    assert!(listed.len() > 20, "{listed:?}");
    for flag in listed {
        assert!(
            doc.contains(&format!("Flag `{flag}`")),
            "{flag} missing from docs/CONFIG.md"
        );
    }
}
