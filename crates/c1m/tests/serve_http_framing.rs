//! HTTP/1.1 body framing (RFC 9112 §6), against the real binary on loopback:
//! a body is never read as the next request, ambiguous or malformed framing gets 400 (501 for a
//! transfer coding we do not implement) and the connection closes, and chunked publishes work,
//! from raw bytes and from curl.

use crate::common;

use common::{raw_exchange, Server, Sse};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The status of every response in `answer`, in order (each starts with `HTTP/1.1 NNN`).
fn statuses(answer: &str) -> Vec<u16> {
    answer
        .match_indices("HTTP/1.1 ")
        .filter(|(i, _)| *i == 0 || answer[..*i].ends_with('\n') || answer[..*i].ends_with('}'))
        .filter_map(|(i, _)| answer[i + 9..].get(..3)?.parse().ok())
        .collect()
}

/// A publish to `/pub/smuggled` that must never happen, to be hidden in a body.
const SMUGGLED: &str = "POST /pub/smuggled HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nbad";

/// `HEAD_LINES` then `body` with `Content-Length` of the body.
fn with_cl(head: &str, body: &str) -> Vec<u8> {
    format!("{head}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// Every framing attack sent straight to c1m, with the status it must get. Each hides a publish
/// to `smuggled` that a misframing server would run.
fn attacks() -> Vec<(&'static str, Vec<u8>, u16)> {
    let chunk_of_smuggle = format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len());
    vec![
        (
            "CL.0: GET with a body",
            with_cl("GET /healthz HTTP/1.1\r\nHost: t\r\n", SMUGGLED),
            400,
        ),
        (
            "CL.0: GET on a stream route",
            with_cl(
                "GET /sub/x HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n",
                SMUGGLED,
            ),
            400,
        ),
        (
            "CL.CL: two lengths that differ",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: {}\r\n\r\nx{SMUGGLED}",
                SMUGGLED.len() + 1
            )
            .into_bytes(),
            400,
        ),
        (
            "CL list",
            format!("POST /pub/a HTTP/1.1\r\nHost: t\r\nContent-Length: 1, 1\r\n\r\nx{SMUGGLED}")
                .into_bytes(),
            400,
        ),
        (
            "signed CL",
            format!("POST /pub/a HTTP/1.1\r\nHost: t\r\nContent-Length: +1\r\n\r\nx{SMUGGLED}")
                .into_bytes(),
            400,
        ),
        (
            "negative CL",
            format!("GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n{SMUGGLED}")
                .into_bytes(),
            400,
        ),
        (
            "CL overflow",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nContent-Length: 18446744073709551617\r\n\r\n{SMUGGLED}"
            )
            .into_bytes(),
            400,
        ),
        (
            "TE.CL",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{chunk_of_smuggle}"
            )
            .into_bytes(),
            400,
        ),
        (
            "CL.TE",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{SMUGGLED}"
            )
            .into_bytes(),
            400,
        ),
        (
            "TE: xchunked",
            format!("POST /pub/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n{chunk_of_smuggle}")
                .into_bytes(),
            400,
        ),
        (
            "TE: chunked twice",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n{chunk_of_smuggle}"
            )
            .into_bytes(),
            400,
        ),
        (
            "TE: chunked then identity",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n{chunk_of_smuggle}"
            )
            .into_bytes(),
            400,
        ),
        (
            "TE: gzip, chunked",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n{chunk_of_smuggle}"
            )
            .into_bytes(),
            501,
        ),
        (
            "TE in HTTP/1.0",
            format!("POST /pub/a HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{chunk_of_smuggle}")
                .into_bytes(),
            400,
        ),
        (
            "signed chunk size",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n+1\r\nx\r\n0\r\n\r\n{SMUGGLED}"
            )
            .into_bytes(),
            400,
        ),
        (
            "chunk size overflow",
            format!(
                "POST /pub/a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1{}\r\nx\r\n0\r\n\r\n{SMUGGLED}",
                "0".repeat(16)
            )
            .into_bytes(),
            400,
        ),
        (
            "bare LF hides a Content-Length",
            format!("GET /healthz HTTP/1.1\r\nX: y\nContent-Length: {}\r\n\r\n{SMUGGLED}", SMUGGLED.len())
                .into_bytes(),
            400,
        ),
        (
            "obs-fold",
            format!("GET /healthz HTTP/1.1\r\nX: y\r\n Content-Length: {}\r\n\r\n{SMUGGLED}", SMUGGLED.len())
                .into_bytes(),
            400,
        ),
    ]
}

#[test]
fn cl0_get_body_is_refused() {
    let server = Server::start(&["--workers", "1", "--head-timeout", "2s"]);
    let mut watcher = Sse::connect(server.http, "/sub/smuggled", "");
    let request = with_cl("GET /healthz HTTP/1.1\r\nHost: t\r\n", SMUGGLED);
    let answer = raw_exchange(server.http, &request);
    // One answer, a 400, then the server closed (raw_exchange read to EOF within its timeout).
    assert_eq!(statuses(&answer), vec![400], "{answer}");
    assert!(answer.contains("Connection: close"), "{answer}");
    // Nothing was published: the next event the watcher sees is the marker published now.
    let marker = server.publish("smuggled", b"marker");
    let ev = watcher.next();
    assert_eq!(
        (ev.id, ev.data),
        (Some(marker.to_string()), "marker".into())
    );
    let s = server.wait_status(|s| s["refused"]["bad_request"] == 1);
    assert_eq!(s["messages"]["published"], 1, "{s}");
}

#[test]
fn conflicting_and_malformed_framing_is_refused_and_closed() {
    let server = Server::start(&["--workers", "1", "--head-timeout", "2s"]);
    let mut watcher = Sse::connect(server.http, "/sub/smuggled", "");
    let cases = attacks();
    for (what, request, want) in &cases {
        let started = Instant::now();
        let answer = raw_exchange(server.http, request);
        assert_eq!(statuses(&answer), vec![*want], "{what}: {answer}");
        // Closed right after the answer, not after a timeout.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{what}: not closed"
        );
    }
    let marker = server.publish("smuggled", b"marker");
    let ev = watcher.next();
    assert_eq!(
        ev.id,
        Some(marker.to_string()),
        "a smuggled publish got through"
    );
    let n = cases.len() as u64;
    let s = server.wait_status(|s| s["refused"]["bad_request"] == n);
    assert_eq!(s["messages"]["published"], 1, "{s}");
    // The watcher, on its own connection, never noticed.
    let id = server.publish("smuggled", b"after");
    assert_eq!(watcher.next().id, Some(id.to_string()));
}

#[test]
fn chunked_publish_is_decoded_bounded_and_strict() {
    let server = Server::start(&["--workers", "1", "--max-payload", "1024"]);
    let mut sub = Sse::connect(server.http, "/sub/ch", "");
    // Extensions and trailers are read and ignored; the next pipelined request is answered.
    let raw = b"POST /pub/ch HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n\
        6;note=\"a;b\"\r\nhello \r\n5\r\nworld\r\n0\r\nX-Check: 1\r\n\r\n\
        GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let answer = raw_exchange(server.http, raw);
    assert_eq!(statuses(&answer), vec![200, 200], "{answer}");
    assert_eq!(sub.next().data, "hello world");

    // The limit is on the decoded body: exactly max-payload passes, one byte more is 413.
    let fits = format!("400\r\n{}\r\n0\r\n\r\n", "y".repeat(1024));
    let head = "POST /pub/ch HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let answer = raw_exchange(server.http, format!("{head}{fits}").as_bytes());
    assert_eq!(statuses(&answer), vec![200], "{answer}");
    assert_eq!(sub.next().data.len(), 1024);
    let over = format!("400\r\n{}\r\n1\r\nz\r\n0\r\n\r\n", "y".repeat(1024));
    let answer = raw_exchange(server.http, format!("{head}{over}").as_bytes());
    assert_eq!(statuses(&answer), vec![413], "{answer}");
    // Data longer than its chunk size is not guessed at.
    let answer = raw_exchange(
        server.http,
        format!("{head}3\r\nabcdef\r\n0\r\n\r\n").as_bytes(),
    );
    assert_eq!(statuses(&answer), vec![400], "{answer}");
    let s = server.wait_status(|s| s["refused"]["payload_too_large"] == 1);
    assert_eq!(s["refused"]["bad_request"], 1, "{s}");
    assert_eq!(s["messages"]["published"], 2, "{s}");
}

#[test]
fn curl_streams_a_chunked_publish_from_stdin() {
    let server = Server::start(&["--workers", "1"]);
    let mut sub = Sse::connect(server.http, "/sub/piped", "");
    let payload: String = (0..3000).map(|i| format!("{i} ")).collect();
    let started = Instant::now();
    // -T - streams stdin with Transfer-Encoding: chunked and Expect: 100-continue. The long
    // expect timeout makes a missing `100 Continue` show up as a slow publish.
    let mut curl = Command::new("curl")
        .args([
            "-sS",
            "--fail-with-body",
            "--expect100-timeout",
            "20",
            "-X",
            "POST",
            "-T",
            "-",
        ])
        .arg(server.url("/pub/piped"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl is installed (scripts/install-test-deps.sh)");
    curl.stdin
        .take()
        .unwrap()
        .write_all(payload.as_bytes())
        .unwrap();
    let out = curl.wait_with_output().unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{body} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(body.contains("\"channel\":\"piped\""), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "publish waited for curl's expect timeout: no 100 Continue"
    );
    assert_eq!(sub.next().data, payload);
}
