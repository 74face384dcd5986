"""Upstream connections that fail before any HTTP request exists.

With HTTPS through a proxy, mitmproxy opens the upstream connection (and its TLS) while the
client's CONNECT and TLS handshake wait, before any request is sent: a DNS failure, a refused
connection, an upstream TLS failure or a connection that never answers ends there, and no flow
hook ever runs. `Attempts` follows each such connection of a client connection from the
connection-level hooks and hands over exactly one `FlowEnded` (method CONNECT, the reason in
`error`) for each attempt that failed, unless a flow on the same client connection ends with
that failure itself (mitmproxy then reports it on the flow: one row, not two).

Pure bookkeeping: no mitmproxy objects are kept, and `emit` only puts messages on the outbox.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from addons.messages import FlowEnded, RequestHead

__all__ = ["Attempts", "describe"]

_DNS = re.compile(r"name or service not known|name resolution|nodename nor servname|no address associated|"
                  r"errno -[235]\b|getaddrinfo", re.I)  # fmt: skip
_REFUSED = re.compile(r"errno 111\b|refused", re.I)
_TIMEOUT = re.compile(r"errno 110\b|timed out|timeout", re.I)


def describe(host: str, port: int, error: str, *, tls: bool, waited: float) -> str:
    """One line saying why a connection to `host:port` failed, from mitmproxy's error text."""
    where = f"{host}:{port}"
    if error == "client disconnected":  # mitmproxy cancels the connect when the client gives up
        stage = "the TLS handshake with" if tls else "a connection to"
        return f"timed out: no answer from {where} after {waited:.1f} s ({stage} it; the client gave up)"
    if error == "capture stopped":
        stage = "TLS handshake" if tls else "connection"
        return f"timed out: {stage} to {where} unanswered after {waited:.1f} s (capture stopped)"
    if tls:
        return f"upstream TLS handshake with {where} failed: {error}"
    if _DNS.search(error):
        return f"DNS lookup failed for {host}: {error}"
    if _REFUSED.search(error):
        return f"connection refused by {where}: {error}"
    if _TIMEOUT.search(error):
        return f"timed out connecting to {where}: {error}"
    return f"cannot connect to {where}: {error}"


@dataclass(slots=True)
class _Attempt:
    host: str
    port: int
    started: float
    client_addr: str | None
    stage: str = "connecting"
    """`connecting` (TCP), `connected` (TCP up), `tls` (upstream TLS handshake under way)."""
    error: str | None = None
    client_gone: bool = False


class Attempts:
    """The upstream connection attempts of client connections that have no flow (yet)."""

    def __init__(
        self,
        emit: Callable[[FlowEnded], None],
        process_of: Callable[[str], tuple[str | None, int | None] | None] = lambda client: None,
    ) -> None:
        self.emit = emit
        self.process_of = process_of
        """The local process behind a client connection, when known (the hooks look it up)."""
        self.open: dict[str, _Attempt] = {}
        """Client connection id -> its attempt."""

    def start(self, client: str, address: tuple[str, int], at: float, client_addr: str | None) -> None:
        """mitmproxy is about to connect upstream for `client`, which has no flow open."""
        self.open[client] = _Attempt(str(address[0]), int(address[1]), at, client_addr)

    def connected(self, client: str) -> None:
        if (attempt := self.open.get(client)) is not None and attempt.error is None:
            attempt.stage = "connected"

    def tls_started(self, client: str) -> None:
        if (attempt := self.open.get(client)) is not None and attempt.error is None:
            attempt.stage = "tls"

    def established(self, client: str) -> None:
        """The upstream TLS handshake succeeded: nothing to record."""
        attempt = self.open.get(client)
        if attempt is not None and attempt.error is None:
            del self.open[client]

    def failed(self, client: str, error: str | None, at: float, *, tls: bool = False) -> None:
        """The connection (or its TLS handshake) failed. Recorded when the client connection ends,
        unless a flow on it reports the failure first."""
        attempt = self.open.get(client)
        if attempt is None or attempt.error is not None:
            return
        tls = tls or attempt.stage == "tls"
        attempt.stage = "tls" if tls else attempt.stage
        attempt.error = describe(attempt.host, attempt.port, error or "unknown error", tls=tls,
                                 waited=at - attempt.started)  # fmt: skip
        if attempt.client_gone:
            self._record(client, at)

    def flow_started(self, client: str) -> None:
        """A request came on `client`: an attempt that did not fail is that flow's business now."""
        attempt = self.open.get(client)
        if attempt is not None and attempt.error is None:
            del self.open[client]

    def flow_failed(self, client: str) -> None:
        """A flow on `client` ended with an error: it reports the failed attempt (mitmproxy hands
        the connection's error to the flow), so the attempt is not recorded twice."""
        self.open.pop(client, None)

    def connect_refused(self, client: str, at: float) -> None:
        """mitmproxy answered the CONNECT with an error: no flow will come on this connection."""
        if (attempt := self.open.get(client)) is not None and attempt.error is not None:
            self._record(client, at)

    def client_tls_failed(self, client: str, at: float) -> bool:
        """The client's own TLS handshake failed; True when an upstream failure explains it (and
        was recorded instead)."""
        attempt = self.open.get(client)
        if attempt is None or (attempt.error is None and attempt.stage != "tls"):
            return False
        if attempt.error is None:
            self.failed(client, "client disconnected", at, tls=True)
        self._record(client, at)
        return True

    def client_closed(self, client: str, at: float) -> None:
        """The client connection ended: a failed attempt is recorded; a connect still under way is
        recorded when mitmproxy gives up on it (it cancels the connect now)."""
        attempt = self.open.get(client)
        if attempt is None:
            return
        if attempt.error is not None:
            self._record(client, at)
        elif attempt.stage == "connecting":
            attempt.client_gone = True
        elif attempt.stage == "tls":
            self.failed(client, "client disconnected", at)
            self._record(client, at)
        else:  # a tunnel that connected and carried no flow (or non-HTTP bytes): nothing failed
            del self.open[client]

    def close(self, at: float) -> None:
        """Capture stops: failed attempts and those still waiting for an answer are recorded."""
        for client in list(self.open):
            attempt = self.open[client]
            if attempt.error is None and attempt.stage in ("connecting", "tls"):
                self.failed(client, "capture stopped", at)
            if attempt.error is not None:
                self._record(client, at)
        self.open.clear()

    def _record(self, client: str, at: float) -> None:
        attempt = self.open.pop(client)
        tls = attempt.stage == "tls" or attempt.port == 443
        head = RequestHead(
            key=f"conn-{uuid.uuid4().hex[:12]}", conn=client, started=attempt.started,
            scheme="https" if tls else "http", host=attempt.host, port=attempt.port, method="CONNECT",
            path="", query="", http_version="", headers=(), client_addr=attempt.client_addr,
        )  # fmt: skip
        self.emit(FlowEnded(request=head, ended=max(at, attempt.started), error=attempt.error,
                            process=self.process_of(client)))  # fmt: skip
