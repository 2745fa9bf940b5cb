//! Packaging: the systemd unit passes `systemd-analyze verify` and keeps its hardening, the
//! default config file starts a real server, and the .deb built by cargo-deb installs into this
//! (throwaway CI) system, runs `/usr/bin/c1m --version`, and is removed again.
//! Needs: systemd (systemd-analyze), dpkg, and cargo-deb (scripts/install-test-deps.sh).

use crate::common;

use common::{c1m, Server};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A temp directory removed even when an assertion fails.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("c1m-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(repo().join("dist/c1m.service")).unwrap();
    for line in [
        "Type=notify",
        "WatchdogSec=30",
        "LimitNOFILE=1048576",
        "ExecStart=/usr/bin/c1m serve --config /etc/c1m/c1m.toml",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "DynamicUser=yes",
        // Empty: the default port 8080 needs no capability.
        "CapabilityBoundingSet=",
    ] {
        assert!(unit.lines().any(|l| l == line), "unit lacks {line:?}");
    }
    // verify checks that ExecStart's binary exists: point it at the binary under test.
    let dir = TempDir::new("unit");
    let copy = dir.0.join("c1m.service");
    let rewritten = unit.replace("/usr/bin/c1m ", &format!("{} ", env!("CARGO_BIN_EXE_c1m")));
    assert_ne!(rewritten, unit);
    std::fs::write(&copy, rewritten).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .current_dir(&dir.0)
        .output()
        .expect("systemd-analyze (package systemd)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify warned: {stderr}"
    );

    // And the check has teeth: a misspelt directive is reported.
    std::fs::write(&copy, unit.replace("ProtectHome=yes", "ProtectHom=yes")).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .current_dir(&dir.0)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ProtectHom"), "typo not reported: {stderr}");
}

#[test]
fn default_config_file_starts_a_server() {
    let config = repo().join("dist/c1m.toml");
    let mut cmd = c1m();
    cmd.args(["serve", "--config"])
        .arg(&config)
        // Flags override the file: a loopback port and a small footprint for the test.
        .args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--max-conns",
            "1000",
        ]);
    let server = Server::spawn(cmd);
    let id = server.publish("pkg", b"hello");
    assert!(id > 0);
}

/// Removes the package even when an assertion fails (dpkg -P: the conffile too).
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["-P", "c1m"]).output();
    }
}

#[test]
fn deb_installs_runs_and_removes() {
    let out_dir = TempDir::new("deb");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // --no-build: the release binary this test run was built with (target/release/c1m).
    let out = Command::new(cargo)
        .args(["deb", "-p", "c1m", "--no-build", "--fast", "--output"])
        .arg(&out_dir.0)
        .current_dir(repo())
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "cargo deb failed (cargo-deb is installed by scripts/install-test-deps.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deb = std::fs::read_dir(&out_dir.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb in the output directory");
    let contents = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&deb)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&contents.stdout);
    for file in ["./usr/bin/c1m", "./etc/c1m/c1m.toml", "c1m.service"] {
        assert!(
            listing.contains(file),
            "{file} not in the package:\n{listing}"
        );
    }

    // cargo-deb's systemd snippets: daemon-reload on install, stop before removal.
    let info = Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    for script in ["postinst", "prerm", "postrm"] {
        assert!(info.contains(script), "no {script} in the package:\n{info}");
    }

    let _installed = Installed;
    let out = Command::new("dpkg").arg("-i").arg(&deb).output().unwrap();
    assert!(
        out.status.success(),
        "dpkg -i: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let installed = Command::new("/usr/bin/c1m")
        .arg("--version")
        .output()
        .unwrap();
    let ours = c1m().arg("--version").output().unwrap();
    assert!(installed.status.success());
    let version = String::from_utf8_lossy(&installed.stdout);
    assert!(version.starts_with("c1m 0."), "{version}");
    assert_eq!(version, String::from_utf8_lossy(&ours.stdout));
    assert!(Path::new("/etc/c1m/c1m.toml").exists());
    let unit = [
        "/lib/systemd/system/c1m.service",
        "/usr/lib/systemd/system/c1m.service",
    ];
    assert!(
        unit.iter().any(|u| Path::new(u).exists()),
        "unit not installed"
    );

    let out = Command::new("dpkg").args(["-P", "c1m"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!Path::new("/usr/bin/c1m").exists());
    assert!(!Path::new("/etc/c1m/c1m.toml").exists());
}
