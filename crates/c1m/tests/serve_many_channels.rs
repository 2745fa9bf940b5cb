//! Many distinct channels keep the answers about them bounded: `/status` counts channels and
//! lists none, and the server API's `channels` call pages by name (a limit with a hard cap and
//! a cursor), so no request builds one answer the size of every channel. 50,000 channels with
//! history and a subscriber each, over 50 SSE connections of 1,000 channels.

use crate::common;

use common::{Server, Sse};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const CHANNELS: usize = 50_000;
const PER_CONN: usize = 1_000;

fn name(i: usize) -> String {
    format!("m{i:05}")
}

/// POST /api/{call}: (status, JSON answer).
fn api(server: &Server, call: &str, body: &str, ctype: &str) -> (u16, Value) {
    let req = ureq::post(&server.url(&format!("/api/{call}")))
        .timeout(Duration::from_secs(30))
        .set("Content-Type", ctype);
    let (status, text) = match req.send_string(body) {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("POST /api/{call}: {e}"),
    };
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("/api/{call} answered {status} with {text:?}: {e}"));
    (status, v)
}

fn channels_page(server: &Server, q: Value) -> (u16, Value) {
    api(server, "channels", &q.to_string(), "application/json")
}

#[test]
fn status_and_channel_listings_stay_bounded_with_many_channels() {
    let per = PER_CONN.to_string();
    let server = Server::start(&["--workers", "1", "--max-channels-per-sub", &per]);
    // History on every channel, published in batches.
    let names: Vec<String> = (0..CHANNELS).map(name).collect();
    for batch in names.chunks(5_000) {
        let body: String = batch
            .iter()
            .map(|c| format!("{{\"channel\":\"{c}\",\"data\":\"x\"}}\n"))
            .collect();
        let (status, v) = api(&server, "batch", &body, "application/x-ndjson");
        assert_eq!(status, 200, "{v}");
        let results = v["result"]["results"].as_array().unwrap();
        assert!(results.iter().all(|r| r["id"].is_u64()), "{v}");
    }
    // A subscriber on every channel.
    let subs: Vec<Sse> = names
        .chunks(PER_CONN)
        .map(|chunk| Sse::connect(server.http, &format!("/sub/{}", chunk.join(",")), ""))
        .collect();
    let status = server.wait_status(|s| s["connections"]["sse"] == subs.len());
    assert_eq!(status["channels"], CHANNELS);

    // /status counts the channels and lists none: its size does not grow with them.
    let body = ureq::get(&server.url("/status"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(body.len() < 64 * 1024, "/status is {} bytes", body.len());
    assert!(
        !body.contains(&name(CHANNELS - 1)),
        "/status names a channel"
    );

    // The limit has a hard cap, and 0 is refused.
    for limit in [0, 1_001] {
        let (code, v) = channels_page(&server, json!({ "limit": limit }));
        assert_eq!(code, 400, "limit {limit}: {v}");
    }
    // The workers' counts reach the master every 250 ms: walk the pages until every channel
    // is listed (bounded), each page at most the largest limit, names in order, none twice.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut listed, mut slowest) = (0, Duration::ZERO);
    for _round in 0..40 {
        let (mut cursor, mut last, mut count) = (None::<String>, String::new(), 0);
        for _page in 0..=CHANNELS / 1_000 + 1 {
            let mut q = json!({ "limit": 1_000 });
            if let Some(c) = &cursor {
                q["cursor"] = json!(c);
            }
            let started = Instant::now();
            let (code, v) = channels_page(&server, q);
            slowest = slowest.max(started.elapsed());
            assert_eq!(code, 200, "{v}");
            let page = v["result"]["channels"].as_array().unwrap().clone();
            assert!(page.len() <= 1_000);
            for c in &page {
                let n = c["name"].as_str().unwrap().to_string();
                assert!(n > last, "{n} after {last}");
                assert_eq!(c["subscribers"], 1, "{c}");
                last = n;
            }
            count += page.len();
            cursor = v["result"]["next_cursor"].as_str().map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        assert!(cursor.is_none(), "more pages than {CHANNELS} channels need");
        listed = count;
        if listed == CHANNELS || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "{CHANNELS} channels: /status {} B, slowest channels page {slowest:?}",
        body.len()
    );
    assert_eq!(listed, CHANNELS, "channels listed over every page");
    // A prefix pages within itself.
    let (code, v) = channels_page(&server, json!({ "prefix": "m4999", "limit": 5 }));
    assert_eq!(code, 200, "{v}");
    let page: Vec<&str> = v["result"]["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(page, ["m49990", "m49991", "m49992", "m49993", "m49994"]);
    let cursor = v["result"]["next_cursor"].clone();
    let (_, v) = channels_page(
        &server,
        json!({ "prefix": "m4999", "limit": 1_000, "cursor": cursor }),
    );
    assert_eq!(v["result"]["channels"].as_array().unwrap().len(), 5, "{v}");
    assert_eq!(v["result"]["next_cursor"], Value::Null);
    drop(subs);
}
