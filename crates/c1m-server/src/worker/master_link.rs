//! The link to the master: sending (a failure ends the loop: the master starts a fresh
//! worker), congestion, reading frames (paused while too many fan-outs are queued), and what
//! each frame from the master does here.

use super::{Joined, Worker};
use crate::ipc::{ToMaster, ToWorker};
use anyhow::Context;
use std::time::Duration;

impl Worker {
    pub(super) fn send_to_master(&mut self, msg: ToMaster) {
        if let Err(e) = self.link.send(msg.encode()) {
            self.link_failed.get_or_insert(e);
        }
    }

    /// The master is behind on this worker's requests: new publishes and joins are refused
    /// (503 with Retry-After) instead of queueing without bound.
    pub(super) fn master_congested(&self) -> bool {
        self.link.is_congested()
    }

    /// Reads and handles the master's frames; false when the worker must exit (the master is
    /// gone: it also kills us via PR_SET_PDEATHSIG).
    pub(super) fn serve_master_link(&mut self, readable: bool, writable: bool) -> bool {
        match self.on_master_event(readable, writable) {
            Ok(open) => open,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "master link lost; exiting");
                false
            }
        }
    }

    /// Returns Ok(false) when the master closed the link. A writable-only edge (the master
    /// drained some of ours) flushes and reads nothing.
    pub(super) fn on_master_event(
        &mut self,
        readable: bool,
        writable: bool,
    ) -> anyhow::Result<bool> {
        if writable {
            self.link.flush()?;
        }
        if !readable {
            return Ok(true);
        }
        if self.fan_outs_full() {
            self.link_read_paused = true;
            return Ok(true);
        }
        let mut frames = Vec::new();
        let open = self
            .link
            .read_frames(|f| frames.push(ToWorker::decode(f)))?;
        let frames = frames
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .context("bad frame from master")?;
        // Replies to a waiting publisher or status client go first: they need no ordering, and
        // behind a fan-out to thousands of sockets they would wait for nothing. Messages and
        // join answers keep their order (a replay must come before later live messages).
        let (replies, ordered): (Vec<_>, Vec<_>) = frames.into_iter().partition(|f| {
            matches!(
                f,
                ToWorker::Published { .. }
                    | ToWorker::PublishRefused { .. }
                    | ToWorker::Status { .. }
                    | ToWorker::Health { .. }
                    | ToWorker::ApiAnswer { .. }
            )
        });
        for frame in replies.into_iter().chain(ordered) {
            self.on_frame(frame);
        }
        // Frames read while a hand-over waited for its new worker, in their order.
        while !self.handover.stashed.is_empty() {
            for frame in std::mem::take(&mut self.handover.stashed) {
                self.on_frame(frame);
            }
        }
        Ok(open)
    }

    pub(super) fn on_frame(&mut self, frame: ToWorker) {
        if self.handover.sent.is_some()
            && !matches!(frame, ToWorker::HandOverCommit | ToWorker::HandOverAbort)
        {
            // Handed over: the connections are the new worker's; not a byte more from here.
            tracing::warn!("upgrade: frame for handed-over connections ignored");
            return;
        }
        match frame {
            ToWorker::Message {
                channel,
                id,
                payload,
                published_us,
            } => self.fan_out(&channel, id, payload, published_us),
            ToWorker::Published { req, channel, id } => self.on_published(req, &channel, id),
            ToWorker::Joined {
                req,
                current_id,
                channels,
                replay,
                more,
            } => {
                // Ordered after the messages sent before it: those go out first.
                self.finish_fan_outs();
                self.on_joined(
                    req,
                    Joined {
                        current_id,
                        channels,
                        replay,
                        more,
                    },
                )
            }
            ToWorker::PublishRefused {
                req,
                retry_after_s,
                broker,
            } => self.on_publish_refused(req, retry_after_s, &broker),
            ToWorker::Status { req, body, metrics } => self.on_status(req, body, metrics),
            ToWorker::Health { req, problem } => self.on_health(req, problem),
            ToWorker::ApiAnswer { req, status, body } => self.on_api_answer(req, status, body),
            ToWorker::ApiAct { op, act } => {
                // Ordered after the messages sent before it (a kicked stream gets those first).
                self.finish_fan_outs();
                self.on_api_act(op, act)
            }
            ToWorker::Shutdown => self.begin_shutdown(),
            ToWorker::Steer { cpu, until } => self.steer(cpu, until),
            ToWorker::Reconfigure { json } => self.reconfigure(&json),
            ToWorker::Secrets(secrets) => self.secrets = secrets,
            ToWorker::JoinRefused { req, retry_after_s } => {
                self.on_join_refused(req, retry_after_s)
            }
            ToWorker::Gap {
                channel,
                after,
                through,
            } => {
                self.finish_fan_outs();
                self.fan_out_gap(&channel, after, through)
            }
            ToWorker::Dashboard { json } => self.push_dashboard(&json),
            ToWorker::PresenceEvents { events } => {
                // Ordered after the messages sent before them.
                self.finish_fan_outs();
                self.deliver_presence_events(events)
            }
            ToWorker::HandOverPrepare => self.handover_prepare(),
            ToWorker::HandOverGo {
                name,
                new_master_pid,
                timeout_ms,
            } => self.handover_go(&name, new_master_pid, Duration::from_millis(timeout_ms)),
            ToWorker::HandOverCommit => self.handover_commit(),
            ToWorker::HandOverAbort => self.handover_abort(),
        }
    }
}
