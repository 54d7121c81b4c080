"""Secrets at rest (webhook secrets, platform credentials) are encrypted with a key
derived from CS_SECRET_KEY (Fernet: AES-128-CBC + HMAC-SHA256)."""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet


@lru_cache(maxsize=8)
def _fernet(secret_key: str) -> Fernet:
    digest = hashlib.sha256(b"cs-at-rest:" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(secret_key: str, plain: str) -> str:
    return _fernet(secret_key).encrypt(plain.encode()).decode()


@lru_cache(maxsize=4096)
def decrypt(secret_key: str, token: str) -> str:
    """Kept for the life of the process: every delivery attempt signs with its endpoint's
    secret, and a token (with its random IV) always decrypts to the same text."""
    return _fernet(secret_key).decrypt(token.encode()).decode()
