//! What a channel's namespace decides in the worker: whether a subscribe needs a token
//! (`auth_required`), whether the channel has room for one more subscriber here
//! (`max_subscribers`), and whether WebSocket clients may publish to it (`client_publish`).
//! The options come from [`crate::config::Namespaces`], looked up per subscribe or per client
//! message by channel name; nothing is stored per connection or per membership.

use super::requests::Transport;
use super::Worker;
use c1m_proto::line;
use c1m_proto::ws::close;

/// This worker's part of a channel's `max_subscribers`: the limit split among the node's
/// `workers` subscriber workers, the remainder to the first ones, so the parts add up to the
/// limit exactly and a worker checks its part without asking anyone (no round trip on the
/// subscribe path). A worker beyond them (the control worker) has no part. The price: the
/// kernel spreads connections over the workers' sockets by hash, so a channel can refuse on
/// one worker while another still has room (by at most the spread's unevenness).
pub fn share(max: u32, workers: u32, index: u32) -> u32 {
    let workers = workers.max(1);
    if index >= workers {
        return 0;
    }
    max / workers + u32::from(index < max % workers)
}

/// Seconds a subscriber refused for a full channel is told to wait.
const FULL_RETRY_AFTER_S: u64 = 5;

impl Worker {
    /// Some of `channels` is in a namespace that needs a token to subscribe.
    pub(super) fn token_required(&self, channels: &[&str]) -> bool {
        self.namespaces.any_auth_required()
            && channels
                .iter()
                .any(|c| self.namespaces.namespace_of(c).auth_required)
    }

    /// Subscribers may show tokens: auth is on, or some namespace requires one (its held
    /// streams then refresh their tokens as under `--auth`).
    pub(super) fn tokens_read(&self) -> bool {
        self.auth.mode != crate::config::AuthMode::Off || self.namespaces.any_auth_required()
    }

    /// Refuses a subscribe its channels' namespaces do not allow, answering in the
    /// transport's way and counting it; true when refused. Raw TCP carries no token, so a
    /// channel that needs one is refused there; a channel at this worker's part of its
    /// `max_subscribers` ([`share`]) refuses one more.
    pub(super) fn refuse_by_namespace(
        &mut self,
        idx: usize,
        channels: &[&str],
        transport: &Transport,
    ) -> bool {
        if matches!(transport, Transport::Tcp) && self.token_required(channels) {
            self.counters.refused.unauthorized += 1;
            let why = "this channel's namespace requires a token; the raw TCP protocol carries \
                       none (subscribe over HTTP or WebSocket)";
            self.reply_and_close(idx, line::encode_err(why));
            return true;
        }
        if !self.namespaces.any_max_subscribers() {
            return false;
        }
        let full = channels.iter().find_map(|name| {
            let max = self.namespaces.namespace_of(name).max_subscribers?;
            let mine = share(max, self.subscriber_workers, self.index);
            let here = self
                .channels
                .lookup(name)
                .and_then(|c| self.channels.get(c))
                .map_or(0, |c| c.members.len());
            (here >= mine as usize).then(|| (name.to_string(), max))
        });
        let Some((name, max)) = full else {
            return false;
        };
        self.counters.refused.max_subscribers += 1;
        match transport {
            Transport::Tcp => {
                let why = format!("channel {name} is full ({max} subscribers); retry later");
                self.reply_and_close(idx, line::encode_err(&why));
            }
            // The close reason must fit a control frame (123 bytes): the name is left out.
            Transport::Ws => self.ws_close(
                idx,
                close::TRY_AGAIN_LATER,
                "channel is full (max_subscribers); retry later",
            ),
            Transport::Sse | Transport::LongPoll => {
                let why = format!(
                    "channel {name} is full: its namespace allows {max} subscribers per channel \
                     on this node; retry after the given seconds"
                );
                let extra = format!("Retry-After: {FULL_RETRY_AFTER_S}\r\n");
                let answer = self.error_answer(idx, 503, &why, &extra);
                self.reply_and_close(idx, answer);
            }
        }
        true
    }

    /// Some channel of this connection lets clients publish (its namespace's
    /// `client_publish`, else `--ws-client-publish`).
    pub(super) fn may_client_publish_somewhere(&self, idx: usize) -> bool {
        self.conns[idx]
            .channel_indices()
            .into_iter()
            .filter_map(|c| self.channels.get(c))
            .any(|ch| self.namespaces.namespace_of(&ch.name).client_publish)
    }

    /// Clients may publish to `channel`.
    pub(super) fn client_publish_on(&self, channel: &str) -> bool {
        self.namespaces.namespace_of(channel).client_publish
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn the_parts_add_up_to_the_limit() {
        for (max, workers) in [(10, 3), (1, 4), (7, 1), (100, 7), (3, 3)] {
            let parts: Vec<u32> = (0..workers).map(|i| share(max, workers, i)).collect();
            assert_eq!(
                parts.iter().sum::<u32>(),
                max,
                "{max} over {workers}: {parts:?}"
            );
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
        }
        assert_eq!(share(10, 2, 2), 0, "the control worker has no part");
    }
}
