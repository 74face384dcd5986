"""The proxy's connections, as one addon: which local process opened each client connection, and
the upstream connections that fail before any flow exists.

A client connection's process is looked up when it connects, on the resolver's own thread
(`addons/proxy/process.py`): a short connection may be gone within milliseconds. The flows on it
carry the answer (`process`). The connection-level hooks feed `Attempts`
(`addons/proxy/connections.py`), which hands over one `FlowEnded` per failed CONNECT tunnel.
Registered after `Capsem` (`addons/capsem_addon.py`); `Capsem` starts and closes it with the session.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from mitmproxy import connection, http, tls
from mitmproxy.proxy.server_hooks import ServerConnectionHookData

from addons.messages import FlowEnded, RequestHead
from addons.proxy.connections import Attempts
from addons.proxy.hooks import addr, guarded, peer
from addons.proxy.process import ProcessResolver

if TYPE_CHECKING:
    from addons.proxy.capture import Capsem


class Connections:
    """Client connections' processes and failed upstream connections (mitmproxy's connection hooks)."""

    def __init__(self, capture: Capsem) -> None:
        self.capture = capture
        self.hook_failures = 0
        self.resolver: ProcessResolver | None = None
        self.attempts = Attempts(capture.put, self.process)
        """Upstream connections made before any flow (CONNECT tunnels): failures become rows."""

    def start(self) -> None:
        self.resolver = ProcessResolver()

    def close(self, now: float) -> None:
        """End the attempts still open and stop the resolver (before the recorder stops)."""
        self.attempts.close(now)
        if self.resolver is not None:
            self.resolver.close()
            self.resolver = None

    @guarded
    def client_connected(self, client: connection.Client) -> None:
        """Look up the local process behind the connection now, on the resolver's thread (a short
        connection may be gone within milliseconds); its flows carry the answer."""
        if self.resolver is not None:
            self.resolver.lookup(client.id, peer(client.peername), peer(client.sockname))

    def process(self, conn: str | None) -> tuple[str | None, int | None] | None:
        """The connection's process, if its lookup has finished."""
        return self.resolver.found(conn) if conn and self.resolver is not None else None

    @guarded
    def client_disconnected(self, client: connection.Client) -> None:
        self.attempts.client_closed(client.id, time.time())

    @guarded
    def server_connect(self, data: ServerConnectionHookData) -> None:
        """An upstream connection opened for a client connection with no flow open (a CONNECT
        tunnel): followed by the hooks below until it works or fails."""
        client = data.client.id
        if self.capture.outbox is None or data.server.address is None or client in self.capture.flows.conns:
            return  # a flow's own connection: the flow records how it ends
        self.attempts.start(client, data.server.address, time.time(), addr(data.client.peername))

    @guarded
    def server_connected(self, data: ServerConnectionHookData) -> None:
        self.attempts.connected(data.client.id)

    @guarded
    def server_connect_error(self, data: ServerConnectionHookData) -> None:
        self.attempts.failed(data.client.id, data.server.error, time.time())

    @guarded
    def tls_start_server(self, data: tls.TlsData) -> None:
        self.attempts.tls_started(data.context.client.id)

    @guarded
    def tls_established_server(self, data: tls.TlsData) -> None:
        self.attempts.established(data.context.client.id)

    @guarded
    def tls_failed_server(self, data: tls.TlsData) -> None:
        self.attempts.failed(data.context.client.id, data.conn.error, time.time(), tls=True)

    @guarded
    def http_connect_error(self, flow: http.HTTPFlow) -> None:
        self.attempts.connect_refused(flow.client_conn.id, time.time())

    @guarded
    def tls_failed_client(self, data: tls.TlsData) -> None:
        """A client that refused our certificate never makes a flow: record the attempt (unless the
        upstream failed first: that failure is the one recorded)."""
        client = data.context.client
        if self.attempts.client_tls_failed(client.id, time.time()):
            return
        host = client.sni or (data.context.server.address or ("?", 0))[0]
        port = (data.context.server.address or ("", 443))[1]
        now = time.time()
        head = RequestHead(
            key=f"tls-{uuid.uuid4().hex[:12]}", conn=client.id, started=client.timestamp_start or now,
            scheme="https", host=host, port=port, method="CONNECT", path="", query="", http_version="",
            headers=(), client_addr=addr(client.peername),
        )  # fmt: skip
        error = f"client TLS handshake failed: {data.conn.error or 'unknown error'}"
        self.capture.put(FlowEnded(request=head, ended=now, error=error, process=self.process(client.id)))
