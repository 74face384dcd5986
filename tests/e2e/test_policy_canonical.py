"""The policy decides on what a request means, through a real mitmdump (issue 33): a path rule holds
against every spelling of the path, a host rule against every spelling of the host and every name
the request carries (URI, Host header, SNI, HTTP/2 `:authority`), an address rule against every
spelling of the address; the record keeps the path exactly as sent, its canonical form beside it.

Requests are sent with http.client, which sends the target as given (no normalizing)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import pytest

from tests.cli.conftest import run
from tests.conftest import only_session, rows
from tests.e2e.test_policy import write_policy
from tests.shared_proxy import SharedProxy


def send(
    proxy_url: str, target: str, host: str | None = None, method: str = "GET"
) -> http.client.HTTPResponse:
    """`method target` through the proxy, the target as given, with `host` as the Host header (else
    none but the target's); the response, read."""
    proxy = urlsplit(proxy_url)
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30)
    conn.putrequest(method, target, skip_host=host is not None, skip_accept_encoding=True)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def denied_by(response: http.client.HTTPResponse) -> str | None:
    return response.getheader("x-capsem-policy") if response.status == 403 else None


DENIED_PATHS = ["//admin/users", "/./admin/users", "/a/../admin/users", "/%61dmin/users", "/%61DMIN/../admin/users",
                "/%2E%2E/admin/users", "/admin;x=1/users", "/public/..;/admin/users", "/admin%2Fusers"]  # fmt: skip


ALLOWED_PATHS = ["/%2561dmin/users", "/ADMIN/users"]  # another path: decoded once, case kept


def path_traffic(proxy, emu) -> tuple[list[str | None], list[int]]:
    """Each of DENIED_PATHS, then each of ALLOWED_PATHS: (the rule that refused each denied one, the
    allowed ones' statuses)."""
    denied = [denied_by(send(proxy.url, emu.http_url + path)) for path in DENIED_PATHS]
    return denied, [send(proxy.url, emu.http_url + p).status for p in ALLOWED_PATHS]


def test_a_path_rule_refuses_every_spelling_and_the_record_keeps_the_path_as_sent(shared):
    s = shared[1].scenario("paths")
    denied, allowed = s.result
    assert denied == ["no-admin"] * len(DENIED_PATHS)
    assert allowed == [404, 404]
    assert [e["path"] for e in s.exchanges] == ALLOWED_PATHS  # no denied spelling reached the upstream
    nets = rows(
        shared[1].db,
        f"SELECT path, canonical_path, decision FROM net_events WHERE id IN ({s.ids()}) ORDER BY id",
    )
    assert nets == [
        {"path": "//admin/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/./admin/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/a/../admin/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/%61dmin/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/%61DMIN/../admin/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/%2E%2E/admin/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/admin;x=1/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/public/..;/admin/users", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/admin%2Fusers", "canonical_path": "/admin/users", "decision": "denied"},
        {"path": "/%2561dmin/users", "canonical_path": "/%2561dmin/users", "decision": "allowed"},
        {"path": "/ADMIN/users", "canonical_path": "/ADMIN/users", "decision": "allowed"},
    ]


SECRET = "T0CANON01/B0CANON02/CANONsecretSlackHook00000"


def test_a_secret_in_the_path_is_redacted_in_both_path_columns(shared):
    s = shared[1].scenario("secret")
    assert s.result == 404
    ((path, canonical),) = [tuple(r.values()) for r in rows(shared[1].db,
                            f"SELECT path, canonical_path FROM net_events WHERE id IN ({s.ids()})")]  # fmt: skip
    assert path.startswith("//services/") and canonical.startswith("/services/")
    assert "CANONsecret" not in path and "CANONsecret" not in canonical
    assert "CANONsecret" not in shared[1].proxy.log()


GLOB_HOSTS = ["x.pastebin.com.", "X.PASTEBIN.COM", "x.PasteBin.com.:80"]
ADDRESS_RULES = ["127.0.0.1", "127.0.0.0/8", "localhost"]
SPELLINGS = ("127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.1", "localhost")
SHARED_POLICY = (
    "    - {name: no-paste, action: deny, host: '*.pastebin.com'}\n"
    + "".join(
        f"    - {{name: no-local-admin-{n}, action: deny, host: '{rule}', path: '/admin{n}/*'}}\n"
        for n, rule in enumerate(ADDRESS_RULES)
    )
    + "    - {name: no-admin, action: deny, path: '/admin/*'}\n"
)
# each address rule on a path of its own: the rule that refuses names which spelling of it held; the
# path rule's path is none of theirs


@pytest.fixture(scope="module")
def shared(emulator, tmp_path_factory) -> tuple[SharedProxy, SharedProxy]:
    """Two mitmdumps with `SHARED_POLICY`: upstream the emulator (it answers for any host: no DNS),
    for the host globs, one scenario per host; and direct, for the address rules, one per rule, the
    path rule and a secret in a path."""
    config = "policy:\n  rules:\n" + SHARED_POLICY
    by_glob = SharedProxy(emulator, tmp_path_factory.mktemp("glob"), config=config)
    try:
        for host in GLOB_HOSTS:
            by_glob.run(host, lambda proxy, h=host: glob_traffic(proxy, h), flows=2)
    finally:
        by_glob.stop()
    by_address = SharedProxy(emulator, tmp_path_factory.mktemp("address"), config=config, upstream=False)
    try:
        for n, rule in enumerate(ADDRESS_RULES):
            by_address.run(
                rule, lambda proxy, n=n: address_traffic(proxy, emulator, n), flows=len(SPELLINGS) + 1
            )
        by_address.run("paths", lambda proxy: path_traffic(proxy, emulator), flows=len(DENIED_PATHS) + 2)
        by_address.run("secret", lambda proxy: send(proxy.url, f"{emulator.http_url}//services/{SECRET};x",
                                                    method="POST").status)  # fmt: skip
    finally:
        by_address.stop()
    return by_glob, by_address


def glob_traffic(proxy, host: str) -> tuple[str | None, int]:
    return denied_by(send(proxy.url, f"http://{host}/v1/models")), send(
        proxy.url, "http://api.example.com/v1/models"
    ).status


@pytest.mark.parametrize("host", GLOB_HOSTS)
def test_a_host_glob_refuses_the_canonical_name(shared, host):
    s = shared[0].scenarios[host]
    assert s.result == ("no-paste", 200)
    assert [e["host"] for e in s.exchanges] == ["api.example.com"]


def address_traffic(proxy, emu, n: int) -> tuple[dict[str, str | None], int]:
    port = urlsplit(emu.http_url).port
    denied = {host: denied_by(send(proxy.url, f"http://{host}:{port}/admin{n}/users")) for host in SPELLINGS}
    return denied, send(proxy.url, f"http://127.1:{port}/v1/models").status


@pytest.mark.parametrize("rule", ADDRESS_RULES)
def test_an_address_rule_refuses_every_spelling_of_the_address(shared, rule):
    n = ADDRESS_RULES.index(rule)
    s = shared[1].scenarios[rule]
    denied, allowed = s.result
    assert denied == dict.fromkeys(SPELLINGS, f"no-local-admin-{n}")
    assert allowed == 200  # the rule names a path too
    assert [e["path"] for e in s.exchanges] == ["/v1/models"]


def test_a_host_header_naming_a_denied_host_is_refused_whatever_the_uri(mitmdump, emu, capsem_home):
    write_policy(capsem_home, "    - {name: no-paste, action: deny, host: '*.pastebin.com'}\n")
    proxy = mitmdump()
    assert denied_by(send(proxy.url, emu.http_url + "/v1/models", host="x.pastebin.com")) == "no-paste"
    assert send(proxy.url, emu.http_url + "/v1/models", host="api.example.com").status == 200
    assert [e["request_headers"]["host"] for e in emu.exchanges()] == ["api.example.com"]
    assert proxy.stop() == 0
    nets = rows(only_session(capsem_home), "SELECT id, domain, decision FROM net_events ORDER BY id")
    assert [(n["domain"], n["decision"]) for n in nets] == [("127.0.0.1", "denied"), ("127.0.0.1", "allowed")]
    # `capsem policy test` reads the recorded Host header and decides as the proxy did
    findings = json.loads(run("policy", "test", "--json"))["findings"]
    assert [(f["net_event_id"], f["rule"]) for f in findings] == [(nets[0]["id"], "no-paste")]


def _tunnel(proxy_url: str, target: str, sni: str, alpn: str) -> ssl.SSLSocket:
    """CONNECT `target` through the proxy, then TLS with `sni` and `alpn` (certificates not verified)."""
    proxy = urlsplit(proxy_url)
    raw = socket.create_connection((proxy.hostname, proxy.port), timeout=30)
    raw.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert raw.recv(4096).startswith(b"HTTP/1.1 200")
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols([alpn])
    return context.wrap_socket(raw, server_hostname=sni)


def _tls_get(proxy_url: str, target: str, sni: str) -> bytes:
    """One HTTP/1.1 GET in a TLS tunnel with `sni`; the answer's head."""
    with _tunnel(proxy_url, target, sni, "http/1.1") as tls:
        tls.sendall(f"GET /v1/models HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer and (piece := tls.recv(4096)):
            answer += piece
    return answer


def _h2_get(proxy_url: str, target: str, authority: str) -> dict[str, str]:
    """One HTTP/2 GET in a TLS tunnel to `target` with `:authority` `authority`; the answer's headers."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    with _tunnel(proxy_url, target, "localhost", "h2") as tls:
        assert tls.selected_alpn_protocol() == "h2"
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "GET"), (":path", "/v1/models"), (":scheme", "https"),
                              (":authority", authority)], end_stream=True)  # fmt: skip
        tls.sendall(conn.data_to_send())
        while data := tls.recv(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    return dict(event.headers)
            tls.sendall(conn.data_to_send())
    raise AssertionError("no answer")


def test_a_tls_sni_naming_a_denied_host_is_refused(mitmdump, emu, capsem_home):
    write_policy(capsem_home, "    - {name: no-paste, action: deny, host: '*.pastebin.com'}\n")
    proxy = mitmdump(args=["--set", "ssl_insecure=true"])
    target = urlsplit(emu.https_url).netloc
    assert b"x-capsem-policy: no-paste" in _tls_get(proxy.url, target, "x.pastebin.com")
    assert _tls_get(proxy.url, target, "api.example.com").startswith(b"HTTP/1.1 200")
    assert len(emu.exchanges()) == 1


def test_an_http2_authority_naming_a_denied_host_is_refused(mitmdump, emu, capsem_home):
    write_policy(capsem_home, "    - {name: no-paste, action: deny, host: '*.pastebin.com'}\n")
    # lazy: mitmproxy speaks HTTP/2 to the client though the emulator speaks HTTP/1.1
    proxy = mitmdump(args=["--set", "ssl_insecure=true", "--set", "connection_strategy=lazy"])
    target = urlsplit(emu.https_url).netloc
    denied = _h2_get(proxy.url, target, "x.pastebin.com")
    assert (denied[":status"], denied.get("x-capsem-policy")) == ("403", "no-paste")
    assert _h2_get(proxy.url, target, target)[":status"] == "200"
    assert len(emu.exchanges()) == 1
