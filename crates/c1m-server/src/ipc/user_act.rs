//! What the server API asks every worker to do to a user's (or one connection's)
//! connections: [`UserAct`], carried by `ToWorker::ApiAct` and answered by
//! `ToMaster::ApiActed` with how many connections it touched.

use c1m_proto::codec::{Reader, Result, Writer};

c1m_proto::wire_tags! {
    /// Whose connections.
    enum TargetTag {
        User = 0,
        Conn = 1,
    }
}

c1m_proto::wire_tags! {
    /// What is done to them.
    enum ActionTag {
        Disconnect = 0,
        Unsubscribe = 1,
        Subscribe = 2,
    }
}

/// Whose connections an act names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every connection whose token's `sub` is this user.
    User(String),
    /// One connection of the worker the frame goes to: its slab token.
    Conn(u64),
}

/// What is done to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Closed, in the protocol's own way; `reconnect` is the advice given with it.
    Disconnect { reconnect: bool },
    /// Taken out of `channel` (told so on SSE and WebSocket).
    Unsubscribe { channel: String },
    /// Added to `channel` as if they had asked (live from now, no replay).
    Subscribe { channel: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAct {
    pub target: Target,
    pub action: Action,
}

impl UserAct {
    pub(super) fn write(&self, w: &mut Writer) {
        match &self.target {
            Target::User(user) => w.u8(TargetTag::User as u8).str(user),
            Target::Conn(token) => w.u8(TargetTag::Conn as u8).u64(*token),
        };
        match &self.action {
            Action::Disconnect { reconnect } => {
                w.u8(ActionTag::Disconnect as u8).bool(*reconnect);
            }
            Action::Unsubscribe { channel } => {
                w.u8(ActionTag::Unsubscribe as u8).str(channel);
            }
            Action::Subscribe { channel } => {
                w.u8(ActionTag::Subscribe as u8).str(channel);
            }
        }
    }

    pub(super) fn read(r: &mut Reader) -> Result<UserAct> {
        let tag = r.u8("act target")?;
        let target = match TargetTag::try_from(tag).map_err(|t| r.bad(format!("act target {t}")))? {
            TargetTag::User => Target::User(r.string("user")?),
            TargetTag::Conn => Target::Conn(r.u64("connection token")?),
        };
        let tag = r.u8("act action")?;
        let action = match ActionTag::try_from(tag).map_err(|t| r.bad(format!("act action {t}")))? {
            ActionTag::Disconnect => Action::Disconnect {
                reconnect: r.bool("reconnect")?,
            },
            ActionTag::Unsubscribe => Action::Unsubscribe {
                channel: r.string("channel")?,
            },
            ActionTag::Subscribe => Action::Subscribe {
                channel: r.string("channel")?,
            },
        };
        Ok(UserAct { target, action })
    }
}
