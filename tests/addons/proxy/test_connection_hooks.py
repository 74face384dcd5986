"""Upstream connections that fail before any request exists: one net_events row each, never two.

The hook sequences are the ones a real mitmdump 11 produced for `curl -x` through it (DNS failure,
refused port, plain-HTTP request, self-signed upstream, a listener whose backlog is full, a server
that never answers the TLS handshake); tests/e2e/test_connection_failures.py runs the first cases
with a real SDK through a real mitmdump.
"""

from __future__ import annotations

from mitmproxy import connection, http
from mitmproxy.options import Options
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from mitmproxy.test import tflow, tutils
from mitmproxy.tls import TlsData

from addons.proxy.connections import describe
from tests.addons.proxy.conftest import finish
from tests.conftest import rows


class Conn:
    """One client connection and the hooks mitmproxy calls for it."""

    def __init__(self, addon, host: str, port: int) -> None:
        self.addon = addon
        self.client = tflow.tclient_conn()
        self.server = connection.Server(address=(host, port))
        self.data = ServerConnectionHookData(server=self.server, client=self.client)
        self.context = Context(self.client, Options())
        self.context.server = self.server
        self.addon.client_connected(self.client)

    def connect(self, error: str | None = None) -> None:
        self.addon.server_connect(self.data)
        if error is None:
            self.addon.server_connected(self.data)
        else:
            self.server.error = error
            self.addon.server_connect_error(self.data)

    def connect_error(self, error: str) -> None:
        self.server.error = error
        self.addon.server_connect_error(self.data)

    def tls_fails(self, error: str) -> None:
        self.addon.tls_start_server(TlsData(self.server, self.context))
        self.server.error = error
        self.addon.tls_failed_server(TlsData(self.server, self.context))

    def connect_answered_502(self) -> None:
        req = tutils.treq(method=b"CONNECT", host=self.server.address[0], port=self.server.address[1])
        flow = tflow.tflow(client_conn=self.client, req=req, resp=tutils.tresp(status_code=502))
        self.addon.http_connect_error(flow)

    def request(self, error: str | None) -> http.HTTPFlow:
        host, port = self.server.address
        req = tutils.treq(host=host, port=port, scheme="https", method=b"GET", path=b"/")
        flow = tflow.tflow(client_conn=self.client, req=req)
        flow.response = None
        self.addon.requestheaders(flow)
        self.addon.request(flow)
        if error is None:
            flow.response = tutils.tresp()
            self.addon.response(flow)
        else:
            flow.error = tflow.terr(error)
            self.addon.error(flow)
        return flow

    def close(self) -> None:
        self.addon.client_disconnected(self.client)


def net_rows(addon, home) -> list[dict]:
    return rows(
        finish(addon, home), "SELECT method, domain, port, decision, error, duration_ms FROM net_events"
    )


def test_dns_failure_of_a_connect_tunnel_is_one_error_row(capsem, capsem_home):
    c = Conn(capsem, "api.anthropic.invalid", 443)
    c.connect("[Errno -2] Name or service not known")
    c.connect_answered_502()
    c.close()
    (row,) = net_rows(capsem, capsem_home)
    assert row["method"] == "CONNECT" and row["decision"] == "error"
    assert (row["domain"], row["port"]) == ("api.anthropic.invalid", 443)
    assert row["error"] == "DNS lookup failed for api.anthropic.invalid: [Errno -2] Name or service not known"


def test_refused_connection_is_one_error_row(capsem, capsem_home):
    c = Conn(capsem, "127.0.0.1", 9)
    c.connect("[Errno 111] Connect call failed ('127.0.0.1', 9)")
    c.connect_answered_502()
    c.close()
    (row,) = net_rows(capsem, capsem_home)
    assert row["error"].startswith("connection refused by 127.0.0.1:9: [Errno 111]")


def test_a_plain_http_request_reports_its_own_connection_failure_once(capsem, capsem_home):
    """The flow exists before mitmproxy connects: its error row is the only one."""
    c = Conn(capsem, "nothing.invalid", 80)
    host, port = c.server.address
    req = tutils.treq(host=host, port=port, scheme="http", method=b"GET", path=b"/x")
    flow = tflow.tflow(client_conn=c.client, req=req)
    flow.response = None
    flow.server_conn = connection.Server(address=(host, port))
    capsem.requestheaders(flow)
    capsem.request(flow)
    c.connect("[Errno -2] Name or service not known")
    flow.error = tflow.terr("[Errno -2] Name or service not known")
    capsem.error(flow)
    c.close()
    (row,) = net_rows(capsem, capsem_home)
    assert row["method"] == "GET" and row["decision"] == "error"
    assert row["error"] == "DNS lookup failed for nothing.invalid: [Errno -2] Name or service not known"


def test_upstream_tls_failure_then_the_flow_failing_is_one_row(capsem, capsem_home):
    """mitmproxy finishes the client's handshake anyway; the request then fails with the same error."""
    c = Conn(capsem, "127.0.0.1", 18443)
    c.connect()
    c.tls_fails("Certificate verify failed: self-signed certificate")
    c.request("Certificate verify failed: self-signed certificate")
    c.close()
    (row,) = net_rows(capsem, capsem_home)
    assert row["method"] == "GET" and row["error"] == "Certificate verify failed: self-signed certificate"


def test_upstream_tls_failure_without_a_request_is_recorded(capsem, capsem_home):
    c = Conn(capsem, "127.0.0.1", 18443)
    c.connect()
    c.tls_fails("Certificate verify failed: self-signed certificate")
    c.close()
    (row,) = net_rows(capsem, capsem_home)
    assert row["method"] == "CONNECT"
    assert (
        row["error"]
        == "upstream TLS handshake with 127.0.0.1:18443 failed: Certificate verify failed: self-signed certificate"
    )


def test_client_giving_up_on_a_connect_that_hangs_is_a_timeout(capsem, capsem_home):
    """mitmproxy reports the cancelled connect after the client is gone."""
    c = Conn(capsem, "127.0.0.1", 18445)
    capsem.connections.server_connect(c.data)
    c.close()
    c.connect_error("client disconnected")
    c.connect_answered_502()
    (row,) = net_rows(capsem, capsem_home)
    assert row["method"] == "CONNECT" and row["error"].startswith(
        "timed out: no answer from 127.0.0.1:18445 after"
    )
    assert "the client gave up" in row["error"]


def test_tls_handshake_unanswered_at_shutdown_is_a_timeout(capsem, capsem_home):
    c = Conn(capsem, "127.0.0.1", 18444)
    c.connect()
    capsem.connections.tls_start_server(TlsData(c.server, c.context))
    (row,) = net_rows(capsem, capsem_home)
    assert row["error"].startswith("timed out: TLS handshake to 127.0.0.1:18444 unanswered after")


def test_the_clients_tls_failure_after_an_upstream_one_is_not_a_second_row(capsem, capsem_home):
    c = Conn(capsem, "127.0.0.1", 18444)
    c.connect()
    c.tls_fails("connection closed")
    capsem.connections.tls_failed_client(TlsData(c.client, c.context))
    c.close()
    (row,) = net_rows(capsem, capsem_home)
    assert row["error"] == "upstream TLS handshake with 127.0.0.1:18444 failed: connection closed"


def test_working_tunnels_and_requests_leave_no_connection_rows(capsem, capsem_home):
    c = Conn(capsem, "api.example.test", 443)
    c.connect()
    capsem.connections.tls_start_server(TlsData(c.server, c.context))
    capsem.connections.tls_established_server(TlsData(c.server, c.context))
    c.request(None)
    c.close()
    plain = Conn(capsem, "ws.example.test", 80)  # a tunnel that carried no HTTP at all
    plain.connect()
    plain.close()
    assert [r["method"] for r in net_rows(capsem, capsem_home)] == ["GET"]


def test_describe_names_each_kind():
    assert describe(
        "h", 1, "[Errno -3] Temporary failure in name resolution", tls=False, waited=0
    ).startswith("DNS lookup failed for h")
    assert describe("h", 1, "[Errno 110] Connect call failed", tls=False, waited=0).startswith("timed out")
    assert describe("h", 1, "[Errno 101] Network is unreachable", tls=False, waited=0) == (
        "cannot connect to h:1: [Errno 101] Network is unreachable"
    )
