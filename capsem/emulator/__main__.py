"""python -m capsem.emulator [--port N] [--tls-port N] [--ready-file PATH]: run in the foreground."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path

from capsem.emulator import Emulator


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m capsem.emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with Emulator(host=args.host, port=args.port, tls_port=args.tls_port) as emu:
        line = json.dumps({"http_url": emu.http_url, "https_url": emu.https_url, "ca_path": emu.ca_path})
        print(line, flush=True)
        if args.ready_file:
            args.ready_file.write_text(line + "\n")
        stop.wait()


if __name__ == "__main__":
    main()
