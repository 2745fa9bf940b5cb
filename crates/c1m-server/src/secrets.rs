//! The key material a server runs with: the TLS certificate chain and private key
//! (`--tls-cert`, `--tls-key`) and the JWT verification key (`--jwt-key`), as bytes.
//!
//! The master reads and checks the files at start and on every accepted SIGHUP, and keeps the
//! last good bytes. Every worker it starts gets them as the first frame on its ipc link (never
//! in argv or the environment, which other local users can read), and every reload sends the
//! new ones before the new configuration. No worker reads these files itself: a worker
//! restarted after a reload was rejected (a half-written certificate during renewal, say)
//! serves with what the master runs, instead of failing on the file and crash-looping.

use crate::config::Config;
use anyhow::{bail, Context};

/// Largest total accepted (the bytes travel in one ipc frame, which allows 16 MiB).
pub const MAX_BYTES: usize = 4 * 1024 * 1024;

/// The running key material; `None` where the option is not set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    pub tls_cert: Option<Vec<u8>>,
    pub tls_key: Option<Vec<u8>>,
    pub jwt_key: Option<Vec<u8>>,
}

/// Never printed: only which parts are present and their sizes.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let len = |v: &Option<Vec<u8>>| v.as_ref().map(Vec::len);
        f.debug_struct("Secrets")
            .field("tls_cert_bytes", &len(&self.tls_cert))
            .field("tls_key_bytes", &len(&self.tls_key))
            .field("jwt_key_bytes", &len(&self.jwt_key))
            .finish()
    }
}

fn read(flag: &str, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {flag} {}", path.display()))
}

impl Secrets {
    /// Reads the files `cfg` names and checks them as the workers will use them (the
    /// certificate and key form a usable pair, the JWT key parses); errors name the file.
    pub fn read(cfg: &Config) -> anyhow::Result<Secrets> {
        let secrets = Secrets {
            tls_cert: cfg
                .tls_cert
                .as_deref()
                .map(|p| read("--tls-cert", p))
                .transpose()?,
            tls_key: cfg
                .tls_key
                .as_deref()
                .map(|p| read("--tls-key", p))
                .transpose()?,
            jwt_key: cfg
                .jwt_key
                .as_deref()
                .map(|p| read("--jwt-key", p))
                .transpose()?,
        };
        let total: usize = [&secrets.tls_cert, &secrets.tls_key, &secrets.jwt_key]
            .iter()
            .filter_map(|v| v.as_ref().map(Vec::len))
            .sum();
        if total > MAX_BYTES {
            bail!("key files of {total} bytes together; at most {MAX_BYTES} are accepted");
        }
        secrets.tls_configs(cfg)?;
        if let (Some(path), Some(bytes)) = (&cfg.jwt_key, &secrets.jwt_key) {
            crate::auth::key::Verifier::from_bytes(bytes)
                .with_context(|| format!("--jwt-key {}", path.display()))
                .context("loading the JWT key")?;
        }
        Ok(secrets)
    }

    /// The TLS configurations built from these bytes (`cfg` names the files in errors);
    /// None when TLS is off.
    pub fn tls_configs(&self, cfg: &Config) -> anyhow::Result<Option<crate::tls::Configs>> {
        match (&self.tls_cert, &self.tls_key, &cfg.tls_cert, &cfg.tls_key) {
            (Some(cert), Some(key), Some(cert_path), Some(key_path)) => {
                crate::tls::from_pem(cert, key, cert_path, key_path, !cfg.no_http2).map(Some)
            }
            _ => Ok(None),
        }
    }
}
