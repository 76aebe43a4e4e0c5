"""tally-server set / pause / suspend / resume / evict / migrate: change a running job from the command line.

    tally-server set --client ID [--sm-percent P] [--memory-quota SIZE|PCT%] [--socket PATH]
    tally-server pause --client ID [--force] [--socket PATH]
    tally-server suspend --client ID [--force] [--socket PATH]
    tally-server resume --client ID [--socket PATH]
    tally-server evict --client ID --reason TEXT [--force] [--socket PATH]
    tally-server migrate --client ID --to SOCKET [--socket PATH]

`tally-server status` lists the client ids. Each command sends one request on
the server's socket and prints the server's answer: what changed, or why
nothing did. Exit status: 0 done (or nothing needed doing), 1 no server
answers, 2 refused (bad input, unknown client; a migration that did not happen:
the job runs on where it was). What the server does with each
is in tally/server/control.py.
"""
from __future__ import annotations

import argparse
import math
import socket
import sys
from pathlib import Path

from tally import paths
from tally.protocol.framing import recv_record, send_record
from tally.protocol.messages_generated import (ClientEvict, ClientMigrate, ClientPause, ClientResume, ClientSet,
                                               ClientSuspend, ControlReply)
from tally.units import SizeError, parse_size

DESCRIPTIONS = {
    "set": "Change a running job's SM share and/or memory quota (future allocations; never below what it "
           "holds).",
    "pause": "Hold a running job's work: nothing of it starts, nothing is lost, and its synchronizing calls "
             "wait until `tally-server resume`.",
    "suspend": "Hold a running job's work, save its device memory to host memory and free it on the device "
               "(the job waits; `tally-server resume` brings it back at the same addresses).",
    "resume": "Let a paused job's work go on where it stopped, or bring a suspended job's memory back and "
              "let its work go on.",
    "migrate": "Move a running job to another tally-server on this node (its device state is restored at the same "
               "addresses there); if anything fails the job runs on here, and the reason is printed.",
    "evict": "Take the device from a running job: its queued work is dropped, its memory freed, its next driver "
             "call fails, and tally-run exits 75 (EX_TEMPFAIL) printing the reason, so an orchestrator runs it "
             "again.",
}


def client_id(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a client id (a whole number from `tally-server status`)")
    return int(text)


def sm_percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 100):
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage in (0, 100]")
    return value


def memory_quota(text: str) -> int | float:
    try:
        return parse_size(text, "memory quota", allow_percent=True)
    except SizeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"tally-server {command}", description=DESCRIPTIONS[command])
    p.add_argument("--client", type=client_id, required=True, metavar="ID",
                   help="the job's client id, as `tally-server status` shows it")
    if command == "set":
        p.add_argument("--sm-percent", type=sm_percent, metavar="P", help="the job's SM share, in (0, 100]")
        p.add_argument("--memory-quota", type=memory_quota, metavar="SIZE|PCT%",
                       help="device memory the job may hold: a size with a unit (8G, 512M) or a percentage of "
                            "device memory (25%%)")
    if command in ("pause", "suspend"):
        p.add_argument("--force", action="store_true", help=f"{command} a high-priority job too")
    if command == "migrate":
        p.add_argument("--to", required=True, metavar="SOCKET", help="the socket of the tally-server to move it to")
    if command == "evict":
        p.add_argument("--reason", required=True, metavar="TEXT",
                       help="why: the job prints it (tally-run: evicted by tally-server: TEXT)")
        p.add_argument("--force", action="store_true", help="evict a high-priority job too")
    p.add_argument("--socket", help="the server's socket (default $TALLY_SERVER or the default path)")
    return p


def request(command: str, args) -> bytes:
    if command == "set":
        quota = args.memory_quota
        return ClientSet(client_id=args.client, sm_percent=args.sm_percent or 0.0,
                         memory_quota=quota if isinstance(quota, int) else 0,
                         memory_quota_percent=quota if isinstance(quota, float) else 0.0).encode()
    if command == "pause":
        return ClientPause(client_id=args.client, force=int(args.force)).encode()
    if command == "suspend":
        return ClientSuspend(client_id=args.client, force=int(args.force)).encode()
    if command == "migrate":
        return ClientMigrate(client_id=args.client, tail=str(Path(args.to).absolute()).encode()).encode()
    if command == "evict":
        return ClientEvict(client_id=args.client, force=int(args.force), tail=args.reason.encode()).encode()
    return ClientResume(client_id=args.client).encode()


KINDS = {"set": ClientSet.KIND, "pause": ClientPause.KIND, "suspend": ClientSuspend.KIND, "resume": ClientResume.KIND,
         "migrate": ClientMigrate.KIND, "evict": ClientEvict.KIND}


def send(socket_path, kind: int, payload: bytes, timeout: float = 120.0) -> ControlReply:
    """One control request and the server's reply; OSError/ConnectionError when none answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(socket_path))
        send_record(sock, kind, payload, tag=1)
        reply_kind, _tag, reply = recv_record(sock)
        if reply_kind != ControlReply.KIND:
            raise ConnectionError(f"unexpected reply kind {reply_kind}")
        return ControlReply.decode(reply)
    finally:
        sock.close()


def control_main(command: str, argv: list[str]) -> int:
    p = parser(command)
    args = p.parse_args(argv)
    if command == "set" and args.sm_percent is None and args.memory_quota is None:
        p.error("nothing to set: give --sm-percent and/or --memory-quota")
    if command == "evict" and not args.reason.strip():
        p.error("--reason is empty: the evicted job prints it, so whoever reruns it knows why")
    socket_path = paths.server_socket(args.socket)
    try:
        reply = send(socket_path, KINDS[command], request(command, args))
    except (OSError, ConnectionError) as e:
        print(f"tally-server {command}: no tally-server answers on {socket_path} ({e}). "
              f"Start one with: tally-server --socket {socket_path}", file=sys.stderr)
        return 1
    message = bytes(reply.tail).decode(errors="replace")
    if not reply.ok:
        print(f"tally-server {command}: {message}", file=sys.stderr)
        return 2
    print(message, flush=True)
    return 0
