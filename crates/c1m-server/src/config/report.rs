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
    match matches.and_then(|m| m.value_source(key)) {
        Some(ValueSource::CommandLine) => format!("flag --{}", key.replace('_', "-")),
        Some(ValueSource::EnvVariable) => {
            format!("env C1M_{}", key.to_ascii_uppercase())
        }
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
    out
}

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
