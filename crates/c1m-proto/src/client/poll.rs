//! Long-poll client parser: one HTTP answer per poll, c1m's JSON body
//! (`{"messages":[…],"gaps":[…],"last_id":N}`, the format [`crate::longpoll`] encodes) or 204.

use super::{perr, Event, ProtoError, MAX_PENDING};
use serde_json::Value;

/// Parses one answer if `buf` holds a complete one; Some(bytes used) or None for "need more".
pub(super) fn response(
    buf: &[u8],
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Option<usize>, ProtoError> {
    let mut headers = [httparse::EMPTY_HEADER; 24];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(perr(format!("bad HTTP head ({e})"))),
    };
    let status = resp.code.unwrap_or(0);
    let mut content_length = 0usize;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            content_length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| perr("bad Content-Length"))?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(perr("poll chunked answer unsupported"));
        }
    }
    if content_length > MAX_PENDING {
        return Err(perr("poll answer too large"));
    }
    let total = head_len + content_length;
    if buf.len() < total {
        return Ok(None);
    }
    match status {
        200 => {
            let body: Value =
                serde_json::from_slice(&buf[head_len..total]).map_err(|_| perr("poll bad JSON"))?;
            if !body.is_object() {
                return Err(perr("poll bad JSON"));
            }
            let list = |k: &str| body.get(k).and_then(Value::as_array).map(Vec::as_slice);
            for _ in list("gaps").unwrap_or_default() {
                on(Event::Gap);
            }
            for m in list("messages").unwrap_or_default() {
                on(Event::Message {
                    id: m.get("id").and_then(Value::as_u64),
                    data: m
                        .get("data")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .as_bytes(),
                });
            }
            on(Event::PollDone {
                last_id: body.get("last_id").and_then(Value::as_u64),
            });
        }
        204 => on(Event::PollDone { last_id: None }),
        s => return Err(perr(format!("HTTP {s}"))),
    }
    Ok(Some(total))
}
