//! SIGHUP: re-read the configuration (file, then the same flags and environment as at start),
//! apply what can change live, keep the rest, and tell the workers. An invalid file is refused
//! with a logged error and the running configuration stays, with the running key material:
//! restarted workers are spawned with the master's `cfg` and the key bytes it last accepted
//! (`crate::secrets`), never with what is on disk now.

use super::Master;
use crate::config::{Config, ServeArgs};
use crate::ipc::ToWorker;

/// Keys that need a restart: sockets, processes and per-worker shares are set up once.
const RESTART_KEYS: &[&str] = &[
    "listen",
    // The broker connection is made once at start.
    "broker",
    "broker_ca",
    "tcp_listen",
    "workers",
    "max_conns",
    "backlog",
    // Workers set their priority once, at start.
    "worker_nice",
    // Workers read the per-IP limits once at start (the shared table is sized then).
    "max_conns_per_ip",
    "max_new_conns_per_ip_per_sec",
    "per_ip_limit_loopback",
    // A listening socket, bound by each worker at start.
    "admin_listen",
    // What the admin listener speaks, like TLS on or off for the others.
    "admin_tls",
    // What ALPN offers is set when the TLS configuration is built; h2c follows it.
    "no_http2",
];

/// The running configuration with `new`'s live values, the live keys that changed, and the
/// changed keys that were kept because they need a restart.
pub fn merge(current: &Config, new: &Config) -> anyhow::Result<(Config, Vec<String>, Vec<String>)> {
    let mut new = new.clone();
    // `--listen HOST:0` asks for any port: the one we got is not a change.
    if new.listen.port() == 0 && new.listen.ip() == current.listen.ip() {
        new.listen = current.listen;
    }
    for (n, c) in [
        (&mut new.tcp_listen, current.tcp_listen),
        (&mut new.admin_listen, current.admin_listen),
    ] {
        if let (Some(n), Some(c)) = (n, c) {
            if n.port() == 0 && n.ip() == c.ip() {
                *n = c;
            }
        }
    }
    let serde_json::Value::Object(mut merged) = serde_json::to_value(current)? else {
        anyhow::bail!("configuration is not a JSON object");
    };
    let serde_json::Value::Object(wanted) = serde_json::to_value(&new)? else {
        anyhow::bail!("configuration is not a JSON object");
    };
    let (mut live, mut restart) = (Vec::new(), Vec::new());
    // TLS on or off changes what the listeners speak: that needs a restart. New files for a
    // TLS server apply live (new handshakes use them).
    let tls_switched = current.tls_cert.is_some() != new.tls_cert.is_some();
    for (key, value) in wanted {
        if merged.get(&key) == Some(&value) {
            continue;
        }
        let tls_key = key == "tls_cert" || key == "tls_key";
        if RESTART_KEYS.contains(&key.as_str()) || (tls_key && tls_switched) {
            restart.push(key);
        } else {
            merged.insert(key.clone(), value);
            live.push(key);
        }
    }
    let merged: Config = serde_json::from_value(serde_json::Value::Object(merged))?;
    // The new live values must also hold together with the kept ones.
    merged.validate()?;
    Ok((merged, live, restart))
}

impl Master {
    /// Where SIGHUP re-reads the configuration from.
    pub fn set_reload_source(&mut self, args: ServeArgs) {
        self.reload_source = Some(args);
    }

    pub(super) fn reload(&mut self) {
        let Some(args) = &self.reload_source else {
            tracing::warn!("SIGHUP: no configuration source; nothing reloaded");
            return;
        };
        let new = match args.resolve() {
            Ok(new) => new,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "SIGHUP: configuration rejected, keeping the running one");
                return;
            }
        };
        let (merged, live, restart) = match merge(&self.cfg, &new) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "SIGHUP: configuration rejected, keeping the running one");
                return;
            }
        };
        if !restart.is_empty() {
            tracing::warn!(keys = %restart.join(", "), "SIGHUP: changed but needs a restart (kept)");
        }
        // The certificate files may have new contents under the same names (renewal): with
        // TLS on, every SIGHUP makes the workers re-read them (merge checked that they load).
        let tls_reload = merged.tls_cert.is_some();
        if live.is_empty() && !tls_reload {
            tracing::info!("SIGHUP: configuration re-read; nothing to change live");
            return;
        }
        // Read once, here: the workers get these bytes, so what was checked is what they use.
        let secrets = match crate::secrets::Secrets::read(&merged) {
            Ok(secrets) => secrets,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "SIGHUP: configuration rejected, keeping the running one");
                return;
            }
        };
        if live.is_empty() {
            tracing::info!("SIGHUP: TLS certificate re-read");
        } else {
            tracing::info!(keys = %live.join(", "), "SIGHUP: applied");
        }
        self.broker.set_limits(crate::broker::Limits::new(&merged));
        let json = match serde_json::to_string(&merged) {
            Ok(json) => json,
            Err(e) => return tracing::error!(error = %e, "SIGHUP: encoding the configuration"),
        };
        self.cfg = merged;
        self.secrets = secrets;
        let keys = ToWorker::Secrets(self.secrets.clone()).encode();
        let frame = ToWorker::Reconfigure { json }.encode();
        for i in 0..self.slots.len() {
            self.send(i, keys.clone());
            self.send(i, frame.clone());
        }
        self.steer_after_reload();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn live_keys_apply_and_restart_keys_are_kept() {
        let current = Config {
            listen: "127.0.0.1:4000".parse().unwrap(),
            ..Config::default()
        };
        let new = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            max_conns: 7,
            max_conns_per_ip: Some(3),
            max_payload: 10,
            sse_heartbeat: Some(Duration::from_secs(2)),
            ..Config::default()
        };
        let (merged, live, restart) = merge(&current, &new).unwrap();
        assert_eq!(live, vec!["max_payload", "sse_heartbeat"]);
        assert_eq!(restart, vec!["max_conns", "max_conns_per_ip"]);
        assert_eq!(merged.max_payload, 10);
        assert_eq!(merged.max_conns, current.max_conns);
        assert_eq!(merged.listen, current.listen);
    }

    #[test]
    fn an_admin_listener_on_port_0_is_not_a_change_and_moving_it_needs_a_restart() {
        let current = Config {
            admin_listen: Some("127.0.0.1:9180".parse().unwrap()),
            ..Config::default()
        };
        let same = Config {
            admin_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..Config::default()
        };
        let (_, live, restart) = merge(&current, &same).unwrap();
        assert!(
            live.is_empty() && restart.is_empty(),
            "{live:?} {restart:?}"
        );
        let moved = Config {
            admin_listen: Some("127.0.0.1:9181".parse().unwrap()),
            admin_publish: true,
            ..Config::default()
        };
        let (merged, live, restart) = merge(&current, &moved).unwrap();
        assert_eq!(
            (live, restart),
            (
                vec!["admin_publish".to_string()],
                vec!["admin_listen".to_string()]
            )
        );
        assert_eq!(merged.admin_listen, current.admin_listen);
    }
}
