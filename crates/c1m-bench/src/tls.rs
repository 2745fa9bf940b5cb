//! TLS for `https://` and `wss://` targets (rustls, the server's own TLS stack): the client
//! configuration, built once per process from `--ca FILE` or the system's roots, and
//! [`TlsIo`], which lets the workers' non-blocking read/write loops and the coordinator's
//! blocking HTTP client speak TLS with the same `Read`/`Write` calls they use on plain TCP.
//! The certificate is always verified: there is no switch to skip it; a test CA is named with
//! `--ca`.
//!
//! Memory: a `rustls::ClientConnection` is kept per TLS connection for its whole life (its
//! record buffers grow while a message passes and are reused, not freed), so a held TLS
//! connection costs bench several KB more than a plain one (docs/PROTOCOL.md has the figure).

use anyhow::{bail, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection};
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a TLS target needs, in the form that crosses to the workers (as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsTarget {
    /// The name the certificate must carry (the URL's host, or its IP address).
    pub server_name: String,
    /// PEM file of the CA(s) to trust instead of the system's roots (`--ca`).
    pub ca: Option<PathBuf>,
    /// Offer only `h2` by ALPN (`--http2` subscribers); otherwise no ALPN (HTTP/1.1).
    #[serde(default)]
    pub alpn_h2: bool,
}

/// A ready client configuration and the name to verify.
#[derive(Clone, Debug)]
pub struct Tls {
    pub target: TlsTarget,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl PartialEq for Tls {
    fn eq(&self, other: &Tls) -> bool {
        self.target == other.target
    }
}
impl Eq for Tls {}

impl Tls {
    /// Loads the roots and checks the name; errors say which file or name is wrong.
    pub fn new(target: TlsTarget) -> anyhow::Result<Tls> {
        let name = ServerName::try_from(target.server_name.clone()).with_context(|| {
            format!(
                "{:?} is not a name a TLS certificate can carry",
                target.server_name
            )
        })?;
        let config = client_config(target.ca.as_deref(), target.alpn_h2)?;
        Ok(Tls {
            target,
            config,
            name,
        })
    }

    /// A new client session (nothing is sent until the socket is written).
    pub fn connect(&self) -> io::Result<ClientConnection> {
        ClientConnection::new(self.config.clone(), self.name.clone()).map_err(io::Error::other)
    }
}

/// The host part of a URL authority (`host:port`, `[v6]:port`, `host`), for certificate checks.
pub fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

fn client_config(ca: Option<&Path>, alpn_h2: bool) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .with_context(|| format!("--ca {}: cannot read it", path.display()))?;
            for cert in certs {
                let cert = cert
                    .with_context(|| format!("--ca {}: not a PEM certificate", path.display()))?;
                roots.add(cert).with_context(|| {
                    format!("--ca {}: not a usable CA certificate", path.display())
                })?;
            }
            if roots.is_empty() {
                bail!("--ca {}: no certificate in the file", path.display());
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert); // one odd system certificate must not stop the rest
            }
            if roots.is_empty() {
                bail!("no system CA certificates found; name the CA with --ca FILE");
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut config = config;
    if alpn_h2 {
        config.alpn_protocols = vec![b"h2".to_vec()];
    }
    Ok(Arc::new(config))
}

/// A socket with an optional TLS session over it: `Read` yields plaintext, `Write` takes
/// plaintext. Works on blocking and non-blocking sockets (WouldBlock passes through).
pub struct TlsIo<'a, S: Read + Write> {
    pub sock: &'a mut S,
    pub tls: Option<&'a mut ClientConnection>,
}

impl<S: Read + Write> TlsIo<'_, S> {
    /// Sends what the session has queued (handshake, records); Ok when all went or the
    /// socket would block (the rest goes on the next writable event or call).
    pub fn push(&mut self) -> io::Result<()> {
        match self.tls.as_deref_mut() {
            Some(tls) => push(tls, self.sock),
            None => Ok(()),
        }
    }

    /// Whether queued session bytes wait for the socket.
    pub fn wants_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }
}

fn push(tls: &mut ClientConnection, sock: &mut impl Write) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(sock) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl<S: Read + Write> Read for TlsIo<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return self.sock.read(buf);
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n), // 0: the server closed the session cleanly
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let got = tls.read_tls(self.sock)?; // WouldBlock passes through
            let state = tls
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")))?;
            if got == 0 {
                // TCP EOF: what is still decrypted is delivered first, then EOF (a server
                // that closes without close_notify is still an end, not an error here).
                if state.plaintext_bytes_to_read() == 0 {
                    return Ok(0);
                }
                continue;
            }
            // Handshake answers (and the request buffered behind them) go out at once.
            push(tls, self.sock)?;
        }
    }
}

impl<S: Read + Write> Write for TlsIo<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return self.sock.write(buf);
        };
        // Buffered by the session (also before the handshake is done), then pushed.
        let n = tls.writer().write(buf)?;
        push(tls, self.sock)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push()?;
        if self.wants_write() {
            // Only a non-blocking socket stops early; a blocking one has written it all.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.sock.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_authorities() {
        assert_eq!(host_of("example.com:8443"), "example.com");
        assert_eq!(host_of("example.com"), "example.com");
        assert_eq!(host_of("127.0.0.1:1"), "127.0.0.1");
        assert_eq!(host_of("[::1]:443"), "::1");
    }

    #[test]
    fn a_bad_ca_file_is_named() {
        let t = TlsTarget {
            server_name: "localhost".into(),
            ca: Some("/nonexistent/ca.pem".into()),
            alpn_h2: false,
        };
        let e = format!("{:#}", Tls::new(t).unwrap_err());
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
