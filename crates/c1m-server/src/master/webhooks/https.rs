//! https:// webhook URLs: ureq's connection (pooling, HTTP/1.1) over the workspace's rustls
//! with the ring provider, trusting the system's CA roots or `--webhook-ca-file`. ureq's own
//! TLS feature would bring a second root store (webpki-roots) this server does not use; its
//! `TlsConnector` hook takes this adapter instead.

use anyhow::Context;
use rustls::pki_types::ServerName;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

/// The client configuration for an https:// backend: the CAs in `ca_file` when given, else the
/// system's roots. Errors name the file and what is wrong with it.
pub fn tls_config(ca_file: Option<&Path>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    match ca_file {
        Some(path) => {
            let pem = std::fs::read(path)
                .with_context(|| format!("--webhook-ca-file {}: cannot read", path.display()))?;
            crate::tls::client_config(Some(&pem), &format!("--webhook-ca-file {}", path.display()))
        }
        None => crate::tls::client_config(None, "--webhook-ca-file"),
    }
}

/// ureq's TLS hook over a rustls client configuration.
pub struct Connector(pub Arc<rustls::ClientConfig>);

impl ureq::TlsConnector for Connector {
    fn connect(
        &self,
        dns_name: &str,
        mut io: Box<dyn ureq::ReadWrite>,
    ) -> Result<Box<dyn ureq::ReadWrite>, ureq::Error> {
        // An IPv6 literal comes in brackets; the certificate names it without.
        let host = dns_name
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(dns_name);
        let name = ServerName::try_from(host)
            .map(|n| n.to_owned())
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("TLS: {host:?} is not a host name: {e}"),
                )
            })?;
        let mut conn = rustls::ClientConnection::new(Arc::clone(&self.0), name)
            .map_err(|e| io::Error::other(format!("TLS to {host}: {e}")))?;
        // The handshake now, so a refused certificate is this attempt's error (and retried).
        while conn.is_handshaking() {
            conn.complete_io(&mut io)
                .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake with {host}: {e}")))?;
        }
        Ok(Box::new(Stream(rustls::StreamOwned::new(conn, io))))
    }
}

struct Stream(rustls::StreamOwned<rustls::ClientConnection, Box<dyn ureq::ReadWrite>>);

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("inner", self.0.get_ref())
            .finish()
    }
}

impl ureq::ReadWrite for Stream {
    fn socket(&self) -> Option<&TcpStream> {
        self.0.get_ref().socket()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
