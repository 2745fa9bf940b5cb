//! Connection identity against the real binary: a token's `sub` is its connection's user,
//! counted in /status and /metrics, kept across a WebSocket refresh (which may not change it)
//! and across a live upgrade; a `sub` that cannot serve as a user id is refused. Tokens are
//! minted by tests/auth/mint.py, not by the crate the server verifies with.

use crate::auth::{curl_status, now, Keys};
use crate::common::{Server, Sse};
use crate::serve_upgrade::{start, KillOnDrop, Scratch};
use serde_json::json;
use std::net::TcpStream;
use std::time::Duration;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

fn ws_with_token(server: &Server, path: &str, token: &str) -> Ws {
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let url = format!("ws://{}{path}?token={token}", server.http);
    let (socket, response) = tungstenite::client(url, stream).unwrap();
    assert_eq!(response.status(), 101);
    socket
}

/// Sends a refresh and returns the answer: Ok(type of the JSON reply) or Err(close code).
fn refresh(socket: &mut Ws, token: &str) -> Result<String, CloseCode> {
    socket
        .send(Message::Text(
            json!({"type": "refresh", "token": token})
                .to_string()
                .into(),
        ))
        .unwrap();
    loop {
        match socket.read().expect("an answer to the refresh") {
            Message::Text(t) => {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                return Ok(v["type"].as_str().unwrap_or_default().to_string());
            }
            Message::Close(Some(frame)) => return Err(frame.code),
            _ => {}
        }
    }
}

fn metric_value(server: &Server, name: &str) -> String {
    let text = server.metrics();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics"));
    line[name.len() + 1..].to_string()
}

#[test]
fn a_token_sub_names_the_connection_user_and_a_refresh_cannot_change_it() {
    let keys = Keys::new("identity");
    let server = Server::start(&[
        "--workers",
        "2",
        "--auth",
        "optional",
        "--jwt-key",
        &keys.secret(),
    ]);
    let token = |sub: serde_json::Value| {
        keys.hs256(&json!({"exp": now() + 300, "channels": ["room"], "sub": sub}))
    };
    let ann = token(json!("ann"));
    let _sse = Sse::connect(server.http, &format!("/sub/room?token={ann}"), "");
    let mut ws = ws_with_token(&server, "/sub/room", &ann);
    let _anonymous = Sse::connect(server.http, "/sub/room", "");
    let no_sub = keys.hs256(&json!({"exp": now() + 300, "channels": ["room"]}));
    let _no_user = Sse::connect(server.http, &format!("/sub/room?token={no_sub}"), "");
    let s = server.wait_status(|s| Server::held(s) == 4 && s["connections"]["with_user"] == 2);
    assert_eq!(s["connections"]["with_user"], 2, "{s}");
    assert_eq!(metric_value(&server, "c1m_connections_with_user"), "2");

    // A sub that cannot be a user id is refused like any bad token.
    let sse = "Accept: text/event-stream";
    for bad in [json!("x".repeat(257)), json!(""), json!("a\u{7}b")] {
        let url = server.url(&format!("/sub/room?token={}", token(bad.clone())));
        assert_eq!(curl_status(&["-H", sse, &url]), 401, "{bad}");
    }

    // A refresh extends the same user's connection; another user's token is refused (4003).
    assert_eq!(refresh(&mut ws, &ann).as_deref(), Ok("refreshed"));
    assert_eq!(
        refresh(&mut ws, &token(json!("bob"))),
        Err(CloseCode::from(4003))
    );
    let s = server.wait_status(|s| Server::held(s) == 3 && s["connections"]["with_user"] == 1);
    assert_eq!(s["connections"]["with_user"], 1, "{s}");
}

#[test]
fn users_cross_a_live_upgrade_with_their_connections() {
    let keys = Keys::new("identity-upgrade");
    let scratch = Scratch::new("identity");
    let secret = keys.secret();
    let (server, logs) = start(
        &scratch,
        &[("C1M_AUTH", "optional"), ("C1M_JWT_KEY", secret.as_str())],
    );
    let old_pid = server.child.id();
    let mut users: Vec<Sse> = ["ann", "bob", "ann"]
        .iter()
        .map(|sub| {
            let t = keys.hs256(&json!({"exp": now() + 300, "channels": ["room"], "sub": sub}));
            Sse::connect(server.http, &format!("/sub/room?token={t}"), "")
        })
        .collect();
    let _anonymous = Sse::connect(server.http, "/sub/room", "");
    let s = server.wait_status(|s| s["connections"]["sse"] == 4);
    assert_eq!(s["connections"]["with_user"], 3, "{s}");
    scratch.install_patched();
    server.signal(libc::SIGUSR2);
    logs.wait_for(
        "upgrade: committed; this master serves",
        Duration::from_secs(30),
    )
    .expect("the new master logs its commit");
    let s = server.wait_status(|s| {
        s["pid"].as_u64() != Some(u64::from(old_pid)) && s["connections"]["sse"] == 4
    });
    let _new = KillOnDrop(s["pid"].as_u64().unwrap() as u32);
    assert_eq!(s["connections"]["with_user"], 3, "{s}");
    server.publish("room", b"after");
    for sse in &mut users {
        assert_eq!(sse.next().data, "after");
    }
}
