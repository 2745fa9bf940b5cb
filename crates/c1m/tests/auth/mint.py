"""Mints a JWT independently of the server's verifier (python3 standard library, and the
openssl CLI for RS256 / ES256 / EdDSA signatures).

usage: mint.py ALG KEYFILE CLAIMS_JSON [KID]
  HS256: KEYFILE holds the secret; RS256/ES256/EdDSA: KEYFILE is the private key in PEM.
"""
import base64, hashlib, hmac, json, subprocess, sys


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def der_to_raw(der: bytes, size: int) -> bytes:
    """ECDSA signature: DER SEQUENCE{r, s} -> r || s, each `size` bytes (RFC 7518 3.4)."""
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        out += der[i + 2 : i + 2 + n].lstrip(b"\0").rjust(size, b"\0")
        i += 2 + n
    return out


def main() -> None:
    alg, keyfile, claims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    header = {"alg": alg, "typ": "JWT"}
    if len(sys.argv) > 4:
        header["kid"] = sys.argv[4]
    signing_input = (
        b64url(json.dumps(header, separators=(",", ":")).encode())
        + "."
        + b64url(json.dumps(claims, separators=(",", ":")).encode())
    ).encode()
    if alg == "HS256":
        secret = open(keyfile, "rb").read().rstrip(b"\n")
        sig = hmac.new(secret, signing_input, hashlib.sha256).digest()
    elif alg in ("RS256", "ES256"):
        sig = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", keyfile],
            input=signing_input, capture_output=True, check=True,
        ).stdout
        if alg == "ES256":
            sig = der_to_raw(sig, 32)
    elif alg == "EdDSA":
        with open(keyfile + ".msg", "wb") as f:
            f.write(signing_input)
        sig = subprocess.run(
            ["openssl", "pkeyutl", "-sign", "-rawin", "-inkey", keyfile, "-in", keyfile + ".msg"],
            capture_output=True, check=True,
        ).stdout
    else:
        raise SystemExit(f"unknown alg {alg}")
    print(signing_input.decode() + "." + b64url(sig))


main()
