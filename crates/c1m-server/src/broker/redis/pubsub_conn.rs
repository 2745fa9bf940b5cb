//! The hand-made pub/sub connection's socket: plain TCP or TLS (`rediss://`), authenticated
//! with the URL's credentials. It is split in two so the pub/sub thread can block reading
//! while the command thread writes SUBSCRIBE/UNSUBSCRIBE: with TLS both halves share one
//! `rustls::ClientConnection` behind a mutex that is never held while blocked on the socket.
//! (The `redis` crate's own connection cannot be split this way, hence this module.)

use super::target::Target;
use anyhow::{bail, Context};
use redis::Value;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

type Tls = Arc<Mutex<rustls::ClientConnection>>;

fn lock(tls: &Tls) -> MutexGuard<'_, rustls::ClientConnection> {
    tls.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sends whatever TLS records rustls has ready.
fn flush_tls(conn: &mut rustls::ClientConnection, sock: &TcpStream) -> io::Result<()> {
    let mut sock = sock;
    while conn.wants_write() {
        conn.write_tls(&mut sock)?;
    }
    Ok(())
}

/// The write half (SUBSCRIBE and UNSUBSCRIBE).
pub enum Writer {
    Plain(TcpStream),
    Tls { conn: Tls, sock: TcpStream },
}

impl Writer {
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Writer::Plain(sock) => sock.write_all(bytes),
            Writer::Tls { conn, sock } => {
                let mut conn = lock(conn);
                conn.writer().write_all(bytes)?;
                flush_tls(&mut conn, sock)
            }
        }
    }

    /// Ends the connection: the read half sees the end and the thread reconnects.
    pub fn shutdown(&self) {
        let sock = match self {
            Writer::Plain(sock) | Writer::Tls { sock, .. } => sock,
        };
        let _ = sock.shutdown(std::net::Shutdown::Both);
    }
}

/// Writes `cmd` to the pub/sub connection's write half, if it is up; a failure shuts the
/// connection down (its reader sees the end and reconnects, re-subscribing everything).
/// False when nothing could be written.
pub fn write_or_shut(writer: &mut Option<Writer>, cmd: &redis::Cmd) -> bool {
    let Some(stream) = writer.as_mut() else {
        return false;
    };
    if stream.write_all(&cmd.get_packed_command()).is_err() {
        stream.shutdown();
        *writer = None;
        return false;
    }
    true
}

/// The read half.
pub enum Reader {
    Plain(TcpStream),
    Tls {
        conn: Tls,
        sock: TcpStream,
        /// TLS bytes read from the socket and not yet given to rustls.
        raw: Vec<u8>,
        at: usize,
    },
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (conn, sock, raw, at) = match self {
            Reader::Plain(sock) => return sock.read(buf),
            Reader::Tls {
                conn,
                sock,
                raw,
                at,
            } => (conn, sock, raw, at),
        };
        loop {
            {
                let mut c = lock(conn);
                match c.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                // Decrypted data is all read: feed rustls more (one call at a time, so its
                // plaintext buffer never overflows).
                if *at < raw.len() {
                    let mut rest = &raw[*at..];
                    *at += c.read_tls(&mut rest)?;
                    c.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    flush_tls(&mut c, sock)?;
                    continue;
                }
            }
            // Blocks without the lock, so the command thread can write meanwhile.
            raw.resize(16 * 1024, 0);
            let n = match sock.read(raw) {
                Ok(n) => n,
                Err(e) => {
                    // A read timeout (the dead-link watch) must not leave the buffer's zeros
                    // to be fed to rustls as if read.
                    raw.clear();
                    *at = 0;
                    return Err(e);
                }
            };
            raw.truncate(n);
            *at = 0;
            if n == 0 {
                return Ok(0);
            }
        }
    }
}

/// The read half of a connected, authenticated pub/sub connection.
pub struct Conn {
    reader: BufReader<Reader>,
    parser: redis::Parser,
}

/// Silence on the pub/sub connection after which it is asked for a PING…
pub const PING_AFTER: Duration = Duration::from_secs(2);
/// …and silence after that PING after which the link is taken as dead (a Redis that vanished
/// without closing the socket: stopped, partitioned, its host gone).
pub const DEAD_AFTER_PING: Duration = Duration::from_secs(5);
/// The socket's read timeout while waiting for pushes: how often silence is looked at.
const WATCH_STEP: Duration = Duration::from_millis(500);

/// What [`Conn::next_watched`] found.
pub enum Next {
    Value(Value),
    /// Nothing came, not even the answer to a PING: the caller drops the connection.
    Dead,
    /// The connection ended or broke.
    Closed,
}

impl Conn {
    pub fn next_value(&mut self) -> redis::RedisResult<Value> {
        self.parser.parse_value(&mut self.reader)
    }

    /// The next push, watching for a dead link meanwhile: after [`PING_AFTER`] of silence
    /// `ping` is called (it sends PING; false when it could not), and [`DEAD_AFTER_PING`] more
    /// of silence is [`Next::Dead`].
    pub fn next_watched(&mut self, ping: &mut dyn FnMut() -> bool) -> Next {
        let silent_since = std::time::Instant::now();
        let mut pinged: Option<std::time::Instant> = None;
        while self.reader.buffer().is_empty() {
            match self.reader.fill_buf() {
                Ok([]) => return Next::Closed,
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    match pinged {
                        None if silent_since.elapsed() >= PING_AFTER => {
                            if !ping() {
                                return Next::Closed;
                            }
                            pinged = Some(std::time::Instant::now());
                        }
                        Some(at) if at.elapsed() >= DEAD_AFTER_PING => return Next::Dead,
                        _ => {}
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Closed,
            }
        }
        // A value cut by a read timeout half-way also ends the connection (it is remade and
        // its channels caught up from history).
        match self.next_value() {
            Ok(v) => Next::Value(v),
            Err(_) => Next::Closed,
        }
    }
}

/// Redis (or its certificate) was refused for a reason only an operator can fix: wrong
/// password or user, no permission, a certificate the trusted CA did not sign. At start this
/// is an error; later it is logged and counted (`auth_failures`) while the node retries.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// True when an error from the `redis` crate is one of those (see [`Refused`]).
pub fn is_refusal(e: &redis::RedisError) -> bool {
    matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
        || e.to_string().contains("invalid peer certificate")
}

/// True when `e` (from [`connect`]) is a [`Refused`].
pub fn is_refused(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Refused>().is_some()
}

/// Connects, shakes hands (TLS) and authenticates within `timeout` per step.
pub fn connect(target: &Target, timeout: Duration) -> anyhow::Result<(Conn, Writer)> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&target.addr)
        .with_context(|| format!("resolving {}", target.addr))?
        .next()
        .with_context(|| format!("{} resolves to nothing", target.addr))?;
    let sock = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    sock.set_nodelay(true)?;
    // Writes (SUBSCRIBE) come from the command thread; one stuck this long means Redis is gone.
    sock.set_write_timeout(Some(timeout))?;
    // Only the handshake and AUTH wait for an answer; afterwards the reader waits for pushes.
    sock.set_read_timeout(Some(timeout))?;
    let (reader, writer) = match &target.tls {
        None => (
            Reader::Plain(sock.try_clone()?),
            Writer::Plain(sock.try_clone()?),
        ),
        Some((config, name)) => {
            let mut conn = rustls::ClientConnection::new(config.clone(), name.clone())
                .context("starting TLS")?;
            let mut s = &sock;
            while conn.is_handshaking() {
                if let Err(e) = conn.complete_io(&mut s) {
                    let certificate = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                        .is_some_and(|e| {
                            matches!(
                                e,
                                rustls::Error::InvalidCertificate(_)
                                    | rustls::Error::AlertReceived(_)
                            )
                        });
                    if certificate {
                        return Err(Refused(format!("TLS handshake with {addr}: {e}")).into());
                    }
                    return Err(e).with_context(|| format!("TLS handshake with {addr}"));
                }
            }
            let conn = Arc::new(Mutex::new(conn));
            (
                Reader::Tls {
                    conn: conn.clone(),
                    sock: sock.try_clone()?,
                    raw: Vec::new(),
                    at: 0,
                },
                Writer::Tls {
                    conn,
                    sock: sock.try_clone()?,
                },
            )
        }
    };
    let (mut conn, mut writer) = (
        Conn {
            reader: BufReader::with_capacity(64 * 1024, reader),
            parser: redis::Parser::new(),
        },
        writer,
    );
    if let Some(password) = &target.password {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = &target.username {
            auth.arg(user);
        }
        auth.arg(password);
        writer
            .write_all(&auth.get_packed_command())
            .context("sending AUTH")?;
        match conn.next_value().context("reading the AUTH answer")? {
            Value::Okay => {}
            Value::ServerError(e) => {
                // Redis' own words (WRONGPASS…) never contain the password.
                return Err(Refused(format!(
                    "redis {} refused the pub/sub connection's AUTH: {} {}",
                    target.addr,
                    e.code(),
                    e.details().unwrap_or_default()
                ))
                .into());
            }
            other => bail!("unexpected AUTH answer {other:?}"),
        }
    }
    // From here the reader waits for pushes, looking at the silence every WATCH_STEP.
    sock.set_read_timeout(Some(WATCH_STEP))?;
    Ok((conn, writer))
}
