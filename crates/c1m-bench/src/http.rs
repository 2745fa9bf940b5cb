//! A tiny blocking HTTP/1.1 client for the coordinator's few requests: publishing
//! (`POST /pub/{ch}`, keep-alive) and reading the server's `/status`. Every call has a timeout.
//! Over TLS for an https:// address.

use crate::tls::{Tls, TlsIo};
use anyhow::{bail, Context};
use rustls::ClientConnection;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Client {
    addr: SocketAddr,
    host: String,
    stream: Option<Stream>,
    buf: Vec<u8>,
    timeout: Duration,
    tls: Option<Tls>,
}

/// A kept-alive connection: the socket, and its TLS session for https://.
struct Stream {
    sock: TcpStream,
    tls: Option<Box<ClientConnection>>,
}

impl Stream {
    fn io(&mut self) -> TlsIo<'_, TcpStream> {
        TlsIo {
            sock: &mut self.sock,
            tls: self.tls.as_deref_mut(),
        }
    }
}

/// A complete response: status and body.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Client {
    pub fn new(addr: SocketAddr, host: &str, timeout: Duration, tls: Option<Tls>) -> Self {
        Client {
            addr,
            host: host.to_string(),
            stream: None,
            buf: Vec::new(),
            timeout,
            tls,
        }
    }

    /// Sends one request, reconnecting once if a kept-alive connection turned out closed.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &str,
        body: &[u8],
    ) -> anyhow::Result<Response> {
        let reused = self.stream.is_some();
        match self.try_request(method, path, headers, body) {
            Ok(r) => Ok(r),
            Err(_) if reused => {
                self.stream = None;
                self.try_request(method, path, headers, body)
            }
            Err(e) => Err(e),
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &str,
        body: &[u8],
    ) -> anyhow::Result<Response> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, self.timeout)
                .with_context(|| format!("connect {}", self.addr))?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            s.set_nodelay(true)?;
            let tls = match &self.tls {
                Some(t) => Some(Box::new(t.connect().context("TLS session")?)),
                None => None,
            };
            self.stream = Some(Stream { sock: s, tls });
            self.buf.clear();
        }
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n{headers}\r\n",
            self.host,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        let Some(stream) = self.stream.as_mut() else {
            bail!("no connection");
        };
        let mut s = stream.io();
        let res = s
            .write_all(&req)
            .and_then(|()| s.flush())
            .context("send request")
            .and_then(|()| read_response(&mut s, &mut self.buf));
        match res {
            Ok((r, keep)) => {
                if !keep {
                    self.stream = None;
                }
                Ok(r)
            }
            Err(e) => {
                self.stream = None;
                Err(e)
            }
        }
    }
}

/// Reads one response; returns it and whether the connection may be reused.
fn read_response(s: &mut impl Read, buf: &mut Vec<u8>) -> anyhow::Result<(Response, bool)> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = resp.parse(buf).context("bad HTTP answer")? {
            let status = resp.code.unwrap_or(0);
            let mut len: Option<usize> = None;
            let mut close = false;
            for h in resp.headers.iter() {
                if h.name.eq_ignore_ascii_case("content-length") {
                    len = std::str::from_utf8(h.value)
                        .ok()
                        .and_then(|v| v.trim().parse().ok());
                } else if h.name.eq_ignore_ascii_case("connection") {
                    close = h.value.eq_ignore_ascii_case(b"close");
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    bail!("chunked answers are not supported");
                }
            }
            let body = match len {
                Some(n) if n > 16 << 20 => bail!("answer body too large ({n} bytes)"),
                Some(n) => {
                    while buf.len() < head + n {
                        let k = s.read(&mut chunk).context("read body")?;
                        if k == 0 {
                            bail!("connection closed in body");
                        }
                        buf.extend_from_slice(&chunk[..k]);
                    }
                    let body = buf[head..head + n].to_vec();
                    buf.drain(..head + n);
                    body
                }
                None if status == 204 || status == 304 => {
                    buf.drain(..head);
                    Vec::new()
                }
                None => {
                    // Body runs to close.
                    loop {
                        let k = s.read(&mut chunk).context("read body")?;
                        if k == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..k]);
                        if buf.len() > 16 << 20 {
                            bail!("answer too large");
                        }
                    }
                    close = true;
                    let body = buf[head..].to_vec();
                    buf.clear();
                    body
                }
            };
            return Ok((Response { status, body }, !close));
        }
        if buf.len() > 64 * 1024 {
            bail!("answer head too large");
        }
        let k = s.read(&mut chunk).context("read answer")?;
        if k == 0 {
            bail!("connection closed before an answer");
        }
        buf.extend_from_slice(&chunk[..k]);
    }
}

/// Server figures from c1m's `/status`.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ServerStatus {
    pub connections: u64,
    pub pss_bytes: u64,
    pub rss_bytes: u64,
    /// Bytes of message history the server holds, and its channel count (0 when the
    /// server does not say).
    pub history_bytes: u64,
    pub channels: u64,
}

/// Where c1m's `/status` is read: the target's address, or `--status-url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSource {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
    pub tls: Option<Tls>,
}

/// GET the status page; None when the server is not c1m serve (or does not answer in time).
pub fn fetch_status(src: &StatusSource) -> Option<ServerStatus> {
    let mut c = Client::new(src.addr, &src.host, Duration::from_secs(2), src.tls.clone());
    let r = c
        .request("GET", &src.path, "Connection: close\r\n", b"")
        .ok()?;
    if r.status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    Some(ServerStatus {
        connections: v.get("connections")?.get("total")?.as_u64()?,
        pss_bytes: v.get("memory")?.get("pss_bytes")?.as_u64()?,
        rss_bytes: v["memory"]["rss_bytes"].as_u64().unwrap_or(0),
        history_bytes: v["history_bytes"].as_u64().unwrap_or(0),
        channels: v["channels"].as_u64().unwrap_or(0),
    })
}
