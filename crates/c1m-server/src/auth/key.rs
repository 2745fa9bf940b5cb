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

/// The claims c1m reads; others (`sub`, `iat`, `aud`…) are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct Claims {
    /// Expiry, seconds since the Unix epoch (required).
    pub exp: u64,
    /// Channels the bearer may subscribe to.
    #[serde(default)]
    pub channels: Option<Grants>,
    /// Channels the bearer may publish to.
    #[serde(default)]
    pub publish: Option<Grants>,
}

/// Why a token was not accepted (all of them mean 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    Expired,
    BadSignature,
    Malformed,
    UnknownKey,
}

impl Invalid {
    pub fn message(self) -> &'static str {
        match self {
            Invalid::Expired => "token expired",
            Invalid::BadSignature => "token signature does not verify",
            Invalid::Malformed => "token is not a JWT with a numeric exp",
            Invalid::UnknownKey => {
                "token is signed with an algorithm or key id this server has no key for"
            }
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

    /// Checks the signature and `exp` (no leeway: the expiry is what held connections are
    /// ended at, so it must mean the same thing at subscribe).
    pub fn verify(&self, token: &str) -> Result<Claims, Invalid> {
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
    v.validate_exp = true;
    // No audience is configured: a token's `aud` is not judged (it would fail every token
    // that carries one).
    v.validate_aud = false;
    v.set_required_spec_claims(&["exp"]);
    v
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
