//! Interop with an independent HTTP/2 implementation: python-h2 (Debian's python3-h2, installed
//! by scripts/install-test-deps.sh) plays the client in tests/h2_client.py, our
//! `h2::Connection` the server. Bytes cross as hex lines over the child's pipes (no sockets):
//! python's frames must decode to our events, and our responses to python's.

use c1m_proto::h2::{Config, Connection, ErrorCode, Event, Limits};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Debian's interpreter, which is the one python3-h2 installs into (a `python3` earlier on
/// PATH, e.g. pyenv's, would not have it).
const PYTHON: &str = "/usr/bin/python3";

struct Client {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Client {
    fn start() -> Client {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2_client.py");
        let check = Command::new(PYTHON).args(["-c", "import h2"]).output();
        assert!(
            matches!(&check, Ok(o) if o.status.success()),
            "{PYTHON} cannot import h2 ({check:?}): run scripts/install-test-deps.sh (python3-h2)"
        );
        let mut child = Command::new(PYTHON)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {PYTHON} {script}: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Client { child, lines }
    }

    fn line(&mut self) -> String {
        match self.lines.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(e) => {
                let _ = self.child.kill();
                panic!("no line from the python client within 20 s ({e}); its stderr is above");
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let stdin = self.child.stdin.as_mut().expect("piped");
        writeln!(stdin, "{hex}")
            .and_then(|()| stdin.flush())
            .expect("writing to the python client");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn receive_all(conn: &mut Connection, bytes: &[u8]) -> Vec<Event> {
    let mut events = Vec::new();
    let used = conn.receive(bytes, &mut events);
    assert_eq!(used, bytes.len(), "python's flight ended inside a frame");
    events
}

#[test]
fn python_h2_client_and_our_server_understand_each_other() {
    let mut py = Client::start();
    let mut conn = Connection::new(Config::default(), Limits::default());

    let events = receive_all(&mut conn, &unhex(&py.line()));
    let [Event::Request {
        stream: 1,
        request: get,
        end_stream: true,
    }, Event::Request {
        stream: 3,
        request: post,
        end_stream: false,
    }, Event::Data {
        stream: 3,
        data,
        end_stream: false,
    }, Event::Reset {
        stream: 3,
        code: ErrorCode::CANCEL,
    }] = &events[..]
    else {
        panic!("unexpected events from python-h2: {events:#?}");
    };
    assert_eq!(
        (get.method.as_str(), get.scheme.as_deref()),
        ("GET", Some("https"))
    );
    assert_eq!(get.path.as_deref(), Some("/sub/news"));
    assert_eq!(get.authority.as_deref(), Some("example.test"));
    assert_eq!(get.header("accept"), Some(&b"text/event-stream"[..]));
    assert_eq!(
        (post.method.as_str(), post.path.as_deref()),
        ("POST", Some("/pub/news"))
    );
    assert_eq!(data, b"hello");

    conn.send_headers(
        1,
        200,
        &[
            ("content-type", b"text/event-stream"),
            ("cache-control", b"no-cache"),
        ],
        false,
    )
    .expect("response head");
    conn.send_data(1, b"id: 1\ndata: hi\n\n", true)
        .expect("response body");
    py.send(conn.output());
    conn.advance(conn.output().len());

    let reply: serde_json::Value =
        serde_json::from_str(&py.line()).expect("JSON from the python client");
    let seen = reply["seen"].as_array().expect("seen");
    let want = serde_json::json!([
        {"settings": {"3": 100, "4": 65535, "6": 16384, "1": 0}},
        {"settings_acked": true},
        {"ping_ack": "c1m-ping"},
        {"response": 1, "headers": [[":status", "200"], ["content-type", "text/event-stream"], ["cache-control", "no-cache"]]},
        {"data": 1, "body": "id: 1\ndata: hi\n\n"},
        {"ended": 1},
    ]);
    assert_eq!(
        serde_json::Value::Array(seen.clone()),
        want,
        "python-h2 decoded our bytes as shown"
    );

    // Second flight: python's SETTINGS ACK (our table size 0 takes effect) and a request whose
    // block starts with the table size update python's encoder now owes us.
    let next = unhex(reply["next"].as_str().expect("next"));
    let events = receive_all(&mut conn, &next);
    let [Event::Request {
        stream: 5,
        request,
        end_stream: true,
    }] = &events[..]
    else {
        panic!("second flight: {events:#?}");
    };
    assert_eq!(request.path.as_deref(), Some("/sub/second"));
    assert_eq!(conn.take_counters(), Default::default(), "no limit was hit");
}
