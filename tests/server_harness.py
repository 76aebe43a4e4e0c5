"""Start a real tally-server process for a test and speak its protocol from Python."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tally.bench.wire_client import PyClient  # noqa: F401  (the tests' client, in the package for tally-bench fuzz)


class ServerProcess:
    def __init__(self, socket_path: Path, backend: str = "null", extra_args: tuple[str, ...] = (),
                 command: list[str] | None = None, env: dict | None = None):
        """`command`: start this instead of tally-server (it must listen on socket_path)."""
        self.socket_path = Path(socket_path)
        self.log_path = self.socket_path.with_suffix(".log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            command or [sys.executable, "-m", "tally.cli.server_main", "--backend", backend,
                        "--socket", str(self.socket_path), *extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 30
        while not self.socket_path.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"tally-server exited early:\n{self.log()}")
            if time.time() > deadline:
                raise RuntimeError(f"tally-server did not start:\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
