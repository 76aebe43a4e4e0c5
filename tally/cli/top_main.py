"""tally-server top: a live view of a running server, as nvidia-smi or nvtop show a
GPU: its jobs, priorities, SM shares, memory, health and last transitions,
refreshed every --interval seconds from the same status request as `tally-server
status`. q (or Ctrl-C) quits. When the server stops answering the view says so,
keeps the last state it saw, and picks the server up again when one answers.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import termios
import time
import tty

from rich.console import Console
from rich.live import Live

from tally import paths
from tally.cli.top_view import render


def top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tally-server top",
                                description="A live view of a running tally-server's jobs and health (q quits).")
    p.add_argument("--socket", help="the server's socket (default $TALLY_SERVER or the default path)")
    p.add_argument("--interval", type=_interval, default=1.0, metavar="SECONDS",
                   help="seconds between refreshes (default 1)")
    return p


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a refresh interval in seconds (0.05 to 3600)")
    return value


def top_main(argv: list[str], query_status) -> int:
    """`query_status(socket_path)`: the status record as JSON (tally-server status's request)."""
    args = top_parser().parse_args(argv)
    socket_path = paths.server_socket(args.socket)
    status, error, lost_at = None, None, None
    console = Console()
    with _keys() as key_pressed, Live(console=console, screen=True, auto_refresh=False) as live:
        try:
            while True:
                try:
                    status, error, lost_at = query_status(socket_path), None, None
                except (OSError, ConnectionError) as e:
                    error = str(e) or type(e).__name__
                    lost_at = lost_at or time.time()
                live.update(render(status, str(socket_path), error, lost_at), refresh=True)
                if key_pressed(args.interval) in ("q", "Q", None):
                    return 0
        except KeyboardInterrupt:
            return 0


@contextlib.contextmanager
def _keys():
    """A function that waits up to `timeout` s for a key and returns it ("" if none,
    None once stdin is closed), with the terminal in cbreak mode (keys arrive
    unbuffered, unechoed) meanwhile. Without a terminal on stdin it only waits."""
    fd = sys.stdin.fileno() if sys.stdin is not None else -1
    if fd < 0 or not os.isatty(fd):
        yield lambda timeout: time.sleep(timeout) or ""
        return
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def key_pressed(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return ""
        data = os.read(fd, 32)
        return data.decode(errors="replace")[:1] if data else None

    try:
        yield key_pressed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
