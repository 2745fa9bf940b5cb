//! TLS set-up (`--tls-cert`, `--tls-key`): reads the PEM files and builds the rustls server
//! configurations the workers hand to each new connection. The master calls [`load`] at start
//! and on SIGHUP to check the files (a bad file is a start-up error, or a refused reload); each
//! worker calls it again to take the new certificate for its next handshakes, while connections
//! already established keep the keys they negotiated. The byte paths (handshake, encryption)
//! live in `worker::tls_session`.
//!
//! rustls with the `ring` provider: a well-kept, memory-safe TLS stack whose unbuffered API lets
//! the worker own every buffer (and drop it while a connection is idle), which OpenSSL's or
//! rustls' own buffered connection would keep allocated per connection.

use anyhow::{bail, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerConfig;
use std::path::Path;
use std::sync::Arc;

/// ALPN protocol offered on the HTTP listener (SSE, WebSocket and long-poll all ride HTTP/1.1).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";
/// HTTP/2 over TLS, offered before [`ALPN_HTTP1`] unless `--no-http2`.
pub const ALPN_H2: &[u8] = b"h2";

/// The two listeners' TLS configurations: the same certificate, ALPN `h2` and `http/1.1` (or
/// `http/1.1` alone with `--no-http2`) on the HTTP listener and no ALPN on the raw TCP line-protocol listener (it speaks no HTTP).
#[derive(Clone)]
pub struct Configs {
    pub http: Arc<ServerConfig>,
    pub tcp: Arc<ServerConfig>,
}

/// Reads and checks the certificate chain and private key, and builds both configurations.
/// Errors name the file and what is wrong with it. `http2`: ALPN offers `h2` first.
pub fn load(cert: &Path, key: &Path, http2: bool) -> anyhow::Result<Configs> {
    let cert_pem = std::fs::read(cert)
        .with_context(|| format!("--tls-cert {}: cannot read", cert.display()))?;
    let key_pem =
        std::fs::read(key).with_context(|| format!("--tls-key {}: cannot read", key.display()))?;
    from_pem(&cert_pem, &key_pem, cert, key, http2)
}

/// As [`load`], from the files' bytes (`cert` and `key` name them in errors): a worker builds
/// its configurations from the bytes the master read and sent it.
pub fn from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert: &Path,
    key: &Path,
    http2: bool,
) -> anyhow::Result<Configs> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("--tls-cert {}: malformed PEM", cert.display()))?;
    if chain.is_empty() {
        bail!(
            "--tls-cert {}: no CERTIFICATE block found (expected a PEM certificate chain, leaf \
             first)",
            cert.display()
        );
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| {
            format!(
                "--tls-key {}: no usable PEM private key (PKCS#8, PKCS#1 or SEC1)",
                key.display()
            )
        })?;
    let build = |alpn: &[&[u8]]| -> anyhow::Result<Arc<ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(chain.clone(), private.clone_key())
            .with_context(|| {
                format!(
                    "--tls-cert {} with --tls-key {}: certificate and key are not a usable pair",
                    cert.display(),
                    key.display()
                )
            })?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    };
    Ok(Configs {
        http: build(if http2 {
            &[ALPN_H2, ALPN_HTTP1]
        } else {
            &[ALPN_HTTP1]
        })?,
        tcp: build(&[])?,
    })
}
/// A client configuration for an outgoing TLS connection (the Redis broker, https webhooks):
/// trusting the CA certificates in `ca_pem` when given, else the system's roots. `source` names
/// where they came from (`--broker-ca`, `--webhook-ca-file PATH`) in every error.
pub fn client_config(
    ca_pem: Option<&[u8]>,
    source: &str,
) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert
                    .map_err(|e| anyhow::anyhow!("{e}"))
                    .with_context(|| format!("{source}: malformed PEM"))?;
                roots
                    .add(cert)
                    .with_context(|| format!("{source}: not a usable CA certificate"))?;
            }
            if roots.is_empty() {
                bail!("{source}: no CERTIFICATE block found");
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert); // one odd system certificate must not stop the rest
            }
            if roots.is_empty() {
                bail!("no system CA certificates found; name the CA with {source}");
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
