//! The edge checks that run in the worker before a subscription joins the hub or a publish
//! reaches it: JWT verification and channel grants (`key`, `grants`, `token`), and CORS
//! (`cors`). Owns the decisions and their wire answers' wording; the worker owns the sockets,
//! the counters and the expiry timers.
//!
//! A held connection keeps only its expiry and its user id (the token's `sub`, when it has
//! one): the token is verified once, at subscribe (or at a WebSocket refresh), and its expiry
//! becomes the connection's timer-wheel deadline.

pub mod cors;
pub mod grants;
pub mod key;
pub mod token;

use crate::config::{AuthMode, Config};
use anyhow::Context;
use c1m_proto::http::Request;
use key::{Claims, Verifier};

/// A subscribe or publish turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or one that does not verify (HTTP 401, WebSocket close 4001).
    Unauthorized(std::borrow::Cow<'static, str>),
    /// A valid token that does not grant this channel (HTTP 403, WebSocket close 4003).
    Forbidden(String),
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Unauthorized(_) => 401,
            Refusal::Forbidden(_) => 403,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Refusal::Unauthorized(m) => m,
            Refusal::Forbidden(m) => m,
        }
    }
}

/// What a subscriber proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Auth is off, or optional and no token was shown: no expiry, no user.
    Anonymous,
    /// A valid token: the connection ends at `exp_ms` (Unix milliseconds) unless refreshed,
    /// and belongs to the token's `sub`, when it names one.
    Until {
        exp_ms: u64,
        user: Option<Box<str>>,
        /// The token's `info` claim as JSON text (what presence shows about the member).
        info: Option<Box<str>>,
    },
}

/// The worker's auth configuration, built from `Config` at start and on every reload.
pub struct Auth {
    pub mode: AuthMode,
    verifier: Option<Verifier>,
    cookie: Option<String>,
    /// Origins (lower-case, no trailing `/`) whose requests may authenticate with the cookie:
    /// the explicit `--cors-origins` list. A browser sends the cookie with a request from any
    /// site, so a cookie from any other Origin proves nothing about who sent the request.
    cookie_origins: Vec<String>,
    /// The 401 body when no token is shown: where a token may travel, the cookie included.
    missing: String,
    pub cors: cors::Cors,
}

impl Auth {
    /// Reads the key file itself (`--check-config`); the server uses [`Auth::new`] with the
    /// bytes the master read.
    pub fn from_config(cfg: &Config) -> anyhow::Result<Auth> {
        let verifier = match &cfg.jwt_key {
            Some(path) => Some(Verifier::load(path).context("loading the JWT key")?),
            None => None,
        };
        Ok(Auth::with_verifier(cfg, verifier))
    }

    /// From the key bytes the master read (`crate::secrets`).
    pub fn new(cfg: &Config, secrets: &crate::secrets::Secrets) -> anyhow::Result<Auth> {
        let verifier = match (&cfg.jwt_key, &secrets.jwt_key) {
            (Some(path), Some(bytes)) => Some(
                Verifier::from_bytes(bytes)
                    .with_context(|| format!("--jwt-key {}", path.display()))
                    .context("loading the JWT key")?,
            ),
            (Some(path), None) => {
                anyhow::bail!(
                    "--jwt-key {}: no key material from the master",
                    path.display()
                )
            }
            _ => None,
        };
        Ok(Auth::with_verifier(cfg, verifier))
    }

    fn with_verifier(cfg: &Config, verifier: Option<Verifier>) -> Auth {
        let cookie_origins = cfg
            .origin_list()
            .unwrap_or("")
            .split(',')
            .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
            .filter(|o| !o.is_empty() && o != "*")
            .collect();
        let cookie = cfg
            .auth_cookie
            .as_deref()
            .map(|c| format!(", cookie {c}"))
            .unwrap_or_default();
        Auth {
            mode: cfg.auth,
            verifier,
            cookie: cfg.auth_cookie.clone(),
            cookie_origins,
            missing: format!(
                "a token is required: Authorization: Bearer, ?token={cookie}, or subprotocol \
                 c1m.token.JWT"
            ),
            cors: cors::Cors::from_config(cfg),
        }
    }

    /// Judges a subscribe to `channels`.
    /// With `token_required` (a channel's namespace has `auth_required`) it is judged as under
    /// `--auth required`, whatever the mode.
    pub fn subscribe(
        &self,
        req: &Request<'_>,
        channels: &[&str],
        token_required: bool,
    ) -> Result<Grant, Refusal> {
        let mode = if token_required {
            AuthMode::Required
        } else {
            self.mode
        };
        if mode == AuthMode::Off {
            return Ok(Grant::Anonymous);
        }
        match token::find_with_source(req, self.cookie.as_deref()) {
            None if mode == AuthMode::Optional => Ok(Grant::Anonymous),
            None if self.mode != AuthMode::Required => Err(Refusal::Unauthorized(
                format!("the channel's namespace requires a token; {}", self.missing).into(),
            )),
            None => Err(Refusal::Unauthorized(self.missing.clone().into())),
            Some((_, token::Source::Cookie)) if !self.cookie_origin_allowed(req) => {
                Err(Refusal::Forbidden(
                    "the auth cookie is accepted only from the origins listed in --cors-origins \
                     (or from requests without an Origin header)"
                        .to_string(),
                ))
            }
            Some((t, _)) => {
                let (claims, exp_ms) = self.grant(t, channels)?;
                Ok(Grant::Until {
                    exp_ms,
                    info: claims.info_json().map(String::into_boxed_str),
                    user: claims.sub.map(String::into_boxed_str),
                })
            }
        }
    }

    /// A cookie-authenticated request may come from no Origin (not a cross-site browser
    /// request: a same-origin page's GET, or a program) or from a listed one. WebSocket has
    /// no CORS, so without this a page on any site could open one with the visitor's cookie.
    fn cookie_origin_allowed(&self, req: &Request<'_>) -> bool {
        let Some(origin) = req.header_str("Origin") else {
            return true;
        };
        let origin = origin.trim().trim_end_matches('/');
        self.cookie_origins
            .iter()
            .any(|o| o.eq_ignore_ascii_case(origin))
    }

    /// Judges a token shown to renew a held subscription (WebSocket refresh). A refresh
    /// extends the connection's life; it cannot change whose connection it is, so a token for
    /// another `sub` than the one `user` holds (or a user where there was none) is refused.
    pub fn refresh(
        &self,
        token: &str,
        channels: &[&str],
        user: Option<&str>,
    ) -> Result<u64, Refusal> {
        let (claims, exp_ms) = self.grant(token, channels)?;
        if claims.sub.as_deref() != user {
            return Err(Refusal::Forbidden(
                "a refresh token must name the same sub as the connection's token".into(),
            ));
        }
        Ok(exp_ms)
    }

    fn verify(&self, token: &str) -> Result<Claims, Refusal> {
        let verifier = self.verifier.as_ref().ok_or(Refusal::Unauthorized(
            "this server verifies no tokens (no --jwt-key)".into(),
        ))?;
        verifier
            .verify(token)
            .map_err(|e| Refusal::Unauthorized(e.message().into()))
    }

    /// A verified token that grants `channels`: its claims and its expiry (Unix ms).
    fn grant(&self, token: &str, channels: &[&str]) -> Result<(Claims, u64), Refusal> {
        let claims = self.verify(token)?;
        let uncovered = match &claims.channels {
            Some(g) => g.first_uncovered(channels),
            None => channels.first().copied(),
        };
        match uncovered {
            Some(ch) => Err(Refusal::Forbidden(format!(
                "the token does not grant channel {ch}"
            ))),
            None => {
                let exp_ms = claims.exp_millis();
                Ok((claims, exp_ms))
            }
        }
    }

    /// A publisher's JWT (`publish` claim), when a key is configured and the request shows a
    /// token (Bearer, or on a WebSocket upgrade the `c1m.token.` subprotocol). None: no JWT
    /// to judge, so the publish key / loopback rule decides alone.
    pub fn publish(&self, req: &Request<'_>, channels: &[&str]) -> Option<Result<(), Refusal>> {
        self.verifier.as_ref()?;
        let shown = token::bearer(req)
            .filter(|t| looks_like_jwt(t))
            .or_else(|| {
                c1m_proto::ws::handshake::is_upgrade(req.headers.iter().copied())
                    .then(|| token::offered_token_protocol(req))
                    .flatten()
                    .and_then(|p| p.strip_prefix(token::TOKEN_PROTOCOL))
            })?;
        Some(self.verify(shown).and_then(|claims| {
            let uncovered = match &claims.publish {
                Some(g) => g.first_uncovered(channels),
                None => channels.first().copied(),
            };
            match uncovered {
                Some(ch) => Err(Refusal::Forbidden(format!(
                    "the token does not grant publishing to {ch}"
                ))),
                None => Ok(()),
            }
        }))
    }
}

/// Three dot-separated parts: a JWS compact serialization (a publish key never is one).
fn looks_like_jwt(t: &str) -> bool {
    t.split('.').count() == 3
}

/// Milliseconds from now until `exp_ms` (Unix milliseconds); 0 when already past.
pub fn millis_until(exp_ms: u64) -> u64 {
    exp_ms.saturating_sub(key::now_millis())
}
