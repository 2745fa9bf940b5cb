//! Test helpers for JWT auth: key files in a temporary directory, and tokens minted by an
//! implementation independent of the server's (`mint.py`: python3's hmac/hashlib, and the
//! openssl CLI for RS256/ES256/EdDSA).
#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// A 40-byte HMAC secret (the server wants at least 32).
pub const SECRET: &str = "c1m-test-secret-0123456789-abcdefghijklm";

/// A temporary directory removed on drop (also when a test panics).
pub struct Keys {
    pub dir: PathBuf,
}

impl Keys {
    pub fn new(tag: &str) -> Keys {
        // One directory per instance: tests running side by side may share a tag (the broker
        // tests' one helper does), and one's drop would delete the other's keys.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("c1m-auth-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), format!("{SECRET}\n")).unwrap();
        Keys { dir }
    }

    /// The HS256 secret file (`--jwt-key`).
    pub fn secret(&self) -> String {
        self.dir.join("secret").display().to_string()
    }

    /// Generates a key pair with the openssl CLI; returns (private PEM path, public PEM path).
    pub fn openssl_pair(&self, name: &str, genpkey_args: &[&str]) -> (PathBuf, PathBuf) {
        let private = self.dir.join(format!("{name}.key"));
        let public = self.dir.join(format!("{name}.pub"));
        run(Command::new("openssl")
            .arg("genpkey")
            .args(genpkey_args)
            .arg("-out")
            .arg(&private));
        run(Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public));
        (private, public)
    }

    /// An HS256 token with these claims, signed with [`SECRET`].
    pub fn hs256(&self, claims: &serde_json::Value) -> String {
        mint("HS256", &self.dir.join("secret"), claims)
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Signs `claims` with `alg` using `key` (secret file or private PEM) through mint.py.
pub fn mint(alg: &str, key: &Path, claims: &serde_json::Value) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/auth/mint.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(alg)
        .arg(key)
        .arg(claims.to_string())
        .output()
        .expect("python3 runs mint.py");
    assert!(
        out.status.success(),
        "mint.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("openssl is installed");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unix seconds now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `curl -s -o /dev/null -w %{http_code}` with extra arguments: the status code curl saw.
pub fn curl_status(args: &[&str]) -> u16 {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "3",
        ])
        .args(args)
        .output()
        .expect("curl is installed");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// `curl -s -i` with extra arguments: the whole answer (head and body) as text.
pub fn curl_answer(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "-i", "--max-time", "3"])
        .args(args)
        .output()
        .expect("curl is installed");
    String::from_utf8_lossy(&out.stdout).to_string()
}
