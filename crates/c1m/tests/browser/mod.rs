//! Headless Chromium for the browser tests (Debian package `chromium`, and `certutil` from
//! libnss3-tools, both installed by scripts/install-test-deps.sh): one set of flags, a HOME and
//! profile of its own under the temp dir (so its NSS trust store is the test's), killed and
//! removed on drop even when an assertion fails.
#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Browser {
    child: Child,
    home: PathBuf,
}

impl Browser {
    /// Opens `url`; `tag` names the temp HOME (one per test file and process).
    pub fn open(url: &str, tag: &str) -> Browser {
        Browser::open_with(url, tag, &[], None)
    }

    /// Opens `url` with `extra_args` after the common flags; with `trusted_ca`, that CA is
    /// imported into the browser's NSS database first, the way a user's browser trusts a real
    /// one (certificate checks stay on).
    pub fn open_with(
        url: &str,
        tag: &str,
        extra_args: &[&str],
        trusted_ca: Option<&Path>,
    ) -> Browser {
        let home = std::env::temp_dir().join(format!("c1m-chromium-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        let nssdb = home.join(".pki/nssdb");
        std::fs::create_dir_all(&nssdb).unwrap();
        if let Some(ca) = trusted_ca {
            let db = format!("sql:{}", nssdb.display());
            certutil(&["-d", &db, "-N", "--empty-password"]);
            let ca = ca.to_str().unwrap();
            certutil(&["-d", &db, "-A", "-t", "C,,", "-n", "c1m test CA", "-i", ca]);
        }
        let profile = format!("--user-data-dir={}", home.join("profile").display());
        let child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                // Keeps the headless browser running (and lets a test drive it over DevTools).
                "--remote-debugging-port=0",
                &profile,
            ])
            .args(extra_args)
            .arg(url)
            .env("HOME", &home)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium is installed by scripts/install-test-deps.sh");
        Browser { child, home }
    }

    /// The profile directory (Chromium writes `DevToolsActivePort` there).
    pub fn profile(&self) -> PathBuf {
        self.home.join("profile")
    }
}

fn certutil(args: &[&str]) {
    let out = Command::new("certutil")
        .args(args)
        .output()
        .expect("certutil (libnss3-tools) is installed by scripts/install-test-deps.sh");
    assert!(out.status.success(), "certutil {args:?}: {out:?}");
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}
