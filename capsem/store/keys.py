"""The ledger key: one Ed25519 key per `$CAPSEM_HOME`, made the first time a session is written.

`ledger.key` (PKCS#8 PEM, mode 0600) signs the heads of every session's chain and of main.db's
chain of sessions; `ledger.pub` (SubjectPublicKeyInfo PEM) is what `capsem verify` and any DSSE
verifier check them with. The key is never logged and never leaves the file. It is made by
writing a temporary file and linking it into place (`os.link` fails when the name exists), so
two processes starting at once end up with the same key.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from capsem.paths import capsem_home
from capsem.private import private_dir, write_private

KEY_NAME = "ledger.key"
PUB_NAME = "ledger.pub"


@dataclass(frozen=True)
class SigningKey:
    """The private key and its short id (the first 16 hex of SHA-256 over the raw public key)."""

    private: Ed25519PrivateKey
    key_id: str

    def sign(self, message: bytes) -> bytes:
        return self.private.sign(message)


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def signing_key(home: Path | None = None) -> SigningKey:
    """`$CAPSEM_HOME`'s ledger key, made (with `ledger.pub`) when it does not exist yet."""
    return _load((home or capsem_home()).resolve())


@lru_cache(maxsize=4)
def _load(home: Path) -> SigningKey:
    path = home / KEY_NAME
    if not path.exists():
        _create(home)
    private = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(private, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 key")
    pub = home / PUB_NAME
    if not pub.exists():
        write_private(pub, public_pem(private.public_key()))
    return SigningKey(private, key_id(private.public_key()))


def _create(home: Path) -> None:
    private_dir(home)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    tmp = home / f".{KEY_NAME}.{os.getpid()}.tmp"
    write_private(tmp, pem)
    try:
        os.link(tmp, home / KEY_NAME)  # exclusive: another process's key may have won the race
        write_private(home / PUB_NAME, public_pem(private.public_key()))
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def load_public(path: Path) -> Ed25519PublicKey:
    """A PEM public key (`ledger.pub`). Raises ValueError when it is not an Ed25519 key."""
    public = serialization.load_pem_public_key(path.read_bytes())
    if not isinstance(public, Ed25519PublicKey):
        raise ValueError(f"{path} is not an Ed25519 public key")
    return public


def signature_holds(public: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    try:
        public.verify(signature, message)
    except InvalidSignature:
        return False
    return True
