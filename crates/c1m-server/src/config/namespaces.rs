//! Channel namespaces: options per channel-name prefix. The namespace of a channel is the part
//! of its name before the first `:` (`chat:room1` → `chat`); a name without `:`, or whose
//! prefix is not configured, uses the global options.
//!
//! [`NamespaceOptions`] is what the TOML file (`[namespaces.NAME]`) and the flags
//! (`--namespace NAME:key=value`) set: every key optional, an unset key inheriting the global
//! value. [`Namespaces`] resolves them against the globals once (at start and on each reload)
//! into one [`Resolved`] per namespace, and [`Namespaces::namespace_of`] is the one lookup the
//! hub, the brokers and the workers call: no other module parses a channel's prefix.

use super::Config;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The keys a namespace may set, in the order docs and errors list them.
pub const KEYS: &[&str] = &[
    "history_size",
    "history_age",
    "history_max_bytes",
    "presence",
    "join_leave",
    "client_publish",
    "auth_required",
    "max_subscribers",
    "proxy_subscribe",
    "proxy_publish",
];

/// Most namespaces one configuration may define (the hub keeps a 16-bit index per channel).
pub const MAX_NAMESPACES: usize = 1024;

/// What one namespace sets; `None` inherits the global value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NamespaceOptions {
    /// Messages kept per channel for resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_size: Option<usize>,
    /// Longest a message stays in history.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub history_age: Option<Duration>,
    /// Bytes of history one channel of this namespace may hold (the global
    /// `history_max_bytes` still bounds all channels together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_max_bytes: Option<usize>,
    /// Presence (who is subscribed) is kept for these channels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence: Option<bool>,
    /// Subscribers get join/leave events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_leave: Option<bool>,
    /// WebSocket clients may publish to these channels (global: `ws_client_publish`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_publish: Option<bool>,
    /// Subscribing needs a valid token whatever `auth` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_required: Option<bool>,
    /// Subscribers one channel may have on one worker process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_subscribers: Option<u32>,
    /// Subscribes to these channels are asked of the subscribe proxy (global: whether
    /// `proxy_subscribe_url` is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_subscribe: Option<bool>,
    /// WebSocket client publishes to these channels are asked of the publish proxy (global:
    /// whether `proxy_publish_url` is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_publish: Option<bool>,
}

impl NamespaceOptions {
    /// Sets `key` from its text form (the flag's `key=value`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn count(v: &str) -> Result<u64, String> {
            c1m_proto::count::parse_count(v)
        }
        fn flag(v: &str) -> Result<bool, String> {
            match v {
                "true" | "on" | "yes" | "1" => Ok(true),
                "false" | "off" | "no" | "0" => Ok(false),
                _ => Err(format!("expected true or false, got {v:?}")),
            }
        }
        let bad = |e: String| format!("{key}={value}: {e}");
        match key {
            "history_size" => self.history_size = Some(count(value).map_err(bad)? as usize),
            "history_age" => {
                let d = humantime::parse_duration(value).map_err(|e| bad(e.to_string()))?;
                self.history_age = Some(d);
            }
            "history_max_bytes" => {
                self.history_max_bytes = Some(count(value).map_err(bad)? as usize)
            }
            "presence" => self.presence = Some(flag(value).map_err(bad)?),
            "join_leave" => self.join_leave = Some(flag(value).map_err(bad)?),
            "client_publish" => self.client_publish = Some(flag(value).map_err(bad)?),
            "auth_required" => self.auth_required = Some(flag(value).map_err(bad)?),
            "proxy_subscribe" => self.proxy_subscribe = Some(flag(value).map_err(bad)?),
            "proxy_publish" => self.proxy_publish = Some(flag(value).map_err(bad)?),
            "max_subscribers" => {
                let n = count(value).map_err(bad)?;
                let n = u32::try_from(n).map_err(|_| bad(format!("more than {}", u32::MAX)))?;
                self.max_subscribers = Some(n);
            }
            _ => {
                return Err(format!(
                    "unknown namespace key {key:?}; the keys are {}",
                    KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }
}

/// True for a namespace name: 1–64 bytes of `[A-Za-z0-9_-]`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= c1m_proto::channel::MAX_CHANNEL_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The namespace part of a channel name: before the first `:`, if any.
pub fn prefix_of(channel: &str) -> Option<&str> {
    channel.split_once(':').map(|(ns, _)| ns)
}

/// One `--namespace NAME:key=value` flag, checked when parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceFlag {
    pub name: String,
    pub key: String,
    pub value: String,
}

impl std::str::FromStr for NamespaceFlag {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let form = "expected NAME:key=value, e.g. chat:history_size=500";
        let (name, setting) = s.split_once(':').ok_or(form)?;
        let (key, value) = setting.split_once('=').ok_or(form)?;
        if !is_valid_name(name) {
            return Err(format!(
                "bad namespace name {name:?}: 1-64 bytes of [A-Za-z0-9_-]"
            ));
        }
        NamespaceOptions::default().set(key, value)?;
        Ok(NamespaceFlag {
            name: name.to_string(),
            key: key.to_string(),
            value: value.to_string(),
        })
    }
}

/// A namespace's options with every key resolved against the globals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub history_size: usize,
    #[serde(with = "humantime_serde")]
    pub history_age: Duration,
    /// Per channel; for the global options, the bound over all channels (`history_max_bytes`).
    pub history_max_bytes: usize,
    pub presence: bool,
    pub join_leave: bool,
    pub client_publish: bool,
    pub auth_required: bool,
    /// None: no limit.
    pub max_subscribers: Option<u32>,
    pub proxy_subscribe: bool,
    pub proxy_publish: bool,
}

/// Every namespace resolved, and the global options for the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespaces {
    /// Index 0: the global options; then the namespaces in name order.
    resolved: Vec<Resolved>,
    names: Vec<String>,
    by_name: HashMap<String, u16>,
}

impl Namespaces {
    /// Resolves `cfg.namespaces` against `cfg`'s globals.
    pub fn new(cfg: &Config) -> Namespaces {
        let global = Resolved {
            history_size: cfg.history_size,
            history_age: cfg.history_age,
            history_max_bytes: cfg.history_max_bytes,
            presence: cfg.presence,
            join_leave: cfg.join_leave,
            client_publish: cfg.ws_client_publish,
            auth_required: false,
            max_subscribers: None,
            proxy_subscribe: cfg.proxy_subscribe_url.is_some(),
            proxy_publish: cfg.proxy_publish_url.is_some(),
        };
        Namespaces::with(global, &cfg.namespaces)
    }

    /// No namespace: every channel has the same history bounds (tests of the hub).
    pub fn uniform(history_size: usize, history_age: Duration, history_max_bytes: usize) -> Self {
        let cfg = Config {
            history_size,
            history_age,
            history_max_bytes,
            ..Config::default()
        };
        Namespaces::with(Namespaces::new(&cfg).global().clone(), &BTreeMap::new())
    }

    fn with(global: Resolved, set: &BTreeMap<String, NamespaceOptions>) -> Namespaces {
        let mut out = Namespaces {
            resolved: vec![global.clone()],
            names: vec![String::new()],
            by_name: HashMap::new(),
        };
        for (name, o) in set.iter().take(MAX_NAMESPACES) {
            let g = &global;
            out.by_name.insert(name.clone(), out.resolved.len() as u16);
            out.names.push(name.clone());
            out.resolved.push(Resolved {
                history_size: o.history_size.unwrap_or(g.history_size),
                history_age: o.history_age.unwrap_or(g.history_age),
                history_max_bytes: o.history_max_bytes.unwrap_or(g.history_max_bytes),
                presence: o.presence.unwrap_or(g.presence),
                join_leave: o.join_leave.unwrap_or(g.join_leave),
                client_publish: o.client_publish.unwrap_or(g.client_publish),
                auth_required: o.auth_required.unwrap_or(g.auth_required),
                max_subscribers: o.max_subscribers.or(g.max_subscribers),
                proxy_subscribe: o.proxy_subscribe.unwrap_or(g.proxy_subscribe),
                proxy_publish: o.proxy_publish.unwrap_or(g.proxy_publish),
            });
        }
        out
    }

    /// The global options (channels outside every namespace).
    pub fn global(&self) -> &Resolved {
        &self.resolved[0]
    }

    /// The index of `channel`'s namespace (0: the global options), for callers that keep it
    /// per channel instead of looking the name up again.
    pub fn index_of(&self, channel: &str) -> u16 {
        if self.by_name.is_empty() {
            return 0;
        }
        prefix_of(channel)
            .and_then(|ns| self.by_name.get(ns).copied())
            .unwrap_or(0)
    }

    /// The options of namespace `index` ([`Namespaces::index_of`]); the global ones for an
    /// index this table does not have.
    pub fn get(&self, index: u16) -> &Resolved {
        self.resolved
            .get(index as usize)
            .unwrap_or(&self.resolved[0])
    }

    /// The options that apply to `channel`.
    pub fn namespace_of(&self, channel: &str) -> &Resolved {
        self.get(self.index_of(channel))
    }

    /// The name of `channel`'s namespace, when it has a configured one.
    pub fn name_of(&self, channel: &str) -> Option<&str> {
        match self.index_of(channel) {
            0 => None,
            i => Some(&self.names[i as usize]),
        }
    }

    /// Presence is kept for `channel` (for the presence feature).
    pub fn presence_enabled(&self, channel: &str) -> bool {
        self.namespace_of(channel).presence
    }

    /// `channel`'s subscribers get join/leave events (for the presence feature): only where
    /// presence is kept, since the events come from its member changes.
    pub fn join_leave_enabled(&self, channel: &str) -> bool {
        let ns = self.namespace_of(channel);
        ns.join_leave && ns.presence
    }

    /// Some namespace limits subscribers per channel (the worker skips the count otherwise).
    pub fn any_max_subscribers(&self) -> bool {
        self.resolved.iter().any(|r| r.max_subscribers.is_some())
    }

    /// Some namespace asks the subscribe proxy.
    pub fn any_proxy_subscribe(&self) -> bool {
        self.resolved.iter().any(|r| r.proxy_subscribe)
    }

    /// Some namespace needs a token to subscribe.
    pub fn any_auth_required(&self) -> bool {
        self.resolved.iter().any(|r| r.auth_required)
    }

    /// `/status` `namespaces`: each configured namespace with its resolved options.
    pub fn status_json(&self) -> serde_json::Value {
        let map = self
            .names
            .iter()
            .zip(&self.resolved)
            .skip(1)
            .map(|(name, r)| {
                let value = serde_json::to_value(r).unwrap_or_default();
                (name.clone(), value)
            })
            .collect();
        serde_json::Value::Object(map)
    }
}

impl Config {
    /// Applies `--namespace` flags on top of the file's `[namespaces.*]` tables.
    pub(super) fn apply_namespace_flags(&mut self, flags: &[NamespaceFlag]) -> Result<(), String> {
        for f in flags {
            self.namespaces
                .entry(f.name.clone())
                .or_default()
                .set(&f.key, &f.value)?;
        }
        Ok(())
    }

    /// What the namespaces must satisfy (`--check-config`, start and reload).
    pub(super) fn namespace_problems(&self, one_message: usize) -> Vec<String> {
        let mut problems = Vec::new();
        if self.namespaces.len() > MAX_NAMESPACES {
            problems.push(format!(
                "{} namespaces configured; at most {MAX_NAMESPACES}",
                self.namespaces.len()
            ));
        }
        for (name, o) in &self.namespaces {
            let mut problem = |what: String| problems.push(format!("namespace {name:?}: {what}"));
            if !is_valid_name(name) {
                problem("bad name: 1-64 bytes of [A-Za-z0-9_-] (the part of a channel name before its first `:`)".to_string());
            }
            if o.history_size == Some(0) {
                problem("history_size must be at least 1 (resume needs history)".to_string());
            }
            if o.history_age.is_some_and(|d| d.is_zero()) {
                problem("history_age must be more than 0".to_string());
            }
            if o.history_max_bytes.is_some_and(|b| b < one_message) {
                problem(format!(
                    "history_max_bytes {} cannot hold one message of --max-payload {}; raise it to \
                     at least {one_message}",
                    o.history_max_bytes.unwrap_or(0),
                    self.max_payload
                ));
            }
            if o.max_subscribers == Some(0) {
                problem("max_subscribers must be at least 1 (leave it out for no limit)".into());
            }
            if o.proxy_subscribe == Some(true) && self.proxy_subscribe_url.is_none() {
                problem("proxy_subscribe needs --proxy-subscribe-url".to_string());
            }
            if o.proxy_publish == Some(true) && self.proxy_publish_url.is_none() {
                problem("proxy_publish needs --proxy-publish-url".to_string());
            }
            if o.auth_required == Some(true) && self.jwt_key.is_none() {
                problem("auth_required needs --jwt-key FILE to verify tokens".to_string());
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> Config {
        toml::from_str(toml_text).unwrap_or_else(|e| panic!("{toml_text}: {e}"))
    }

    #[test]
    fn the_namespace_is_the_prefix_before_the_first_colon() {
        let cfg = config(
            "history_size = 100\nws_client_publish = true\n\
             [namespaces.chat]\nhistory_size = 5\nclient_publish = false\n\
             [namespaces.notify]\nhistory_age = \"10s\"\nmax_subscribers = 3\n",
        );
        let ns = Namespaces::new(&cfg);
        assert_eq!(ns.namespace_of("chat:room1").history_size, 5);
        assert_eq!(ns.namespace_of("chat:a:b").history_size, 5);
        assert!(!ns.namespace_of("chat:room1").client_publish);
        // No colon, an unknown prefix, or the prefix alone: the globals.
        for global in ["chat", "news:x", "chat.room", ":x", "chatx:y"] {
            assert_eq!(ns.index_of(global), 0, "{global}");
            assert_eq!(ns.namespace_of(global), ns.global(), "{global}");
        }
        let notify = ns.namespace_of("notify:u1");
        assert_eq!(notify.history_size, 100, "unset keys inherit the globals");
        assert!(notify.client_publish);
        assert_eq!(notify.history_age, Duration::from_secs(10));
        assert_eq!(notify.max_subscribers, Some(3));
        assert_eq!(ns.name_of("notify:u1"), Some("notify"));
        assert!(ns.any_max_subscribers() && !ns.any_auth_required());
        let status = ns.status_json();
        assert_eq!(status["chat"]["history_size"], 5);
        assert_eq!(status["notify"]["history_age"], "10s");
    }

    #[test]
    fn flags_parse_and_refuse_what_they_cannot_set() {
        let f: NamespaceFlag = "chat:history_age=1m".parse().unwrap();
        assert_eq!((f.name.as_str(), f.key.as_str()), ("chat", "history_age"));
        for (bad, says) in [
            ("chat", "NAME:key=value"),
            ("chat:history_size", "NAME:key=value"),
            ("chat:colour=red", "unknown namespace key"),
            ("chat:history_size=lots", "history_size=lots"),
            ("chat:presence=maybe", "true or false"),
            ("bad.name:presence=true", "bad namespace name"),
        ] {
            let err = bad.parse::<NamespaceFlag>().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        let mut cfg = config("[namespaces.chat]\nhistory_size = 5\n");
        cfg.apply_namespace_flags(&[
            "chat:presence=true".parse().unwrap(),
            "rooms:max_subscribers=10".parse().unwrap(),
        ])
        .unwrap();
        assert_eq!(cfg.namespaces["chat"].history_size, Some(5));
        assert_eq!(cfg.namespaces["chat"].presence, Some(true));
        assert_eq!(cfg.namespaces["rooms"].max_subscribers, Some(10));
    }

    #[test]
    fn bad_tables_are_refused() {
        assert!(toml::from_str::<Config>("[namespaces.chat]\ncolour = 1\n").is_err());
        assert!(toml::from_str::<Config>("[namespaces.chat]\nhistory_size = \"x\"\n").is_err());
        let cfg = config(
            "[namespaces.\"bad name\"]\npresence = true\n\
             [namespaces.zero]\nhistory_size = 0\nmax_subscribers = 0\nauth_required = true\n",
        );
        let problems = cfg.namespace_problems(1000);
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(problems[0].contains("bad name"), "{problems:#?}");
    }
}
