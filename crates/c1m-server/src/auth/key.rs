//! The `--jwt-key` file and signature checks. The file holds one of:
//! - a JWKS (`{"keys": [...]}`) or a single JWK: keys are picked by the token's `kid`;
//! - a PEM public key (RSA → RS*/PS*, EC → ES256/ES384, Ed25519 → EdDSA) or certificate;
//! - anything else: an HMAC secret (HS256/384/512), the file's bytes without the trailing
//!   newline, at least 32 bytes (RFC 7518 3.2: a key as long as the hash).
//!
//! Verification is `jsonwebtoken` (a well-kept crate; it runs once per subscribe, never on a
//! held connection, so its allocations cost nothing per idle connection).

use super::grants::Grants;
use anyhow::{bail, Context};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use std::path::Path;

/// Shortest HMAC secret accepted.
pub const MIN_SECRET: usize = 32;

/// Longest `sub` accepted: it is kept for every connection that showed it, and the server
/// API names users by it.
pub const MAX_SUBJECT: usize = 256;

/// The claims c1m reads; others (`iat`, `aud`…) are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct Claims {
    /// Expiry, seconds since the Unix epoch (required). A NumericDate may carry a fraction
    /// (RFC 7519 2), so it is read as a float and judged to the millisecond.
    pub exp: f64,
    /// Not before, seconds since the Unix epoch (optional, RFC 7519 4.1.5).
    #[serde(default)]
    pub nbf: Option<f64>,
    /// Channels the bearer may subscribe to.
    #[serde(default)]
    pub channels: Option<Grants>,
    /// Channels the bearer may publish to.
    #[serde(default)]
    pub publish: Option<Grants>,
    /// The user the token speaks for (RFC 7519 4.1.2): the connection's user id, by which the
    /// server API finds a user's connections. At most [`MAX_SUBJECT`] bytes, no control
    /// characters; absent means a connection with no user.
    #[serde(default)]
    pub sub: Option<String>,
    /// What presence shows about the connection (any JSON value, e.g. `{"name":"Ann"}`): at
    /// most `crate::presence::MAX_INFO` bytes of JSON text, carried as it is.
    #[serde(default)]
    pub info: Option<serde_json::Value>,
}

/// Why a token was not accepted (all of them mean 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    Expired,
    NotYetValid,
    BadSignature,
    Malformed,
    UnknownKey,
    BadSubject,
    BadInfo,
}

impl Invalid {
    pub fn message(self) -> &'static str {
        match self {
            Invalid::Expired => "token expired",
            Invalid::NotYetValid => "token not valid yet (its nbf is in the future)",
            Invalid::BadSignature => "token signature does not verify",
            Invalid::Malformed => "token is not a JWT with a numeric exp",
            Invalid::UnknownKey => {
                "token is signed with an algorithm or key id this server has no key for"
            }
            Invalid::BadSubject => "token sub must be 1 to 256 bytes with no control characters",
            Invalid::BadInfo => "token info must be at most 1024 bytes of JSON",
        }
    }
}

struct Key {
    kid: Option<String>,
    key: DecodingKey,
    validation: Validation,
}

/// The verification keys from one key file.
pub struct Verifier {
    keys: Vec<Key>,
}

impl Verifier {
    pub fn load(path: &Path) -> anyhow::Result<Verifier> {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading --jwt-key {}", path.display()))?;
        Verifier::from_bytes(&bytes).with_context(|| format!("--jwt-key {}", path.display()))
    }

    pub fn from_bytes(bytes: &[u8]) -> anyhow::Result<Verifier> {
        let text = std::str::from_utf8(bytes).unwrap_or("");
        let trimmed = text.trim();
        let keys = if trimmed.starts_with('{') {
            jwks(trimmed)?
        } else if trimmed.starts_with("-----BEGIN") {
            vec![pem(trimmed.as_bytes())?]
        } else {
            vec![secret(bytes)?]
        };
        Ok(Verifier { keys })
    }

    /// Checks the signature, `exp` and `nbf`, to the millisecond and without leeway: the
    /// expiry is what held connections are ended at, so it must mean the same thing at
    /// subscribe. (jsonwebtoken judges both in whole seconds, so c1m judges them itself.)
    pub fn verify(&self, token: &str) -> Result<Claims, Invalid> {
        let claims = self.verify_signature(token)?;
        claims.judge_times(now_millis())?;
        claims.judge_subject()?;
        if claims
            .info_json()
            .is_some_and(|i| i.len() > crate::presence::MAX_INFO)
        {
            return Err(Invalid::BadInfo);
        }
        Ok(claims)
    }

    fn verify_signature(&self, token: &str) -> Result<Claims, Invalid> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Invalid::Malformed)?;
        let candidates = self.keys.iter().filter(|k| {
            k.validation.algorithms.contains(&header.alg)
                && (header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
        });
        let mut outcome = Err(Invalid::UnknownKey);
        for k in candidates {
            match jsonwebtoken::decode::<Claims>(token, &k.key, &k.validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => {
                    outcome = Err(match e.kind() {
                        ErrorKind::ExpiredSignature => Invalid::Expired,
                        ErrorKind::InvalidSignature => Invalid::BadSignature,
                        _ => Invalid::Malformed,
                    })
                }
            }
        }
        outcome
    }
}

fn validation(algorithms: &[Algorithm]) -> Validation {
    let mut v = Validation::new(algorithms[0]);
    v.algorithms = algorithms.to_vec();
    v.leeway = 0;
    // Judged by `Claims::judge_times` (to the millisecond); jsonwebtoken still checks that
    // `exp` is there and is a number.
    v.validate_exp = false;
    v.validate_nbf = false;
    // No audience is configured: a token's `aud` is not judged (it would fail every token
    // that carries one).
    v.validate_aud = false;
    v.set_required_spec_claims(&["exp"]);
    v
}

impl Claims {
    /// The `info` claim as compact JSON text (a JSON `null` is no info).
    pub fn info_json(&self) -> Option<String> {
        self.info
            .as_ref()
            .filter(|v| !v.is_null())
            .map(|v| v.to_string())
    }

    /// A `sub` must be usable as a user id: short, and printable in logs and JSON answers.
    fn judge_subject(&self) -> Result<(), Invalid> {
        match &self.sub {
            Some(sub)
                if sub.is_empty()
                    || sub.len() > MAX_SUBJECT
                    || sub.chars().any(char::is_control) =>
            {
                Err(Invalid::BadSubject)
            }
            _ => Ok(()),
        }
    }

    /// `exp` in Unix milliseconds (a negative or absurd value saturates).
    pub fn exp_millis(&self) -> u64 {
        secs_to_millis(self.exp)
    }

    /// RFC 7519 4.1.4 and 4.1.5: valid from `nbf` (inclusive) until `exp` (exclusive).
    fn judge_times(&self, now_ms: u64) -> Result<(), Invalid> {
        if now_ms >= self.exp_millis() {
            return Err(Invalid::Expired);
        }
        if self.nbf.is_some_and(|nbf| now_ms < secs_to_millis(nbf)) {
            return Err(Invalid::NotYetValid);
        }
        Ok(())
    }
}

/// Seconds (possibly fractional) to whole milliseconds (rounded: `x.y` seconds written by an
/// issuer come back as the milliseconds it meant); `as` saturates NaN and negatives to 0.
fn secs_to_millis(secs: f64) -> u64 {
    (secs * 1000.0).round() as u64
}

/// Now, in Unix milliseconds.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn secret(bytes: &[u8]) -> anyhow::Result<Key> {
    let secret = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let secret = secret.strip_suffix(b"\r").unwrap_or(secret);
    if secret.len() < MIN_SECRET {
        bail!(
            "an HMAC secret must be at least {MIN_SECRET} bytes (this one has {}); for a public \
             key give a PEM file, for several keys a JWKS",
            secret.len()
        );
    }
    Ok(Key {
        kid: None,
        key: DecodingKey::from_secret(secret),
        validation: validation(jsonwebtoken::AlgorithmFamily::Hmac.algorithms()),
    })
}

fn pem(pem: &[u8]) -> anyhow::Result<Key> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("PRIVATE KEY") {
        bail!("the PEM file holds a private key; give the server the public key only");
    }
    let key = DecodingKey::from_rsa_pem(pem)
        .or_else(|_| DecodingKey::from_ec_pem(pem))
        .or_else(|_| DecodingKey::from_ed_pem(pem))
        .context("not an RSA, EC or Ed25519 public key in PEM")?;
    let algorithms = key.family().algorithms().to_vec();
    Ok(Key {
        kid: None,
        key,
        validation: validation(&algorithms),
    })
}

fn jwks(json: &str) -> anyhow::Result<Vec<Key>> {
    let set: JwkSet = match serde_json::from_str(json) {
        Ok(set) => set,
        Err(_) => JwkSet {
            keys: vec![serde_json::from_str::<Jwk>(json).context("not a JWKS or a JWK")?],
        },
    };
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let key = DecodingKey::from_jwk(jwk).context("a JWK in the set")?;
        let algorithms = match jwk.common.key_algorithm {
            Some(ka) => vec![Algorithm::try_from(ka).context("a JWK's alg")?],
            None => key.family().algorithms().to_vec(),
        };
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            key,
            validation: validation(&algorithms),
        });
    }
    if keys.is_empty() {
        bail!("the JWKS holds no keys");
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn hs256(claims: serde_json::Value, kid: Option<&str>, secret: &[u8]) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = kid.map(str::to_string);
        encode(&header, &claims, &EncodingKey::from_secret(secret)).unwrap()
    }

    #[test]
    fn exp_is_required_and_judged_without_leeway() {
        let v = Verifier::from_bytes(SECRET).unwrap();
        let ok = hs256(json!({"exp": now() + 60, "channels": "a"}), None, SECRET);
        assert_eq!(
            v.verify(&ok).unwrap().channels,
            Some(Grants::One("a".into()))
        );
        let no_exp = hs256(json!({"channels": "a"}), None, SECRET);
        assert_eq!(v.verify(&no_exp).unwrap_err(), Invalid::Malformed);
        // Two seconds past: jsonwebtoken's default 60 s leeway would still take it.
        let just_expired = hs256(json!({"exp": now() - 2}), None, SECRET);
        assert_eq!(v.verify(&just_expired).unwrap_err(), Invalid::Expired);
        let other = hs256(
            json!({"exp": now() + 60}),
            None,
            b"another secret, also 32 bytes long!",
        );
        assert_eq!(v.verify(&other).unwrap_err(), Invalid::BadSignature);
        assert_eq!(v.verify("garbage").unwrap_err(), Invalid::Malformed);
    }

    #[test]
    fn nbf_in_the_future_is_refused_and_in_the_past_accepted() {
        let v = Verifier::from_bytes(SECRET).unwrap();
        let early = hs256(json!({"exp": now() + 600, "nbf": now() + 60}), None, SECRET);
        assert_eq!(v.verify(&early).unwrap_err(), Invalid::NotYetValid);
        let ok = hs256(json!({"exp": now() + 600, "nbf": now() - 1}), None, SECRET);
        assert!(v.verify(&ok).is_ok());
        let bad = hs256(json!({"exp": now() + 600, "nbf": "soon"}), None, SECRET);
        assert_eq!(v.verify(&bad).unwrap_err(), Invalid::Malformed);
    }

    #[test]
    fn exp_is_judged_to_the_millisecond() {
        let v = Verifier::from_bytes(SECRET).unwrap();
        let now_ms = now_millis();
        // This very second, already begun: past (whole-second comparison took it for another
        // second).
        let this_second = hs256(json!({ "exp": now_ms / 1000 }), None, SECRET);
        assert_eq!(v.verify(&this_second).unwrap_err(), Invalid::Expired);
        // Fractions: 300 ms ago is past, 5 s ahead is not, and the expiry keeps its fraction.
        let past = (now_ms as f64 - 300.0) / 1000.0;
        let just_past = hs256(json!({ "exp": past }), None, SECRET);
        assert_eq!(v.verify(&just_past).unwrap_err(), Invalid::Expired);
        let ahead = (now_ms as f64 + 5_250.0) / 1000.0;
        let soon = hs256(json!({ "exp": ahead }), None, SECRET);
        let claims = v.verify(&soon).unwrap();
        assert_eq!(claims.exp_millis(), now_ms + 5_250);
        // The boundary: valid before exp, not at it.
        let at = Claims {
            exp: 10.0,
            nbf: Some(5.0),
            channels: None,
            publish: None,
            sub: None,
            info: None,
        };
        assert_eq!(at.judge_times(9_999), Ok(()));
        assert_eq!(at.judge_times(10_000), Err(Invalid::Expired));
        assert_eq!(at.judge_times(5_000), Ok(()));
        assert_eq!(at.judge_times(4_999), Err(Invalid::NotYetValid));
    }

    #[test]
    fn sub_is_the_user_id_and_must_be_short_and_printable() {
        let v = Verifier::from_bytes(SECRET).unwrap();
        let with =
            |sub: serde_json::Value| hs256(json!({"exp": now() + 60, "sub": sub}), None, SECRET);
        assert_eq!(
            v.verify(&with(json!("u1"))).unwrap().sub.as_deref(),
            Some("u1")
        );
        let none = hs256(json!({"exp": now() + 60}), None, SECRET);
        assert_eq!(v.verify(&none).unwrap().sub, None);
        let long = "x".repeat(MAX_SUBJECT + 1);
        for bad in [json!(""), json!(long), json!("a\nb")] {
            assert_eq!(v.verify(&with(bad)).unwrap_err(), Invalid::BadSubject);
        }
        assert!(v.verify(&with(json!("x".repeat(MAX_SUBJECT)))).is_ok());
        assert_eq!(v.verify(&with(json!(7))).unwrap_err(), Invalid::Malformed);
    }

    #[test]
    fn an_info_claim_is_kept_as_json_and_capped() {
        let v = Verifier::from_bytes(SECRET).unwrap();
        let with = |info| hs256(json!({"exp": now() + 60, "info": info}), None, SECRET);
        let claims = v.verify(&with(json!({"name": "Ann"}))).unwrap();
        assert_eq!(claims.info_json().as_deref(), Some("{\"name\":\"Ann\"}"));
        assert_eq!(v.verify(&with(json!(null))).unwrap().info_json(), None);
        let big = json!("x".repeat(crate::presence::MAX_INFO));
        assert_eq!(v.verify(&with(big)).unwrap_err(), Invalid::BadInfo);
    }

    #[test]
    fn short_secrets_and_private_keys_are_refused() {
        let err = Verifier::from_bytes(b"short\n").err().unwrap().to_string();
        assert!(err.contains("at least 32 bytes"), "{err}");
        let err =
            Verifier::from_bytes(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
                .err()
                .unwrap()
                .to_string();
        assert!(err.contains("private key"), "{err}");
    }

    #[test]
    fn a_jwks_picks_the_key_by_kid() {
        use base64::Engine;
        let k = |s: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let second = b"the second secret of the set, 32+ bytes";
        let jwks = json!({"keys": [
            {"kty": "oct", "kid": "one", "alg": "HS256", "k": k(SECRET)},
            {"kty": "oct", "kid": "two", "alg": "HS256", "k": k(second)},
        ]});
        let v = Verifier::from_bytes(jwks.to_string().as_bytes()).unwrap();
        let by_two = hs256(json!({"exp": now() + 60}), Some("two"), second);
        assert!(v.verify(&by_two).is_ok());
        let wrong_kid = hs256(json!({"exp": now() + 60}), Some("one"), second);
        assert_eq!(v.verify(&wrong_kid).unwrap_err(), Invalid::BadSignature);
        let unknown = hs256(json!({"exp": now() + 60}), Some("three"), second);
        assert_eq!(v.verify(&unknown).unwrap_err(), Invalid::UnknownKey);
    }
}
