"""The emulator's own CA and per-host leaf certificates (EC keys: fast to make)."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import tempfile
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class CertificateAuthority:
    """Signs a leaf certificate for every host name asked for, cached as SSL contexts."""

    def __init__(self, directory: Path | None = None) -> None:
        self._owned = directory is None
        self.dir = directory or Path(tempfile.mkdtemp(prefix="capsem-emulator-ca-"))
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name("capsem emulator CA"))
            .issuer_name(_name("capsem emulator CA"))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_path = self.dir / "ca.pem"
        self.ca_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Remove the temporary directory holding `ca.pem` (one given by the caller is left alone)."""
        if self._owned:
            shutil.rmtree(self.dir, ignore_errors=True)

    def context(self, host: str = "localhost") -> ssl.SSLContext:
        """A server SSL context presenting a certificate for `host` (and localhost/127.0.0.1),
        or for the SNI name when the client sends one."""
        with self._lock:
            if host not in self._contexts:
                self._contexts[host] = self._make(host)
            return self._contexts[host]

    def _make(self, host: str) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(host))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=29))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in host)
        cert_path, key_path = self.dir / f"{safe}.pem", self.dir / f"{safe}.key"
        cert_path.write_bytes(
            cert.public_bytes(serialization.Encoding.PEM)
            + self._cert.public_bytes(serialization.Encoding.PEM)
        )
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert_path, key_path)
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.sni_callback = self._pick  # type: ignore[assignment]
        return ctx

    def _pick(self, sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        if name:
            sock.context = self.context(name)

    def sni_context(self) -> ssl.SSLContext:
        """A context that switches to the right leaf for the SNI the client sends.

        Every context made here does that; without SNI the client gets the leaf the context
        was made for (`localhost` here, the CONNECT host on a tunnel).
        """
        return self.context("localhost")
