"""ProcessResolver (addons/proxy/process.py) on real loopback connections of this process and a child."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from addons.proxy.process import ProcessResolver, PsutilTable
from addons.proxy.sockets import Socket, find_socket, proc_net_keys

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# Per line read on stdin: an empty one opens a connection to (host, port) and prints its local
# port; any other renames the process (/proc/self/comm). Connections stay open until stdin closes.
CHILD = """
import socket, sys
host, port, held = sys.argv[1], int(sys.argv[2]), []
for line in sys.stdin:
    if line.strip():
        with open("/proc/self/comm", "w") as comm:
            comm.write(line.strip())
        print(0, flush=True)
        continue
    held.append(socket.create_connection((host, port)))
    print(held[-1].getsockname()[1], flush=True)
"""


def _ipv6_loopback() -> bool:
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        return False
    return True


class Server:
    """A listening socket that accepts (and later closes) every connection made to it."""

    def __init__(self, host: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family, backlog=64)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []

    def accept(self) -> socket.socket:
        self.accepted.append(self.sock.accept()[0])
        return self.accepted[-1]

    def connect(self) -> socket.socket:
        """A connection from this process (accepted, so both ends exist)."""
        client = socket.create_connection((self.host, self.port))
        self.accept()
        return client

    def close(self) -> None:
        for sock in self.accepted:
            sock.close()
        self.sock.close()


class Child:
    """A python child process that opens connections to a server when asked."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, server.host, str(server.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.pid = self.process.pid

    def _ask(self, line: str) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def connect(self) -> tuple[str, int]:
        """Open one more connection in the child; its local (ip, port)."""
        port = self._ask("")
        self.server.accept()
        return (self.server.host, port)

    def rename(self, name: str) -> None:
        self._ask(name)

    def name(self) -> str:
        return psutil.Process(self.pid).name()

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(10)
        self.process.stdout.close()


HOSTS = ["127.0.0.1", pytest.param("::1", marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no ::1"))]


@pytest.fixture(params=HOSTS)
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    srv = Server(request.param)
    yield srv
    srv.close()


@pytest.fixture
def child(server: Server) -> Iterator[Child]:
    proc = Child(server)
    yield proc
    proc.close()


@pytest.fixture(params=[True, False], ids=["netlink", "proc-net"])
def resolver(request: pytest.FixtureRequest) -> Iterator[ProcessResolver]:
    res = ProcessResolver(netlink=request.param)
    yield res
    res.close()


ME = (psutil.Process().name(), os.getpid())


def test_own_connection(server: Server, resolver: ProcessResolver) -> None:
    client = server.connect()
    try:
        assert resolver.resolve(client.getsockname()) == ME
        assert resolver.resolve(client.getsockname(), client.getpeername()) == ME  # with the server's address
    finally:
        client.close()


def test_child_connection(child: Child, resolver: ProcessResolver) -> None:
    peer = child.connect()
    assert resolver.resolve(peer) == (child.name(), child.pid)
    assert resolver.resolve(peer, (child.server.host, child.server.port)) == (child.name(), child.pid)


@pytest.mark.skipif(not _ipv6_loopback(), reason="no ::1")
def test_ipv4_mapped_addresses(resolver: ProcessResolver) -> None:
    """A dual-stack proxy sees an IPv4 client as ::ffff:a.b.c.d; a dual-stack client socket is
    listed as such too."""
    listener = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    port = listener.getsockname()[1]
    v4 = socket.create_connection(("127.0.0.1", port))
    mapped = socket.socket(socket.AF_INET6)
    mapped.connect(("::ffff:127.0.0.1", port))
    ends = [listener.accept() for _ in range(2)]
    try:
        for end, peer in ends:
            assert peer[0] == "::ffff:127.0.0.1"
            assert resolver.resolve(peer) == ME
            assert resolver.resolve(peer, end.getsockname()) == ME
    finally:
        for sock in [v4, mapped, listener, *(end for end, _ in ends)]:
            sock.close()


@linux
def test_second_connection_of_a_known_process_reads_one_fd_directory(server: Server) -> None:
    resolver = ProcessResolver()
    first, second = Child(server), Child(server)
    try:
        peer = first.connect()
        assert resolver.resolve(peer) == (first.name(), first.pid)
        before = resolver.fd_dirs_scanned
        assert resolver.resolve(first.connect()) == (first.name(), first.pid)
        assert resolver.fd_dirs_scanned - before == 1  # the last owner is searched first
        # a process not seen before: the known owner, its children and ancestors come first, then /proc
        before = resolver.fd_dirs_scanned
        assert resolver.resolve(second.connect()) == (second.name(), second.pid)
        assert resolver.fd_dirs_scanned > before
    finally:
        first.close()
        second.close()
        resolver.close()


@linux
def test_children_of_a_known_process_come_before_the_rest_of_proc(child: Child) -> None:
    """This test process owned a connection; its child's connection is found among its children."""
    resolver = ProcessResolver()
    client = child.server.connect()
    try:
        assert resolver.resolve(client.getsockname()) == ME
        before = resolver.fd_dirs_scanned
        assert resolver.resolve(child.connect()) == (child.name(), child.pid)
        assert resolver.fd_dirs_scanned - before <= 1 + len(psutil.Process().children())
    finally:
        client.close()
        resolver.close()


@linux
def test_names_are_cached_per_pid_and_start_time(child: Child) -> None:
    resolver = ProcessResolver()
    try:
        name = child.name()
        assert resolver.resolve(child.connect()) == (name, child.pid)
        # the child renames itself: the resolver keeps the name it cached for this pid and start time
        child.rename("renamed-child")
        assert resolver.resolve(child.connect()) == (name, child.pid)
        assert ProcessResolver().resolve(child.connect()) == ("renamed-child", child.pid)
        # a cached entry with another start time is another process that had this pid: named anew
        started, _ = resolver._names[child.pid]
        resolver._names[child.pid] = ((started or 0) - 1, "an earlier process")
        assert resolver.resolve(child.connect()) == ("renamed-child", child.pid)
    finally:
        resolver.close()


@pytest.mark.parametrize("peer", [None, ("8.8.8.8", 443), ("2001:db8::1", 443), ("not an ip", 1), ("", 0)])
def test_not_local_is_unknown(resolver: ProcessResolver, peer: tuple[str, int] | None) -> None:
    assert resolver.resolve(peer) == (None, None)
    assert resolver.lookup("conn", peer) is False
    assert resolver.found("conn") is None


def test_is_local(resolver: ProcessResolver) -> None:
    assert resolver.is_local("127.0.0.1")
    assert resolver.is_local("::1")
    assert resolver.is_local("::ffff:127.0.0.1")
    assert not resolver.is_local("8.8.8.8")
    assert not resolver.is_local("garbage")


def test_closed_or_unknown_connection_is_unknown(server: Server, resolver: ProcessResolver) -> None:
    client = server.connect()
    peer = client.getsockname()
    client.close()
    for sock in server.accepted:
        sock.close()
    server.accepted.clear()
    assert resolver.resolve(peer) == (None, None)  # gone (TIME_WAIT or nothing): nobody owns it
    assert resolver.resolve((server.host, 1)) == (None, None)


def _found(resolver: ProcessResolver, key: str) -> tuple[str | None, int | None] | None:
    deadline = time.monotonic() + 10
    while (answer := resolver.found(key)) is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return answer


def test_lookup_runs_resolve_on_a_thread(server: Server, resolver: ProcessResolver) -> None:
    ran_on: list[threading.Thread] = []
    resolve = resolver.resolve

    def noted(*args: object) -> tuple[str | None, int | None]:
        ran_on.append(threading.current_thread())
        return resolve(*args)  # type: ignore[arg-type]

    resolver.resolve = noted  # type: ignore[method-assign]
    client = server.connect()
    try:
        assert resolver.found("conn-1") is None
        assert resolver.lookup("conn-1", client.getsockname())
        assert _found(resolver, "conn-1") == ME
        assert len(ran_on) == 1 and ran_on[0] is not threading.current_thread()  # the resolver's own
    finally:
        client.close()


def test_lookup_keeps_the_newest_answers(server: Server) -> None:
    resolver = ProcessResolver(max_found=3)
    client = server.connect()
    try:
        for n in range(5):
            assert resolver.lookup(f"conn-{n}", client.getsockname())
        assert _found(resolver, "conn-4") == ME
        assert [resolver.found(f"conn-{n}") for n in range(5)] == [None, None, ME, ME, ME]
    finally:
        client.close()
        resolver.close()


def test_close_keeps_answers_and_stops_the_thread(server: Server) -> None:
    resolver = ProcessResolver()
    client = server.connect()
    try:
        before = set(threading.enumerate())
        assert resolver.lookup("conn-1", client.getsockname())
        (thread,) = set(threading.enumerate()) - before
        assert _found(resolver, "conn-1") == ME
        resolver.close()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert resolver.found("conn-1") == ME
        assert resolver.lookup("conn-2", client.getsockname())  # a new thread after a close
        assert _found(resolver, "conn-2") == ME
    finally:
        client.close()
        resolver.close()


def test_resolve_after_close(server: Server) -> None:
    resolver = ProcessResolver()
    resolver.close()
    client = server.connect()
    try:
        assert resolver.resolve(client.getsockname()) == ME
    finally:
        client.close()
        resolver.close()


# -- the /proc/net/tcp* text ---------------------------------------------------------------------

TABLE = (
    b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    b"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0\n"
    b"   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 0 1 0\n"
    b"   2: 0100007F:C350 0100007F:1F90 06 00000000:00000000 03:00000000 00000000     0        0 0 3 0\n"
    b"   3: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0\n"
    b"   4: 0100007F:C351 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 333 1"
)


def test_find_socket_skips_listeners_time_wait_and_unfinished_lines() -> None:
    assert find_socket(TABLE, b"0100007F:1F90") is None  # the listener and an unaccepted connection
    assert find_socket(TABLE, b"0100007F:C350") == Socket(inode=222, uid=1000)  # not the TIME_WAIT line
    assert find_socket(TABLE, b"0100007F:C351") is None  # the read stopped inside its line
    assert find_socket(TABLE + b" 0\n", b"0100007F:C351") == Socket(inode=333, uid=1000)


@linux
def test_proc_net_keys_match_the_kernel_table(server: Server) -> None:
    client = server.connect()
    try:
        ip, port = client.getsockname()[:2]
        keys = proc_net_keys(ipaddress.ip_address(ip), port)
        with open(keys[0][0], "rb") as f:
            assert find_socket(f.read(), keys[0][1]) == Socket(os.fstat(client.fileno()).st_ino, os.geteuid())
    finally:
        client.close()


def test_psutil_table_the_fallback_off_linux(child: Child) -> None:
    table = PsutilTable()
    peer = child.connect()
    assert table.resolve(*peer) == (child.name(), child.pid)
    assert table.resolve(*child.connect()) == (child.name(), child.pid)  # newer than the snapshot
    assert table.resolve(child.server.host, 1) == (None, None)
