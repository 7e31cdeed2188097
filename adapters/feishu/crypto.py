"""Feishu webhook cryptography: AES-256-CBC event decryption and request signatures.

Feishu encrypts event bodies as `{"encrypt": base64(iv || AES-256-CBC(sha256(encrypt_key), iv,
PKCS7(json)))}` and signs requests with `X-Lark-Signature = sha256_hex(timestamp + nonce +
encrypt_key + raw_body)`, where timestamp and nonce are the X-Lark-Request-Timestamp and
X-Lark-Request-Nonce headers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time

from Crypto.Cipher import AES
from Crypto.Util.Padding import unpad


class FeishuCryptoError(Exception):
    """A webhook request failed a cryptographic or freshness check."""


class DecryptionError(FeishuCryptoError):
    """The encrypted body is not valid base64, AES-CBC or PKCS7, or not UTF-8."""


class SignatureError(FeishuCryptoError):
    """The X-Lark-Signature header is missing or does not match the body."""


class TimestampError(FeishuCryptoError):
    """The X-Lark-Request-Timestamp header is missing, malformed or outside the window."""


def aes_key(encrypt_key: str) -> bytes:
    """The AES-256 key Feishu derives from the app's encrypt key."""
    return hashlib.sha256(encrypt_key.encode()).digest()


def decrypt(encrypted: str, encrypt_key: str) -> str:
    """Decrypt the `encrypt` field of a Feishu event body to its JSON text."""
    try:
        raw = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecryptionError("encrypted body is not valid base64") from exc
    block = AES.block_size
    # At least one IV block and one ciphertext block, and whole blocks only.
    if len(raw) < 2 * block or len(raw) % block:
        raise DecryptionError("encrypted body has an invalid length")
    cipher = AES.new(aes_key(encrypt_key), AES.MODE_CBC, raw[:block])
    try:
        plain = unpad(cipher.decrypt(raw[block:]), block, style="pkcs7")
        return plain.decode("utf-8")
    except ValueError as exc:  # bad padding (wrong key) or not UTF-8
        raise DecryptionError("encrypted body does not decrypt with the configured key") from exc


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """The X-Lark-Signature Feishu computes for a request body."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def verify_signature(
    timestamp: str | None, nonce: str | None, sig: str | None, encrypt_key: str, body: bytes
) -> None:
    """Raise SignatureError unless `sig` is the request's valid signature (constant-time)."""
    if not timestamp or nonce is None or not sig:
        raise SignatureError("signature headers are missing")
    expected = signature(timestamp, nonce, encrypt_key, body)
    if not hmac.compare_digest(expected.encode(), sig.strip().lower().encode()):
        raise SignatureError("signature does not match")


def check_timestamp(timestamp: str | None, window_s: float, now: float | None = None) -> None:
    """Raise TimestampError unless the request timestamp (seconds) is within `window_s` of now."""
    if not timestamp:
        raise TimestampError("request timestamp is missing")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise TimestampError("request timestamp is not a plausible number of seconds")
    skew = abs((time.time() if now is None else now) - int(timestamp))
    if skew > window_s:
        raise TimestampError(f"request timestamp is {skew:.0f}s off (window {window_s}s)")


def constant_time_equals(a: str, b: str) -> bool:
    """Compare two secrets without leaking where they differ."""
    return hmac.compare_digest(a.encode(), b.encode())
