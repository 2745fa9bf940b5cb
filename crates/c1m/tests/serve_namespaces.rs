//! Channel namespaces against the real server: the part of a channel name before its first `:`
//! picks per-namespace options (history, client publish, auth required, max subscribers),
//! shown in /status, applied live on SIGHUP and checked by `--check-config`.

use crate::auth::Keys;
use crate::common::{self, Server, Sse};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

fn ws(server: &Server, path: &str) -> Ws {
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (socket, response) =
        tungstenite::client(format!("ws://{}{path}", server.http), stream).unwrap();
    assert_eq!(response.status(), 101);
    socket
}

/// The close frame a WebSocket gets next (data messages before it are skipped).
fn close_of(socket: &mut Ws) -> (CloseCode, String) {
    loop {
        match socket.read() {
            Ok(Message::Close(Some(frame))) => return (frame.code, frame.reason.to_string()),
            Ok(Message::Close(None)) => panic!("closed without a code"),
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

/// A long-poll resume from `last_id` 0: (message ids, whether a gap was reported).
fn resume(server: &Server, channel: &str) -> (Vec<u64>, bool) {
    let body = ureq::get(&server.url(&format!("/sub/{channel}?last_id=0")))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ids = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    let gap = v["gaps"].as_array().is_some_and(|g| !g.is_empty());
    (ids, gap)
}

fn refused(server: &Server, reason: &str) -> u64 {
    server.status()["refused"][reason].as_u64().unwrap()
}

/// Waits (figures come every 250 ms) until `refused.{reason}` is `n`.
fn wait_refused(server: &Server, reason: &str, n: u64) {
    server.wait_status(|s| s["refused"][reason].as_u64() == Some(n));
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("c1m-ns-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn each_namespace_keeps_its_own_history_and_status_shows_them() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--history-size",
        "10",
        "--namespace",
        "chat:history_size=2",
        "--namespace",
        "feed:history_size=4,feed:presence=true",
    ]);
    let mut sent = std::collections::HashMap::new();
    for channel in ["chat:room1", "feed:all", "plain", "other:x"] {
        let ids: Vec<u64> = (0..6)
            .map(|i| server.publish(channel, &[b'a' + i]))
            .collect();
        sent.insert(channel, ids);
    }
    // chat keeps 2, feed 4; a channel without `:` or with an unknown prefix the global 10.
    assert_eq!(
        resume(&server, "chat:room1"),
        (sent["chat:room1"][4..].to_vec(), true)
    );
    assert_eq!(
        resume(&server, "feed:all"),
        (sent["feed:all"][2..].to_vec(), true)
    );
    assert_eq!(resume(&server, "plain"), (sent["plain"].clone(), false));
    assert_eq!(resume(&server, "other:x"), (sent["other:x"].clone(), false));

    let status = server.status();
    let ns = &status["namespaces"];
    assert_eq!(ns["chat"]["history_size"], 2, "{ns}");
    assert_eq!(ns["chat"]["presence"], false, "{ns}");
    assert_eq!(ns["feed"]["history_size"], 4, "{ns}");
    assert_eq!(ns["feed"]["presence"], true, "{ns}");
    // Unset keys show the global value they inherit.
    assert_eq!(ns["feed"]["history_age"], "5m", "{ns}");
    assert_eq!(ns["feed"]["client_publish"], false, "{ns}");
    assert!(ns["feed"]["max_subscribers"].is_null(), "{ns}");
}

#[test]
fn websocket_client_publish_is_decided_by_the_channels_namespace() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--ws-client-publish",
        "--namespace",
        "news:client_publish=false",
    ]);
    let mut watch = Sse::connect(server.http, "/sub/chat:a,news:a", "");
    let mut chat = ws(&server, "/sub/chat:a");
    let mut news = ws(&server, "/sub/news:a");
    server.wait_status(|s| s["connections"]["websocket"] == 2);

    // Allowed by the global switch: published to the channel.
    chat.send(Message::Text("from chat".into())).unwrap();
    let ev = watch.next();
    assert!(ev.data.contains("from chat"), "{ev:?}");

    // news forbids it: the message is ignored, as with client publish off, and counted.
    let ignored = server.status()["messages"]["client_ignored"]
        .as_u64()
        .unwrap();
    news.send(Message::Text("from news".into())).unwrap();
    server.wait_status(|s| s["messages"]["client_ignored"].as_u64() == Some(ignored + 1));

    // A connection on both may publish to chat, and is refused (1008) when it names news.
    let mut both = ws(&server, "/sub/chat:b,news:b");
    let forbidden = refused(&server, "forbidden");
    both.send(Message::Text(r#"{"channel":"news:b","data":"x"}"#.into()))
        .unwrap();
    let (code, reason) = close_of(&mut both);
    assert_eq!(code, CloseCode::Policy, "{reason}");
    assert!(reason.contains("namespace"), "{reason}");
    wait_refused(&server, "forbidden", forbidden + 1);

    // Nothing from news reached a subscriber; chat still publishes.
    chat.send(Message::Text("again".into())).unwrap();
    assert!(watch.next().data.contains("again"));
}

#[test]
fn max_subscribers_refuses_one_more_per_channel_and_counts_it() {
    let server = Server::start(&["--workers", "1", "--namespace", "lobby:max_subscribers=2"]);
    let _a = Sse::connect(server.http, "/sub/lobby:1", "");
    let b = Sse::connect(server.http, "/sub/lobby:1", "");
    server.wait_status(|s| s["connections"]["sse"] == 2);

    // SSE and long-poll: 503 with Retry-After and a reason.
    let answer = common::raw_exchange(
        server.http,
        b"GET /sub/lobby:1 HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n",
    );
    assert_eq!(common::status_code(&answer), 503, "{answer}");
    assert!(answer.contains("Retry-After: "), "{answer}");
    assert!(answer.contains("lobby:1 is full"), "{answer}");
    // WebSocket: close 1013.
    let mut third = ws(&server, "/sub/lobby:1");
    let (code, reason) = close_of(&mut third);
    assert_eq!(code, CloseCode::Again, "{reason}");
    // A multi-channel subscribe that includes the full channel is refused whole.
    let answer = common::raw_exchange(
        server.http,
        b"GET /sub/free,lobby:1 HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n",
    );
    assert_eq!(common::status_code(&answer), 503, "{answer}");
    wait_refused(&server, "max_subscribers", 3);
    let metrics = server.metrics();
    assert!(
        metrics.contains("c1m_refused_total{reason=\"max_subscribers\"} 3"),
        "{metrics}"
    );

    // Another channel of the namespace and a channel outside it are not limited by this one.
    let _other = Sse::connect(server.http, "/sub/lobby:2", "");
    let _free: Vec<Sse> = (0..3)
        .map(|_| Sse::connect(server.http, "/sub/free", ""))
        .collect();
    // One leaves: there is room again.
    drop(b);
    server.wait_status(|s| s["connections"]["sse"] == 5);
    let _again = Sse::connect(server.http, "/sub/lobby:1", "");
}

#[test]
fn auth_required_namespace_needs_a_token_whatever_the_auth_mode() {
    let keys = Keys::new("ns-auth");
    let secret = keys.secret();
    let server = Server::start(&[
        "--workers",
        "1",
        "--tcp-listen",
        "127.0.0.1:0",
        "--jwt-key",
        &secret,
        "--namespace",
        "private:auth_required=true",
    ]);
    // auth is off: other channels need nothing.
    let _open = Sse::connect(server.http, "/sub/public:x", "");
    let answer = common::raw_exchange(
        server.http,
        b"GET /sub/private:x HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n",
    );
    assert_eq!(common::status_code(&answer), 401, "{answer}");
    assert!(answer.contains("requires a token"), "{answer}");
    // Mixed with an open channel, the subscribe still needs a token.
    let answer = common::raw_exchange(
        server.http,
        b"GET /sub/public:x,private:x HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n",
    );
    assert_eq!(common::status_code(&answer), 401, "{answer}");
    let token = keys.hs256(&serde_json::json!({
        "exp": crate::auth::now() + 600,
        "channels": ["private:x"],
    }));
    let mut sub = Sse::connect(
        server.http,
        "/sub/private:x",
        &format!("Authorization: Bearer {token}\r\n"),
    );
    // A valid token that does not grant the channel: 403.
    let answer = common::raw_exchange(
        server.http,
        format!(
            "GET /sub/private:y HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\
             Authorization: Bearer {token}\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(common::status_code(&answer), 403, "{answer}");
    // The raw TCP line protocol carries no token: ERR.
    let mut tcp = TcpStream::connect(server.tcp.unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(b"SUB private:x\n").unwrap();
    let mut line = String::new();
    BufReader::new(&tcp).read_line(&mut line).unwrap();
    assert!(
        line.starts_with("ERR") && line.contains("token"),
        "{line:?}"
    );
    wait_refused(&server, "unauthorized", 3);
    let id = server.publish("private:x", b"secret");
    assert_eq!(sub.next().id, Some(id.to_string()));

    // A WebSocket in the namespace renews its token as under --auth (auth itself is off).
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let url = format!("ws://{}/sub/private:x?token={token}", server.http);
    let (mut socket, _) = tungstenite::client(url, stream).unwrap();
    let renewed = keys.hs256(&serde_json::json!({
        "exp": crate::auth::now() + 1200,
        "channels": ["private:x"],
    }));
    let refresh = serde_json::json!({"type": "refresh", "token": renewed}).to_string();
    socket.send(Message::Text(refresh.into())).unwrap();
    let ack = loop {
        match socket.read().unwrap() {
            Message::Text(t) => break t.to_string(),
            Message::Close(c) => panic!("closed: {c:?}"),
            _ => {}
        }
    };
    assert!(ack.contains("\"refreshed\""), "{ack}");
}

#[test]
fn sighup_applies_a_changed_namespace_history_size() {
    let dir = temp_dir("reload");
    let path = dir.join("serve.toml");
    std::fs::write(&path, "workers = 1\n[namespaces.chat]\nhistory_size = 5\n").unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    let ids: Vec<u64> = (0..5)
        .map(|i| server.publish("chat:r", &[b'a' + i]))
        .collect();
    assert_eq!(resume(&server, "chat:r"), (ids.clone(), false));
    let mut live = Sse::connect(server.http, "/sub/chat:r", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);

    std::fs::write(&path, "workers = 1\n[namespaces.chat]\nhistory_size = 2\n").unwrap();
    server.signal(libc::SIGHUP);
    server.wait_status(|s| s["namespaces"]["chat"]["history_size"] == 2);
    // History held over the new, smaller size is dropped at once: a resume gets a gap.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = resume(&server, "chat:r");
        if got == (ids[3..].to_vec(), true) {
            break;
        }
        assert!(Instant::now() < deadline, "history not trimmed: {got:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The subscriber was kept, and new messages follow the new size.
    let id = server.publish("chat:r", b"new");
    assert_eq!(live.next().id, Some(id.to_string()));
    assert_eq!(resume(&server, "chat:r"), (vec![ids[4], id], true));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn check_config_names_bad_namespaces_and_exits_2() {
    let dir = temp_dir("check");
    let check = |args: &[&str], toml: Option<&str>| {
        let mut cmd = common::c1m();
        cmd.args(["serve", "--check-config"]).args(args);
        if let Some(text) = toml {
            let path = dir.join("c.toml");
            std::fs::write(&path, text).unwrap();
            cmd.arg("--config").arg(path);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    for (toml, says) in [
        ("[namespaces.chat]\nhistory_sise = 5\n", "history_sise"),
        ("[namespaces.chat]\npresence = \"yes\"\n", "presence"),
        ("[namespaces.\"chat room\"]\npresence = true\n", "bad name"),
        (
            "[namespaces.chat]\nhistory_size = 0\n",
            "history_size must be at least 1",
        ),
        (
            "[namespaces.chat]\nmax_subscribers = 0\n",
            "max_subscribers",
        ),
        ("[namespaces.chat]\nauth_required = true\n", "--jwt-key"),
        (
            "[namespaces.chat]\nhistory_max_bytes = 10\n",
            "history_max_bytes",
        ),
    ] {
        let (code, err) = check(&[], Some(toml));
        assert_eq!(code, Some(2), "{toml}: {err}");
        assert!(err.contains(says), "{toml}: {says} missing from {err}");
    }
    for (flag, says) in [
        ("chat:colour=red", "unknown namespace key"),
        ("chat:history_age=soon", "history_age=soon"),
        ("chat.x:presence=true", "bad namespace name"),
        ("chat", "NAME:key=value"),
    ] {
        let (code, err) = check(&["--namespace", flag], None);
        assert_eq!(code, Some(2), "{flag}: {err}");
        assert!(err.contains(says), "{flag}: {says} missing from {err}");
    }
    let (code, err) = check(
        &["--namespace", "chat:history_age=1h"],
        Some("[namespaces.chat]\nhistory_size = 500\nclient_publish = true\n"),
    );
    assert_eq!(code, Some(0), "{err}");

    // --print-config shows the namespaces with their source, as a file that checks clean.
    let out = common::c1m()
        .args([
            "serve",
            "--print-config",
            "--namespace",
            "chat:history_size=5",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("namespaces = { chat = { history_size = 5 } }  # flag --namespace"),
        "{text}"
    );
    let (code, err) = check(&[], Some(&text));
    assert_eq!(code, Some(0), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `max_subscribers` holds for the node, not for each worker: with 3 workers and a limit of
/// 4, 30 subscribe attempts (spread over the workers by the kernel) get exactly 4 streams
/// and 26 refusals, every one counted.
#[test]
fn max_subscribers_is_the_nodes_limit_over_several_workers() {
    let server = Server::start(&["--workers", "3", "--namespace", "lobby:max_subscribers=4"]);
    let mut held = Vec::new();
    let mut refused_here = 0;
    for _ in 0..30 {
        let mut s = std::net::TcpStream::connect(server.http).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        std::io::Write::write_all(
            &mut s,
            b"GET /sub/lobby:1 HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n",
        )
        .unwrap();
        let mut head = [0u8; 12];
        std::io::Read::read_exact(&mut s, &mut head).unwrap();
        match &head[9..12] {
            b"200" => held.push(s),
            b"503" => refused_here += 1,
            other => panic!("answered {}", String::from_utf8_lossy(other)),
        }
    }
    assert_eq!((held.len(), refused_here), (4, 26));
    server.wait_status(|s| s["connections"]["sse"] == 4);
    wait_refused(&server, "max_subscribers", 26);
}
