"""Which socket a client connection is, step 1 of `addons/proxy/process.py`: its inode and owner
uid from the kernel's socket table, through NETLINK_SOCK_DIAG (inet_diag), else from the line of
/proc/net/tcp or /proc/net/tcp6 whose local address is the client's."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from typing import NamedTuple

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Socket(NamedTuple):
    """A connected TCP socket in the kernel's table."""

    inode: int
    uid: int


def kernel_address(ip: str) -> IPAddress | None:
    """The address as the kernel keys it: zone dropped, IPv4-mapped IPv6 as IPv4."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _mapped(addr: ipaddress.IPv4Address) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + addr.packed)


# -- the socket, step 1a: NETLINK_SOCK_DIAG ------------------------------------------------------

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_TCP_LISTEN = 10
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQ = struct.Struct("=BBBxI")  # inet_diag_req_v2 head: family, protocol, ext, states
_SOCKID = struct.Struct("!HH16s16s")  # inet_diag_sockid: sport, dport, src, dst (then if, cookie)
_TAIL = struct.Struct("=III")  # inet_diag_sockid: interface, cookie (INET_DIAG_NOCOOKIE: ~0, ~0)
_MSG_UID_INODE = struct.Struct("=II")  # inet_diag_msg: uid and inode, at offset 64


class SockDiag:
    """One TCP socket from the kernel's table over netlink (inet_diag, Linux)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG)
        self._sock.settimeout(2.0)
        self._seq = 0

    def close(self) -> None:
        self._sock.close()

    def find(self, local: IPAddress, port: int, remote: tuple[IPAddress, int] | None = None) -> Socket | None:
        """The connected socket bound to (local, port) (connected to `remote` when given).

        Raises:
            OSError: when the kernel cannot answer (no inet_diag support, netlink refused).
        """
        if remote is not None and type(remote[0]) is type(local):
            found = self._ask(local, port, remote, dump=False)
            if found is not None:
                return found  # not found: the remote may be rewritten (NAT), so ask by port
        forms: list[IPAddress] = [local]
        if isinstance(local, ipaddress.IPv4Address):
            forms.append(_mapped(local))  # a dual-stack (AF_INET6) client socket
        for form in forms:
            found = self._ask(form, port, None, dump=True)
            if found is not None:
                return found
        return None

    def _ask(
        self, local: IPAddress, port: int, remote: tuple[IPAddress, int] | None, *, dump: bool
    ) -> Socket | None:
        family = socket.AF_INET if local.version == 4 else socket.AF_INET6
        src = local.packed.ljust(16, b"\0")
        dst, dport = (remote[0].packed.ljust(16, b"\0"), remote[1]) if remote else (b"\0" * 16, 0)
        states = 0xFFFFFFFF & ~(1 << _TCP_LISTEN)
        body = (_REQ.pack(family, socket.IPPROTO_TCP, 0, states) + _SOCKID.pack(port, dport, src, dst)
                + _TAIL.pack(0, 0xFFFFFFFF, 0xFFFFFFFF))  # fmt: skip
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        flags = _NLM_F_REQUEST | (_NLM_F_DUMP if dump else 0)
        self._sock.send(
            _NLMSG.pack(_NLMSG.size + len(body), _SOCK_DIAG_BY_FAMILY, flags, self._seq, 0) + body
        )
        found: Socket | None = None
        while True:
            data = self._sock.recv(1 << 16)
            at = 0
            while at + _NLMSG.size <= len(data):
                length, kind, _, seq, _ = _NLMSG.unpack_from(data, at)
                payload = data[at + _NLMSG.size : at + length]
                at += max(_NLMSG.size, (length + 3) & ~3)
                if seq != self._seq:
                    continue  # the tail of an earlier, abandoned answer
                if kind == _NLMSG_ERROR:
                    code = -struct.unpack_from("=i", payload)[0]
                    if code == 0:
                        continue  # an acknowledgement
                    if not dump and code == errno.ENOENT:
                        return None
                    raise OSError(code, f"sock_diag: {os.strerror(code)}")
                if kind == _NLMSG_DONE:
                    return found
                if kind == _SOCK_DIAG_BY_FAMILY and len(payload) >= 72 and found is None:
                    state, (sport, _, psrc) = payload[1], struct.unpack_from("!HH16s", payload, 4)
                    uid, inode = _MSG_UID_INODE.unpack_from(payload, 64)
                    # a dump filters by port only; an exact answer matched all four values
                    if inode and state != _TCP_LISTEN and (not dump or (sport == port and psrc == src)):
                        found = Socket(inode, uid)
                    if not dump:
                        return found


# -- the socket, step 1b: /proc/net/tcp* ---------------------------------------------------------

_PROC_NET = "/proc/net/tcp"
_LISTEN = b"0A"  # the st column of a listening socket


def proc_net_keys(local: IPAddress, port: int) -> list[tuple[str, bytes]]:
    """Where a socket bound to (local, port) is listed: (table, its local_address column).

    The kernel prints each 32-bit word of an address in host byte order. An IPv4 address is also
    searched in tcp6 in its IPv4-mapped form (a dual-stack client socket).
    """
    suffix = b":%04X" % port
    if isinstance(local, ipaddress.IPv4Address):
        return [(_PROC_NET, b"%08X" % struct.unpack("=I", local.packed)[0] + suffix),
                (_PROC_NET + "6", _hex6(_mapped(local)) + suffix)]  # fmt: skip
    return [(_PROC_NET + "6", _hex6(local) + suffix)]


def _hex6(addr: ipaddress.IPv6Address) -> bytes:
    return b"".join(b"%08X" % word for word in struct.unpack("=4I", addr.packed))


def find_socket(table: bytes, local: bytes) -> Socket | None:
    """The connected socket whose local_address is `local` in (the start of) a /proc/net/tcp* text.

    Listening sockets are skipped, and so are lines with inode 0 (TIME_WAIT, or a connection in
    a listener's accept queue): no process owns those. An unfinished last line is ignored.
    """
    needle = b": " + local + b" "
    at = table.find(needle)
    while at >= 0:
        end = table.find(b"\n", at)
        if end < 0:
            return None
        fields = table[at + 2 : end].split()
        if len(fields) > 8 and fields[2] != _LISTEN and fields[8] != b"0":
            return Socket(int(fields[8]), int(fields[6]))
        at = table.find(needle, end)
    return None


def scan_proc_net(local: IPAddress, port: int) -> Socket | None:
    """Read tcp (then tcp6) only as far as the client's line."""
    for path, key in proc_net_keys(local, port):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            data = b""
            while piece := os.read(fd, 1 << 16):
                data += piece
                if (found := find_socket(data, key)) is not None:
                    return found
        finally:
            os.close(fd)
    return None
