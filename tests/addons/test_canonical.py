"""The canonical request (addons/canonical.py): one form for every spelling of a path, a host, an
address; the policy's use of it is tests/addons/proxy/test_policy.py, through mitmdump
tests/e2e/test_policy_canonical.py."""

from __future__ import annotations

import ipaddress

import pytest

from addons.canonical import (
    CanonicalRequest,
    HostPattern,
    Name,
    canonical_name,
    canonical_path,
    parse_address,
    path_readings,
    split_target,
)

PATHS = [
    # (as sent, canonical)
    ("/v1/messages", "/v1/messages"),
    ("/", "/"),
    ("", "/"),
    ("v1/x", "/v1/x"),
    ("*", "*"),
    ("//admin/users", "/admin/users"),
    ("///admin//users//", "/admin/users/"),
    ("/./admin", "/admin"),
    ("/admin/.", "/admin/"),
    ("/x/../admin", "/admin"),
    ("/a/b/..", "/a/"),
    ("/../../admin", "/admin"),  # `..` stops at the root
    ("/..", "/"),
    ("/.well-known/x", "/.well-known/x"),
    ("/a..b/c.", "/a..b/c."),
    ("/%61dmin", "/admin"),
    ("/%61DMIN", "/aDMIN"),
    ("/ADMIN", "/ADMIN"),  # paths are case-sensitive
    ("/%41dmin", "/Admin"),
    ("/ad%6din/users", "/admin/users"),
    ("/ad%6Din/users", "/admin/users"),
    ("/%2E%2E/admin", "/admin"),
    ("/x/%2e%2E/admin", "/admin"),
    ("/x/.%2e/admin", "/admin"),
    ("/%7Euser/%5F", "/~user/_"),
    ("/%2561dmin", "/%2561dmin"),  # decoded once: `%25` is `%`, not unreserved
    ("/%252E%252E/admin", "/%252E%252E/admin"),
    ("/a%20b%3bc", "/a%20b%3Bc"),  # other escapes kept, upper-cased
    ("/a%zzb", "/a%zzb"),  # not an escape
    ("/admin;x=1/users", "/admin/users"),
    ("/admin;/users;jsessionid=1", "/admin/users"),
    ("/public/..;/admin", "/admin"),  # Tomcat's `..;`
    ("/admin%3Bx/users", "/admin%3Bx/users"),
    ("/admin/users#frag", "/admin/users"),
    ("/admin%2Fusers", "/admin/users"),
    ("/admin%2fusers", "/admin/users"),
    ("/admin%5Cusers", "/admin/users"),
    ("/admin\\users", "/admin/users"),
    ("/x%2F..%2Fadmin", "/admin"),
    ("/x\\..\\admin", "/admin"),
]


@pytest.mark.parametrize(("sent", "canonical"), PATHS)
def test_the_canonical_path(sent, canonical):
    assert canonical_path(sent) == canonical
    assert canonical_path(canonical) == canonical  # idempotent
    assert path_readings(sent)[0] == canonical


@pytest.mark.parametrize(
    ("sent", "readings"),
    [
        ("/admin/users", ("/admin/users",)),
        ("/admin%2Fusers", ("/admin/users", "/admin%2Fusers")),
        ("/admin%5cusers", ("/admin/users", "/admin%5Cusers")),
        ("/admin\\users", ("/admin/users", "/admin\\users")),
        # Tomcat sets `;params` aside before it decodes: `/admin/users`; a decoding server: `/users`
        ("/admin;x%2F..%2F/users", ("/users", "/admin/users")),
        ("/%2F/a", ("/a", "/%2F/a")),
    ],
)
def test_escaped_slashes_are_read_both_ways(sent, readings):
    assert path_readings(sent) == readings


@pytest.mark.parametrize(
    ("target", "split"),
    [
        ("//admin/users", ("//admin/users", "")),
        ("//admin/users?a=1?b", ("//admin/users", "a=1?b")),
        ("/p?", ("/p", "")),
        ("http://x/y", ("http://x/y", "")),
    ],
)
def test_a_target_is_split_at_its_first_question_mark_only(target, split):
    assert split_target(target) == split


LOOPBACK = ipaddress.ip_address("127.0.0.1")

ADDRESSES = [
    ("127.0.0.1", LOOPBACK),
    ("127.1", LOOPBACK),
    ("127.0.1", LOOPBACK),
    ("2130706433", LOOPBACK),
    ("0x7f000001", LOOPBACK),
    ("0X7F000001", LOOPBACK),
    ("0x7f.1", LOOPBACK),
    ("0x7f.0.0.0x1", LOOPBACK),
    ("0177.0.0.1", LOOPBACK),
    ("0177.1", LOOPBACK),
    ("017700000001", LOOPBACK),
    ("::ffff:127.0.0.1", LOOPBACK),
    ("::ffff:7f00:1", LOOPBACK),
    ("0:0:0:0:0:ffff:7f00:1", LOOPBACK),
    ("::1", ipaddress.ip_address("::1")),
    ("0:0::1", ipaddress.ip_address("::1")),
    ("fe80::1%eth0", ipaddress.ip_address("fe80::1")),
    ("0", ipaddress.ip_address("0.0.0.0")),
    ("0x", ipaddress.ip_address("0.0.0.0")),  # glibc reads a bare 0x as 0
    ("4294967295", ipaddress.ip_address("255.255.255.255")),
    ("10.0.65535", ipaddress.ip_address("10.0.255.255")),
]


@pytest.mark.parametrize(("text", "address"), ADDRESSES)
def test_every_spelling_of_an_address_is_one_address(text, address):
    assert parse_address(text) == address


@pytest.mark.parametrize(
    "text",
    ["4294967296", "256.1", "1.256.1", "1.2.3.256", "1.2.3.4.5", "08.1", "0x1g", "1..2", "1.2.3.", "",
     "1.2.3.com", "example.com", "１２７.１", "::g", "1.2.3.4 x"],
)  # fmt: skip
def test_what_is_no_address(text):
    assert parse_address(text) is None


@pytest.mark.parametrize(
    ("carried", "name"),
    [
        ("api.openai.com", Name("api.openai.com")),
        ("API.OpenAI.com", Name("api.openai.com")),
        ("x.pastebin.com.", Name("x.pastebin.com")),
        ("x.pastebin.com..", Name("x.pastebin.com")),
        ("x.pastebin.com:8443", Name("x.pastebin.com")),
        ("x.pastebin.com.:8443", Name("x.pastebin.com")),
        (" x.pastebin.com ", Name("x.pastebin.com")),
        ("user:pw@x.pastebin.com:80", Name("x.pastebin.com")),
        ("bücher.de", Name("xn--bcher-kva.de")),
        ("BÜCHER.de", Name("xn--bcher-kva.de")),
        ("ｘ.ｐａｓｔｅｂｉｎ.ｃｏｍ", Name("x.pastebin.com")),  # nameprep, as Python's resolver reads it
        ("１２７.０.０.１", Name("127.0.0.1", LOOPBACK)),
        ("127.1:8080", Name("127.0.0.1", LOOPBACK)),
        ("[::ffff:7f00:1]:443", Name("127.0.0.1", LOOPBACK)),
        ("[::1]", Name("::1", ipaddress.ip_address("::1"))),
        ("::1", Name("::1", ipaddress.ip_address("::1"))),
        ("0x7f000001.", Name("127.0.0.1", LOOPBACK)),
    ],
)
def test_the_canonical_name(carried, name):
    assert canonical_name(carried) == name


def test_an_empty_name_is_none():
    assert canonical_name("") is None
    assert canonical_name(".") is None
    assert canonical_name(":443") is None


def test_loopback_names():
    assert all(
        canonical_name(n).loopback for n in ("localhost", "LOCALHOST.", "a.localhost", "127.9.9.9", "::1")
    )
    assert not any(canonical_name(n).loopback for n in ("localhost.example", "mylocalhost", "10.0.0.1"))


def test_the_canonical_request_holds_each_name_once_the_destination_first():
    request = CanonicalRequest.of("get", 443, "//admin/users", ["api.openai.com", "API.OPENAI.COM:443",
                                                              "x.pastebin.com.", "", "127.1"])  # fmt: skip
    assert request.method == "GET"
    assert request.path == "/admin/users"
    assert [n.host for n in request.names] == ["api.openai.com", "x.pastebin.com", "127.0.0.1"]


@pytest.mark.parametrize(
    ("rule", "pattern"),
    [
        ("127.0.0.0/8", HostPattern(network=ipaddress.ip_network("127.0.0.0/8"))),
        ("127.0.0.1", HostPattern(network=ipaddress.ip_network("127.0.0.1/32"))),
        ("127.1", HostPattern(network=ipaddress.ip_network("127.0.0.1/32"))),
        ("[::1]", HostPattern(network=ipaddress.ip_network("::1/128"))),
        ("::ffff:0:0/96", HostPattern(network=ipaddress.ip_network("0.0.0.0/0"))),
        ("*.PasteBin.com.", HostPattern(glob="*.pastebin.com")),
        ("*.bücher.de", HostPattern(glob="*.xn--bcher-kva.de")),
        ("10.*", HostPattern(glob="10.*")),
    ],
)
def test_a_rule_host_is_an_address_range_or_a_glob(rule, pattern):
    assert HostPattern.of(rule) == pattern


def test_a_slash_that_is_no_range_is_an_error():
    with pytest.raises(ValueError):
        HostPattern.of("10.0.0.0/33")


def test_a_glob_matches_an_address_by_its_own_text():
    assert HostPattern.of("127.0.0.*").matches(canonical_name("2130706433"))
    assert not HostPattern.of("127.0.0.*").matches(canonical_name("127.0.1.1"))
