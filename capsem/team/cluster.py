"""A throw-away PostgreSQL cluster on loopback: `initdb` + `pg_ctl` in a folder of its own, on a
free port, trusted local connections only. The team tests and benchmarks start one, and
`capsem team local-server` starts one for a user to try the team features on one machine.

Debian's server package puts its binaries in `/usr/lib/postgresql/<major>/bin` (off PATH); other
systems have them on PATH. PostgreSQL refuses to run as root: as root the cluster runs as the
`postgres` user (which Debian's package creates), else `nobody`, its folder owned by that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def binaries() -> Path | None:
    """The folder of `initdb` and `pg_ctl` (the newest Debian major first, then PATH), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path and shutil.which("pg_ctl") else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_as() -> pwd.struct_passwd | None:
    """The user the cluster runs as when we are root (None: ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("PostgreSQL refuses to run as root, and there is no postgres or nobody user")


@dataclass
class Cluster:
    """A running throw-away cluster: `url` reaches its `postgres` database as superuser `capsem`."""

    folder: Path
    port: int
    bin_dir: Path
    user: pwd.struct_passwd | None

    @property
    def url(self) -> str:
        return f"postgresql://capsem@127.0.0.1:{self.port}/postgres"

    def _pg(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run one of PostgreSQL's programs (as the cluster's user). Raises RuntimeError with its output."""
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.user is not None:
            command = ["runuser", "-u", self.user.pw_name, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd="/")
        if check and done.returncode:
            raise RuntimeError(
                f"{args[0]} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}"
            )
        return done

    def start(self) -> None:
        """Start (or restart after `stop`) and wait until it accepts connections."""
        self._pg("pg_ctl", "-D", str(self.folder / "data"), "-l", str(self.folder / "server.log"),
                 "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                 "-c synchronous_commit=off -c full_page_writes=off", "-w", "-t", "30", "start")  # fmt: skip

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_cluster(folder: Path | None = None, port: int | None = None) -> Cluster:
    """initdb a new cluster in `folder` (a new temporary folder by default, and always as root) and
    start it.

    Raises:
        RuntimeError: no PostgreSQL server binaries on this machine, or initdb or pg_ctl failed
            (its output says why).
    """
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
                           "apt-get install postgresql (Debian, Ubuntu), or your system's package")  # fmt: skip
    user = run_as()
    if user is not None:  # root's folders (0700) are closed to that user: a temporary folder of its own
        folder = None
    folder = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="capsem-pg-"))
    folder.mkdir(parents=True, exist_ok=True)
    if user is not None:
        os.chown(folder, user.pw_uid, user.pw_gid)
    os.chmod(folder, 0o700)
    cluster = Cluster(folder, port or free_port(), bin_dir, user)
    cluster._pg("initdb", "-D", str(folder / "data"), "-U", "capsem", "--auth=trust", "-E", "UTF8",
                "--locale=C", "--no-sync")  # fmt: skip
    cluster.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # pg_ctl -w waited; the TCP socket is up with it, normally
        try:
            socket.create_connection(("127.0.0.1", cluster.port), 1).close()
            break
        except OSError:
            time.sleep(0.05)
    return cluster
