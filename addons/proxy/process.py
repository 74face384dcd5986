"""Which local process opened a client connection: its (name, pid), from the client's address.

On Linux, `ProcessResolver.resolve` reads only what it needs, in two steps:

1. The client's socket: its inode (and owner uid) from the kernel's socket table, asked through
   NETLINK_SOCK_DIAG (inet_diag): by the connection's two addresses when the caller knows the
   address the client connected to (a hash lookup, ~10 µs), else by the client's port (the
   kernel filters while it walks its table, well under a millisecond). Where that interface is
   missing, the line of /proc/net/tcp or /proc/net/tcp6 whose local address is the client's
   (the kernel formats the whole table: milliseconds).
2. The process holding `socket:[inode]` among its open files (/proc/<pid>/fd). Agents open many
   connections from the same few processes, so it looks first in the processes that owned
   earlier connections, then in their descendants (an agent's tools and servers) and their
   ancestors, and only then in all of /proc, newest pid first.

Names are cached per pid with the process's start time, so a reused pid is not misnamed.
Elsewhere (macOS) it reads psutil's whole connection table, as capsem always did.

A lookup is synchronous work that holds the GIL for a while: `lookup()` runs it on the resolver's
own thread, and costs the hook that asks a queue put. (It could live in a process other than
mitmdump, but the tool rules decide on the process's name in mitmdump.)
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from queue import SimpleQueue

import psutil

from addons.proxy.sockets import IPAddress, SockDiag, Socket, kernel_address, scan_proc_net

logger = logging.getLogger(__name__)

ProcessInfo = tuple[str | None, int | None]
"""(process name, pid); (None, None) when unknown."""
UNKNOWN: ProcessInfo = (None, None)
Peer = tuple[str, int] | tuple[str, int, int, int]
"""A socket address as Python and mitmproxy give it: (ip, port[, flowinfo, scope id])."""


# -- the process, step 2: /proc/<pid> ------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) from /proc/<pid>/stat; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # the name may hold spaces and parentheses
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    """Direct children of a process (each thread's /proc/.../children); [] when unknown."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def holds_socket(pid: int, target: str) -> bool | None:
    """Whether process `pid` has `target` (`socket:[inode]`) among its open files (/proc/<pid>/fd).

    None when its fd directory cannot be read (the process is gone, or is not ours to inspect).
    """
    try:
        dir_fd = os.open(f"/proc/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for fd in reversed(os.listdir(dir_fd)):  # ascending: a new socket is most often the last
            try:
                if os.readlink(fd, dir_fd=dir_fd) == target:
                    return True
            except OSError:
                continue
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return False


def all_pids() -> list[int]:
    """Every pid in /proc, newest (highest) first: a connection is more often a new process's."""
    return sorted((int(n) for n in os.listdir("/proc") if n.isdigit()), reverse=True)


class ProcessResolver:
    """Finds the local process behind a client address; synchronous, thread-safe, never raises.

    Make it in the process that uses it (it holds a netlink socket, which a fork would share).

    Args:
        max_owners: how many recent connection owners to search first.
        max_names: how many pid names to keep.
        max_found: how many answers of `lookup` to keep (the oldest go first).
        netlink: ask the kernel through NETLINK_SOCK_DIAG (False: /proc/net/tcp* only).
    """

    def __init__(
        self, *, max_owners: int = 16, max_names: int = 4096, max_found: int = 10_000, netlink: bool = True
    ) -> None:
        self._linux = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")
        self._diag: SockDiag | None = None
        if self._linux and netlink:
            try:
                self._diag = SockDiag()
            except OSError as exc:
                logger.debug("capsem: no sock_diag (%r); reading /proc/net/tcp", exc)
        self._local = self._local_addresses()
        self._is_local: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._owners: OrderedDict[int, None] = OrderedDict()  # most recent last
        self._max_owners = max_owners
        self._names: OrderedDict[int, tuple[int | None, str | None]] = OrderedDict()
        self._max_names = max_names
        self._table = PsutilTable()
        self._queue: SimpleQueue[tuple[str, Peer, Peer | None] | None] | None = None
        """What the resolver's thread has still to look up (None: no thread runs)."""
        self._found: dict[str, ProcessInfo] = {}
        """Client connection id -> its process, as `lookup` found it (written by its thread only)."""
        self._max_found = max_found
        self.fd_dirs_scanned = 0
        """How many /proc/<pid>/fd directories were read, over all lookups (tests, benchmarks)."""

    @staticmethod
    def _local_addresses() -> set[str]:
        addrs = {"127.0.0.1", "::1"}
        try:
            for entries in psutil.net_if_addrs().values():
                addrs.update(str(a) for e in entries if (a := kernel_address(e.address)) is not None)
        except Exception:
            pass
        return addrs

    def is_local(self, ip: str) -> bool:
        """Whether `ip` is loopback or one of this machine's addresses (IPv4-mapped too)."""
        known = self._is_local.get(ip)
        if known is None:  # each client address is read once (an agent's are a few)
            addr = kernel_address(ip)
            known = addr is not None and (addr.is_loopback or str(addr) in self._local)
            if len(self._is_local) < 4096:
                self._is_local[ip] = known
        return known

    def resolve(self, peer: Peer | None, server: Peer | None = None) -> ProcessInfo:
        """(name, pid) of the local process whose socket is the client end `peer` = (ip, port).

        Args:
            peer: the client's address, as the proxy sees it (mitmproxy `client.peername`).
            server: the address the client connected to (`client.sockname`), when known: it
                makes the socket lookup a hash lookup instead of a walk of the socket table.
        Returns:
            (None, None) when the peer is not on this machine, or no process we may inspect
            holds that socket: a connection closed before (or while) it is looked up may
            legitimately be unknown, and so is one of another user's process (its
            /proc/<pid>/fd is closed to us). A connection that stays open until this returns
            is found.
        """
        if not peer or not self.is_local(peer[0]):
            return UNKNOWN
        try:
            with self._lock:
                if not self._linux:
                    return self._table.resolve(peer[0], int(peer[1]))
                return self._resolve_proc(peer, server)
        except Exception as exc:  # a lookup never breaks capture
            logger.debug("capsem: process lookup for %s failed: %r", peer, exc)
            return UNKNOWN

    def _resolve_proc(self, peer: Peer, server: Peer | None) -> ProcessInfo:
        local, port = kernel_address(peer[0]), int(peer[1])
        assert local is not None  # is_local checked it
        found = self._find_socket(local, port, server)
        if found is None:
            return UNKNOWN
        euid = os.geteuid()
        if euid != 0 and found.uid != euid:
            return UNKNOWN  # another user's process: its fd directory is closed to us
        target = f"socket:[{found.inode}]"
        for pid in self._candidates():
            if self._holds(pid, target):
                self._owners[pid] = None
                self._owners.move_to_end(pid)
                if len(self._owners) > self._max_owners:
                    self._owners.popitem(last=False)
                return (self._name(pid), pid)
        return UNKNOWN

    def _find_socket(self, local: IPAddress, port: int, server: Peer | None) -> Socket | None:
        if self._diag is not None:
            remote = None
            if server and (addr := kernel_address(server[0])) is not None:
                remote = (addr, int(server[1]))
            try:
                return self._diag.find(local, port, remote)
            except OSError as exc:
                logger.debug("capsem: sock_diag failed (%r); reading /proc/net/tcp from now on", exc)
                self._diag.close()
                self._diag = None
        return scan_proc_net(local, port)

    def _candidates(self) -> Iterator[int]:
        """Pids to search, each once: recent owners, their descendants, their ancestors, all."""
        seen: set[int] = set()
        owners = list(reversed(self._owners))

        def fresh(pids: list[int]) -> list[int]:
            new = [pid for pid in dict.fromkeys(pids) if pid not in seen]
            seen.update(new)
            return new

        yield from fresh(owners)
        generation = owners
        while generation := fresh([child for pid in generation for child in _children(pid)]):
            yield from generation
        for pid in owners:
            chain: list[int] = []
            stat = _stat(pid)
            while stat is not None and stat[0] > 1 and len(chain) < 64:
                chain.append(stat[0])
                stat = _stat(stat[0])
            yield from fresh(chain)
        yield from fresh(all_pids())

    def _holds(self, pid: int, target: str) -> bool:
        self.fd_dirs_scanned += 1
        held = holds_socket(pid, target)
        if held is None:
            self._owners.pop(pid, None)  # gone, or not ours to read
        return bool(held)

    def _name(self, pid: int) -> str | None:
        """The process name (psutil's), cached per (pid, start time)."""
        stat = _stat(pid)
        started = stat[1] if stat else None
        cached = self._names.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1]
        try:
            name: str | None = psutil.Process(pid).name()
        except psutil.Error:
            name = None
        self._names[pid] = (started, name)
        self._names.move_to_end(pid)
        if len(self._names) > self._max_names:
            self._names.popitem(last=False)
        return name

    # -- on the resolver's thread, for the capture hooks -------------------------------------------

    def lookup(self, key: str, peer: Peer | None, server: Peer | None = None) -> bool:
        """Queue `resolve(peer, server)` for the resolver's thread; its answer is `found(key)` once
        it is done. False (nothing queued) when the peer is not on this machine.

        Costs the caller a queue put: no future, no executor (a client connection's hook calls it)."""
        if not peer or not self.is_local(peer[0]):
            return False
        queue = self._queue
        if queue is None:
            queue = self._queue = SimpleQueue()
            threading.Thread(target=self._serve, args=(queue,), name="capsem-pid", daemon=True).start()
        queue.put((key, peer, server))
        return True

    def found(self, key: str) -> ProcessInfo | None:
        """The answer of `lookup(key, ...)`; None while it runs (or if it was never asked)."""
        return self._found.get(key)

    def _serve(self, queue: SimpleQueue[tuple[str, Peer, Peer | None] | None]) -> None:
        """The resolver's thread: answers the lookups of `queue` until `close`."""
        found, limit = self._found, self._max_found
        while (item := queue.get()) is not None:
            if queue is not self._queue:
                continue  # closed: what was still queued is dropped
            key, peer, server = item
            found[key] = self.resolve(peer, server)
            if len(found) > limit:  # only this thread writes: the oldest answer goes
                del found[next(iter(found))]

    def close(self) -> None:
        """Stop the lookup thread (lookups still queued are dropped), close the netlink socket,
        forget what was cached. Answers already found stay readable.

        A later `resolve()` still works (from /proc/net/tcp*, without netlink).
        """
        queue, self._queue = self._queue, None
        if queue is not None:
            queue.put(None)
        with self._lock:
            if self._diag is not None:
                self._diag.close()
                self._diag = None
            self._owners.clear()
            self._names.clear()


class PsutilTable:
    """The portable fallback (macOS): psutil's whole TCP connection table, as a snapshot.

    A snapshot serves lookups for up to `max_age` seconds; one that misses the connection is
    retaken if it predates the lookup (the connection may be newer than the snapshot).
    """

    def __init__(self, max_age: float = 0.25) -> None:
        self._max_age = max_age
        self._snapshot: dict[tuple[str, int], int] = {}
        self._snapshot_at = 0.0
        self._names: dict[int, str | None] = {}

    def resolve(self, ip: str, port: int) -> ProcessInfo:
        asked_at = time.monotonic()
        key = (str(kernel_address(ip)), port)
        if asked_at - self._snapshot_at > self._max_age:
            self._refresh()
        pid = self._snapshot.get(key)
        if pid is None and self._snapshot_at < asked_at:
            self._refresh()
            pid = self._snapshot.get(key)
        if pid is None:
            return UNKNOWN
        if pid not in self._names:
            try:
                self._names[pid] = psutil.Process(pid).name()
            except psutil.Error:
                self._names[pid] = None
        return (self._names[pid], pid)

    def _refresh(self) -> None:
        started = time.monotonic()  # a connection made while the table is read may be missing from it
        snapshot: dict[tuple[str, int], int] = {}
        try:
            for conn in psutil.net_connections(kind="tcp"):
                if conn.pid and conn.laddr:
                    snapshot[(str(kernel_address(conn.laddr.ip)), conn.laddr.port)] = conn.pid
        except (psutil.Error, OSError):
            pass
        self._snapshot = snapshot
        self._snapshot_at = started
