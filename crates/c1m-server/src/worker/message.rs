//! A published message as a worker holds it: encoded once per wire format on first use, then
//! shared by reference with every subscriber's queue.

use c1m_proto::longpoll::{self, PollMessage};
use c1m_proto::{http, line, sse, ws};
use std::cell::OnceCell;
use std::rc::Rc;

/// Extra headers on every long-poll answer.
pub const POLL_HEADERS: &str = "Cache-Control: no-cache\r\n";

pub struct Message {
    pub channel: Rc<str>,
    pub id: u64,
    pub payload: Vec<u8>,
    sse_single: OnceCell<Rc<[u8]>>,
    sse_multi: OnceCell<Rc<[u8]>>,
    tcp: OnceCell<Rc<[u8]>>,
    ws_plain: OnceCell<Rc<[u8]>>,
    ws_envelope: OnceCell<Rc<[u8]>>,
    poll_answer: OnceCell<Rc<[u8]>>,
}

impl Message {
    pub fn new(channel: Rc<str>, id: u64, payload: Vec<u8>) -> Message {
        Message {
            channel,
            id,
            payload,
            sse_single: OnceCell::new(),
            sse_multi: OnceCell::new(),
            tcp: OnceCell::new(),
            ws_plain: OnceCell::new(),
            ws_envelope: OnceCell::new(),
            poll_answer: OnceCell::new(),
        }
    }

    /// The SSE event; `multi` adds the `event: {channel}` line.
    pub fn sse(&self, multi: bool) -> &Rc<[u8]> {
        if multi {
            self.sse_multi.get_or_init(|| {
                sse::encode_message(Some(&self.channel), self.id, &self.payload).into()
            })
        } else {
            self.sse_single
                .get_or_init(|| sse::encode_message(None, self.id, &self.payload).into())
        }
    }

    /// The WebSocket frame: the payload itself (text, or binary when not UTF-8), or the JSON
    /// envelope `{"channel","id","data"}`.
    pub fn ws(&self, envelope: bool) -> &Rc<[u8]> {
        if envelope {
            self.ws_envelope.get_or_init(|| {
                ws::encode::envelope_frame(&self.channel, self.id, &self.payload).into()
            })
        } else {
            self.ws_plain
                .get_or_init(|| ws::encode::message_frame(&self.payload).into())
        }
    }

    /// The whole keep-alive long-poll answer carrying just this message (what every waiting
    /// poller gets when it arrives live).
    pub fn poll_answer(&self) -> &Rc<[u8]> {
        self.poll_answer.get_or_init(|| {
            let m = PollMessage {
                channel: &self.channel,
                id: self.id,
                payload: &self.payload,
            };
            let body = longpoll::encode_body(&[m], &[], self.id);
            http::response(200, "application/json", POLL_HEADERS, &body, true).into()
        })
    }

    pub fn tcp(&self) -> &Rc<[u8]> {
        self.tcp
            .get_or_init(|| line::encode_msg(&self.channel, self.id, &self.payload).into())
    }
}
