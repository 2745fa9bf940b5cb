//! TLS test support, reusable by any test file (`mod tls_support;`): a throw-away test CA with
//! leaf certificates for 127.0.0.1 / localhost / ::1 written as PEM files (rcgen), a rustls
//! client that trusts only that CA, and a `c1m serve --tls-cert …` harness whose /status and
//! publish go over TLS. The PEM files suit any client: curl `--cacert`, `openssl s_client
//! -CAfile`, or a browser (import `TestPki::ca_pem` into its trust store, or pin the leaf's
//! key with Chromium's `--ignore-certificate-errors-spki-list`, computed from `Leaf::cert`).
#![allow(dead_code)] // each test file uses a different part
                     // Needs `mod common;` beside it in the test file (the banner parser lives there).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A test CA on disk (`dir/ca.pem`) and the leaves it issued. The directory goes on drop.
pub struct TestPki {
    pub dir: PathBuf,
    pub ca_pem: PathBuf,
    ca_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate and its key, as PEM files, and the DER to compare with what a client saw.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub der: CertificateDer<'static>,
}

impl TestPki {
    /// A new CA in a fresh temporary directory named after `tag` and this process.
    pub fn new(tag: &str) -> TestPki {
        let dir = std::env::temp_dir().join(format!("c1m-pki-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "c1m test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, cert.pem()).unwrap();
        TestPki {
            dir,
            ca_pem,
            ca_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// Issues a leaf for 127.0.0.1, ::1 and localhost with common name `name`, written as
    /// `dir/NAME.pem` and `dir/NAME.key`.
    pub fn leaf(&self, name: &str) -> Leaf {
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])
        .unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let leaf = Leaf {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
            der: cert.der().clone(),
        };
        std::fs::write(&leaf.cert, cert.pem()).unwrap();
        std::fs::write(&leaf.key, key.serialize_pem()).unwrap();
        leaf
    }

    /// A rustls client configuration that trusts this CA only (ALPN: `alpn` if given).
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// A finished TLS connection to `addr` (server name 127.0.0.1), 5 s read timeout.
    pub fn connect(&self, addr: SocketAddr) -> TlsStream {
        self.connect_with(addr, &[b"http/1.1"])
    }

    pub fn connect_with(&self, addr: SocketAddr, alpn: &[&[u8]]) -> TlsStream {
        self.try_connect(addr, alpn).expect("TLS connection")
    }

    pub fn try_connect(&self, addr: SocketAddr, alpn: &[&[u8]]) -> std::io::Result<TlsStream> {
        let tcp = TcpStream::connect(addr)?;
        tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
        let name = ServerName::IpAddress(addr.ip().into());
        let conn = rustls::ClientConnection::new(self.client_config(alpn), name).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(stream)
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// One HTTP/1.1 request over a new TLS connection (`Connection: close`); the whole answer.
pub fn https(pki: &TestPki, addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> String {
    try_https(pki, addr, method, path, body).expect("HTTPS request")
}

pub fn try_https(
    pki: &TestPki,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<String> {
    let mut s = pki.try_connect(addr, &[b"http/1.1"])?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    s.flush()?;
    let mut out = Vec::new();
    // The server ends with close_notify; no tolerance for a truncated answer.
    s.read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `c1m serve --listen 127.0.0.1:0 --tls-cert … --tls-key … ARGS…`, killed on drop.
pub struct TlsServer {
    pub child: Child,
    pub http: SocketAddr,
    pub tcp: Option<SocketAddr>,
}

impl TlsServer {
    pub fn start(leaf: &Leaf, pki: &TestPki, args: &[&str]) -> TlsServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_c1m"))
            .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(&leaf.cert)
            .arg("--tls-key")
            .arg(&leaf.key)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn c1m serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some((http, tcp)) = crate::common::parse_banner(&line) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("unexpected first line from c1m serve: {line:?}");
        };
        assert!(line.contains("TLS"), "banner does not say TLS: {line:?}");
        let server = TlsServer { child, http, tcp };
        server.wait_status(pki, |s| {
            s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["pid"].as_u64() != Some(0))
        });
        server
    }

    pub fn status(&self, pki: &TestPki) -> serde_json::Value {
        let answer = https(pki, self.http, "GET", "/status", b"");
        let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
        serde_json::from_str(body).unwrap()
    }

    /// Polls /status (over TLS) until `pred` holds, at most 10 s.
    pub fn wait_status(
        &self,
        pki: &TestPki,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Workers bind their listeners after the banner: refused at first.
            match try_https(pki, self.http, "GET", "/status", b"") {
                Ok(answer) => {
                    let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
                    let v: serde_json::Value = serde_json::from_str(body).unwrap();
                    if pred(&v) {
                        return v;
                    }
                    assert!(Instant::now() < deadline, "status never matched; last: {v}");
                }
                Err(e) => assert!(Instant::now() < deadline, "status never answered: {e}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn publish(&self, pki: &TestPki, channel: &str, payload: &[u8]) -> u64 {
        let answer = https(pki, self.http, "POST", &format!("/pub/{channel}"), payload);
        let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["id"].as_u64().unwrap()
    }

    pub fn signal(&self, sig: i32) {
        c1m_sys::process::kill(self.child.id(), sig).unwrap();
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads from a TLS stream until `needle` shows up (or panics after the read timeout).
pub fn read_until(stream: &mut impl Read, needle: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&got).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in {:?}",
            String::from_utf8_lossy(&got)
        );
        let n = stream.read(&mut buf).expect("read");
        assert!(
            n > 0,
            "closed before {needle:?}: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Path helper for clients that want a `&str`.
pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}
