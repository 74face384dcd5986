"""python -m capsem.emulator [--host H] [--port N] [--tls-port N] [--ready-file PATH] [--defaults CONTROLS]

Runs in the foreground; prints one JSON line {"http_url", "https_url", "ca_path"} once listening
(and writes it to --ready-file); exits cleanly on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path

from capsem.emulator import Emulator
from capsem.emulator.reply import parse_controls


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m capsem.emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path, help="also write the ready JSON line here")
    parser.add_argument(
        "--defaults", default="", help='default controls, like the header: "encoding=gzip; chunk=5"'
    )
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    defaults = parse_controls(args.defaults, {})
    with Emulator(defaults=defaults, host=args.host, port=args.port, tls_port=args.tls_port) as emu:
        line = json.dumps({"http_url": emu.http_url, "https_url": emu.https_url, "ca_path": emu.ca_path})
        if args.ready_file:  # written whole (rename) before the line is printed
            tmp = args.ready_file.with_name(args.ready_file.name + ".tmp")
            tmp.write_text(line + "\n")
            tmp.replace(args.ready_file)
        print(line, flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
