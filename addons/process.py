"""Which local process opened a client connection (psutil lookup by source port).

Looking connections up walks /proc, which is too slow for the event loop, so lookups run
on one background thread and return futures. A connection-table snapshot serves every lookup
for connections that existed when it was taken; names are cached per pid.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import psutil

ProcessInfo = tuple[str | None, int | None]


class ProcessResolver:
    def __init__(self, max_age: float = 0.25) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="capsem-pid")
        self._max_age = max_age
        self._snapshot: dict[tuple[str, int], int] = {}
        self._snapshot_at = 0.0
        self._names: dict[int, str | None] = {}
        self._lock = threading.Lock()
        self._local = self._local_addresses()

    @staticmethod
    def _local_addresses() -> set[str]:
        addrs = {"127.0.0.1", "::1"}
        try:
            for entries in psutil.net_if_addrs().values():
                addrs.update(e.address.split("%")[0] for e in entries)
        except Exception:
            pass
        return addrs

    def is_local(self, ip: str) -> bool:
        if ip.startswith("::ffff:"):
            ip = ip[7:]
        try:
            return ipaddress.ip_address(ip).is_loopback or ip in self._local
        except ValueError:
            return False

    def lookup(self, peer: tuple[str, int] | None) -> Future[ProcessInfo] | None:
        """Start a lookup for a client address; None when it is not on this machine."""
        if not peer or not self.is_local(peer[0]):
            return None
        return self._pool.submit(self._resolve, peer[0], int(peer[1]), time.monotonic())

    def resolve(self, peer: tuple[str, int] | None) -> ProcessInfo:
        """The process behind a client address, looked up now (None, None when unknown)."""
        if not peer or not self.is_local(peer[0]):
            return (None, None)
        return self._resolve(peer[0], int(peer[1]), time.monotonic())

    def _resolve(self, ip: str, port: int, asked_at: float) -> ProcessInfo:
        key = (ip[7:] if ip.startswith("::ffff:") else ip, port)
        with self._lock:
            pid = self._snapshot.get(key)
            # a snapshot taken before the connection existed cannot know it: refresh (lookups
            # queued together share the new snapshot)
            if pid is None and (
                self._snapshot_at < asked_at or time.monotonic() - self._snapshot_at > self._max_age
            ):
                self._refresh()
                pid = self._snapshot.get(key)
            if pid is None:
                return (None, None)
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
                    ip = conn.laddr.ip
                    snapshot[(ip[7:] if ip.startswith("::ffff:") else ip, conn.laddr.port)] = conn.pid
        except (psutil.Error, OSError):
            pass
        self._snapshot = snapshot
        self._snapshot_at = started

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
