//! What an operator asks of a configuration before a restart: is it valid
//! (`--check-config`), what will the server actually use and why (`--print-config`), and the
//! reference of every key (docs/CONFIG.md, generated from the same clap definitions as `--help`,
//! so the two cannot drift; a test compares them).

use super::{Config, ServeArgs};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Command};
use std::fmt::Write as _;

/// Arguments that steer `c1m serve` itself and are not configuration keys.
const NOT_KEYS: &[&str] = &["config", "check_config", "print_config"];

/// Keys whose values are secrets: printed as `(set)`.
const SECRET_KEYS: &[&str] = &["publish_key"];

/// `--check-config`: every problem in the configuration, or none. The error case (a file that
/// does not parse) is one problem too.
pub fn check(args: &ServeArgs) -> Vec<String> {
    match args.resolve_unchecked() {
        Ok(cfg) => {
            let mut problems = cfg.problems();
            // The key file, read as the start will read it (TLS files are read by problems()).
            if let Err(e) = crate::auth::Auth::from_config(&cfg) {
                problems.push(format!("{e:#}"));
            }
            problems
        }
        Err(e) => vec![format!("{e:#}")],
    }
}

/// Where one key's value came from (`flag --workers`, `env C1M_WORKERS`, `file`, `default`),
/// reading the `--config` file's keys for the file case.
pub fn source_of(args: &ServeArgs, key: &str, matches: Option<&ArgMatches>) -> String {
    source(key, matches, &file_keys(args))
}

fn file_keys(args: &ServeArgs) -> toml::Table {
    args.config
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| toml::from_str(&t).ok())
        .unwrap_or_default()
}

/// Where one key's value came from.
fn source(key: &str, matches: Option<&ArgMatches>, file_keys: &toml::Table) -> String {
    // The flag and variable as clap spells them (`namespaces` is `--namespace`).
    let cmd = ServeArgs::augment_args(Command::new("serve"));
    let arg = cmd.get_arguments().find(|a| a.get_id() == key);
    match matches.and_then(|m| m.value_source(key)) {
        Some(ValueSource::CommandLine) => match arg.and_then(|a| a.get_long()) {
            Some(long) => format!("flag --{long}"),
            None => format!("flag --{}", key.replace('_', "-")),
        },
        Some(ValueSource::EnvVariable) => match arg.and_then(|a| a.get_env()) {
            Some(env) => format!("env {}", env.to_string_lossy()),
            None => format!("env C1M_{}", key.to_ascii_uppercase()),
        },
        _ if file_keys.contains_key(key) => "file".to_string(),
        _ => "default".to_string(),
    }
}

/// The configuration keys' arguments, in `--help` order (the one list behind `--print-config`
/// and docs/CONFIG.md).
fn key_args(cmd: &Command) -> impl Iterator<Item = &clap::Arg> {
    cmd.get_arguments().filter(|a| {
        let id = a.get_id().as_str();
        !NOT_KEYS.contains(&id) && id != "help"
    })
}

/// `--print-config`: the effective configuration as TOML (valid as a `--config` file), each
/// key followed by where its value came from. Keys that are off are printed commented out.
pub fn print(args: &ServeArgs, cfg: &Config, matches: Option<&ArgMatches>) -> String {
    let file_keys = file_keys(args);
    let values = toml::Value::try_from(cfg)
        .ok()
        .and_then(|v| v.as_table().cloned())
        .unwrap_or_default();
    let mut out = String::from("# c1m serve: effective configuration");
    if let Some(p) = &args.config {
        let _ = write!(out, " (file {})", p.display());
    }
    out.push('\n');
    let cmd = ServeArgs::augment_args(Command::new("serve"));
    for key in key_args(&cmd).map(|a| a.get_id().to_string()) {
        let from = source(&key, matches, &file_keys);
        match values.get(&key) {
            Some(toml::Value::Table(t)) if t.is_empty() => {
                let _ = writeln!(out, "# {key} = ({})  # {from}", cfg.unset_meaning(&key));
            }
            Some(_) if SECRET_KEYS.contains(&key.as_str()) => {
                let _ = writeln!(out, "# {key} = (set, not shown)  # {from}");
            }
            Some(toml::Value::String(url)) if key == "broker" => {
                let shown = toml::Value::String(crate::broker::redis::redact(url));
                let _ = writeln!(out, "{key} = {shown}  # {from}");
            }
            Some(v) => {
                let _ = writeln!(out, "{key} = {v}  # {from}");
            }
            None => {
                let _ = writeln!(out, "# {key} = ({})  # {from}", cfg.unset_meaning(&key));
            }
        }
    }
    out
}

/// docs/CONFIG.md: every key with its flag, environment variable and help text.
pub fn reference() -> String {
    let cmd = ServeArgs::augment_args(Command::new("serve"));
    let mut out = String::from(
        "# `c1m serve` configuration reference\n\n\
         Generated from the same definitions as `c1m serve --help` (a test keeps the two equal:\n\
         `C1M_UPDATE_DOCS=1 cargo test -p c1m-server config_reference` rewrites this file).\n\n\
         Every key can be set three ways; later ones win: the TOML file given with `--config`\n\
         (the key as written here), the environment variable, the flag. `c1m serve\n\
         --print-config` shows the value in effect and where it came from; `c1m serve\n\
         --check-config` lists every problem and exits 2 (0 when valid). SIGHUP re-reads the file\n\
         (docs/PROTOCOL.md, Lifecycle, says which keys apply live).\n\n",
    );
    for arg in key_args(&cmd) {
        let id = arg.get_id().as_str();
        let flag = arg.get_long().unwrap_or(id);
        let env = arg
            .get_env()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let _ = writeln!(out, "## `{id}`\n");
        let _ = writeln!(out, "Flag `--{flag}`, environment `{env}`.\n");
        let _ = writeln!(out, "{}\n", help.trim());
    }
    out.push_str(NAMESPACES_DOC);
    out
}

/// docs/CONFIG.md's section on channel namespaces (the `namespaces` key in depth).
const NAMESPACES_DOC: &str = r#"# Channel namespaces

Options can differ per group of channels. The **namespace** of a channel is the part of its
name before the first `:` — `chat:room1` and `chat:lobby:2` are in namespace `chat`. A channel
name without `:` (`news`), or whose prefix is not a configured namespace (`misc:x`), uses the
global options. Namespace names are 1–64 bytes of `[A-Za-z0-9_-]` (channel names also allow
`.` and `:`, so `a.b:c` is in no namespace).

In the TOML file, one table per namespace; on the command line (or `C1M_NAMESPACE`, comma
separated), `--namespace NAME:key=value`, repeatable, applied on top of the file's tables:

```toml
history_size = 100            # the global options
ws_client_publish = false

[namespaces.chat]
history_size = 500            # chat:* channels keep 500 messages
history_age = "1h"
client_publish = true         # WebSocket clients may publish to chat:* channels
max_subscribers = 10000

[namespaces.private]
auth_required = true          # a valid token is needed even with auth = "off" or "optional"
```

```
c1m serve --namespace chat:history_size=500 --namespace chat:client_publish=true
```

| key | value | unset: inherits | what it does |
|---|---|---|---|
| `history_size` | count ≥ 1 | `history_size` | messages kept per channel for resume |
| `history_age` | duration > 0 | `history_age` | longest a message stays in history |
| `history_max_bytes` | bytes ≥ one message of `max_payload` + 64 | no per-channel bound | bytes of history one channel may hold (the in-process hub; the global `history_max_bytes` still bounds all channels together; Redis is bounded by its `maxmemory`) |
| `presence` | bool | off | presence is kept for these channels (stored and shown; used by the presence feature) |
| `join_leave` | bool | off | subscribers get join/leave events (stored and shown; used by the presence feature) |
| `client_publish` | bool | `ws_client_publish` | WebSocket clients may publish to these channels, under the same publish rule (key or loopback); a client message to a channel whose namespace forbids it closes the WebSocket with 1008 (`refused.forbidden`) |
| `auth_required` | bool | off | subscribing needs a valid token granting the channel, as with `auth = "required"`, whatever `auth` says (needs `jwt_key`); no token: 401 (`refused.unauthorized`); raw TCP (no token): `ERR` |
| `max_subscribers` | count ≥ 1 | no limit | subscribers one channel may have on the node: split among the subscriber workers (each checks its part without a round trip; the remainder goes to the first workers, so a channel may refuse on one worker while another still has room); one more gets 503 + `Retry-After: 5` (SSE, long-poll), WebSocket close 1013, raw TCP `ERR`, counted as `refused.max_subscribers` |
| `proxy_subscribe` | bool | on when `proxy_subscribe_url` is set | subscribes to these channels are asked of the subscribe proxy (docs/PROTOCOL.md, Backend proxies); `true` needs `proxy_subscribe_url` |
| `proxy_publish` | bool | on when `proxy_publish_url` is set | WebSocket client publishes to these channels are asked of the publish proxy; `true` needs `proxy_publish_url` |

`--check-config` refuses an unknown key, a value of the wrong type or range, and a bad
namespace name, each named, with exit code 2. `/status` shows every namespace with its resolved
options under `namespaces`.

**Reload.** SIGHUP applies changed namespaces live. A subscribe, client publish or publish
after the reload uses the new options; subscribers already in a channel stay even past a new,
lower `max_subscribers`. History already held over a new, smaller `history_size` or
`history_max_bytes` is dropped at once (oldest first; a client resuming from before it gets a
gap event); over a new, shorter `history_age` it goes at the next expiry pass (within a
second). With Redis, a channel's stream is trimmed to the new bounds at its next publish, and
a resume over several channels reads with the widest count and age among them.
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn config_reference_matches_the_flags() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CONFIG.md");
        let want = reference();
        if std::env::var_os("C1M_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/CONFIG.md is out of date with the serve flags: run \
             `C1M_UPDATE_DOCS=1 cargo test -p c1m-server config_reference`"
        );
    }

    #[test]
    fn check_lists_every_problem_not_just_the_first() {
        let args = ServeArgs {
            max_conns: Some(0),
            ws_max_message: Some(0),
            publish_key: Some(String::new()),
            ..Default::default()
        };
        let problems = check(&args);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(check(&ServeArgs::default()).is_empty());
    }

    #[test]
    fn print_names_the_fallbacks_that_apply() {
        let args = ServeArgs {
            tcp_keepalive: Some(std::time::Duration::ZERO),
            cors_origins: Some("https://app.example".into()),
            ..Default::default()
        };
        let cfg = args.resolve().unwrap();
        let text = print(&args, &cfg, None);
        assert!(
            text.contains("# tcp_user_timeout = (off: keepalive is off)  # default"),
            "{text}"
        );
        assert!(
            text.contains("# ws_origins = (the cors_origins list)  # default"),
            "{text}"
        );
        let args = ServeArgs {
            tcp_user_timeout: Some(std::time::Duration::from_secs(45)),
            ..Default::default()
        };
        let cfg = args.resolve().unwrap();
        assert!(print(&args, &cfg, None).contains("tcp_user_timeout = \"45s\""));
    }

    #[test]
    fn print_is_a_config_file_that_resolves_to_the_same_values() {
        let args = ServeArgs {
            max_conns: Some(1234),
            publish_key: Some("pk-value-0x51".into()),
            ..Default::default()
        };
        let cfg = args.resolve().unwrap();
        let text = print(&args, &cfg, None);
        // (A value no key name contains: `webhook_secret_file` is a key.)
        assert!(!text.contains("pk-value-0x51"), "{text}");
        assert!(text.contains("max_conns = 1234  # default"), "{text}");
        assert!(text.contains("# tcp_listen = (off)  # default"), "{text}");
        // Keys that fall back to another value say which, as --help does.
        assert!(
            text.contains(
                "# tcp_user_timeout = (keepalive idle + interval x count: 2m)  # default"
            ),
            "{text}"
        );
        assert!(
            text.contains("# ws_origins = (any origin)  # default"),
            "{text}"
        );
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.max_conns, 1234);
        assert_eq!(back.history_age, cfg.history_age);
    }
}
