"""``python -m dashboards.serve``: optuna-dashboard on the sweep's database.

Before serving, every study with a measured trial gets the Pareto chart and a study note
attached (``dashboards.attach``); while serving, they are refreshed every ``--refresh`` seconds
so a running sweep's chart keeps up. The dashboard only reads trials; the attach writes only
study system attrs, and SQLite's WAL mode and busy timeout (``sweep.store``) let both share
the file with a running sweep. Binds 127.0.0.1 unless ``--host`` says otherwise.

Exit codes: 0 stopped (Ctrl-C or SIGTERM); 2 bad input (no database, port taken).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from optuna_dashboard import wsgi
from sqlalchemy.exc import SQLAlchemyError

from cli import command
from dashboards.attach import attach_all
from sweep.interrupts import raise_interrupt
from sweep.store import DEFAULT_STORAGE_URL, Storage, open_existing, shown_url

__all__ = ["ServeArgs", "main", "parse_args"]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # the page's parallel API polls do not queue behind each other


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass  # one line per poll would bury everything else


@dataclass(frozen=True, kw_only=True)
class ServeArgs:
    storage: str
    host: str
    port: int
    refresh_s: float
    attach: bool


def parse_args(argv: list[str] | None = None) -> ServeArgs:
    parser = argparse.ArgumentParser(prog="python -m dashboards.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    parser.add_argument(
        "--refresh",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="re-attach the charts this often; 0: only at start (default 60)",
    )
    parser.add_argument("--no-attach", action="store_true", help="serve only; write nothing into the database")
    ns = parser.parse_args(argv)
    if not 0 <= ns.port <= 65535:
        parser.error(f"--port must be 0..65535, got {ns.port}")
    if ns.refresh < 0:
        parser.error(f"--refresh must be >= 0, got {ns.refresh}")
    return ServeArgs(storage=ns.storage, host=ns.host, port=ns.port, refresh_s=ns.refresh, attach=not ns.no_attach)


def _refresh_loop(storage: Storage, *, every_s: float, stop: threading.Event) -> None:
    while not stop.wait(every_s):
        try:
            attach_all(storage)
        except SQLAlchemyError as exc:  # say so and try again next time; serving goes on
            print(f"warning: refreshing the attached charts failed: {exc}", file=sys.stderr, flush=True)


@command(parse_args)
def main(args: ServeArgs) -> int:
    storage = open_existing(args.storage)
    stop = threading.Event()
    try:
        if args.attach:
            attached = attach_all(storage)
            print(f"attached the Pareto chart and note to: {', '.join(attached) or 'no study yet'}", flush=True)
        try:
            server = make_server(
                args.host, args.port, wsgi(storage.optuna), server_class=_ThreadingServer, handler_class=_QuietHandler
            )
        except OSError as exc:
            print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return 2
        if args.attach and args.refresh_s > 0:
            threading.Thread(
                target=_refresh_loop,
                args=(storage,),
                kwargs={"every_s": args.refresh_s, "stop": stop},
                daemon=True,
                name="attach-refresh",
            ).start()
        signal.signal(signal.SIGTERM, raise_interrupt)
        print(
            f"optuna-dashboard on {shown_url(args.storage)}: http://{args.host}:{server.server_port}/dashboard/",
            flush=True,
        )
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return 0
    finally:
        stop.set()
        storage.close()


if __name__ == "__main__":
    sys.exit(main())
