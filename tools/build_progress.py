"""Progress of the C++ build where the person installing can see it.

pip hides a build backend's output unless asked (`pip install -v`), so a
build of a minute or more shows only "Building wheel ... still running", which
people read as a hang. The full CMake output still goes to stdout (pip keeps it
for `-v` and prints it when the build fails); in addition a short line goes to
the terminal (/dev/tty, which pip does not capture) at most every few seconds.
Without a terminal (CI, a pipe) only stdout gets the output.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time

PERCENT = re.compile(r"^\[\s*(\d+)%\]\s+(.*)$")
EVERY_S = 8.0


class BuildProgress:
    def __init__(self, jobs: str):
        self.jobs = jobs
        try:
            self._tty = open("/dev/tty", "w")
        except OSError:
            self._tty = None

    def say(self, text: str) -> None:
        line = f"tally: {text}"
        print(line, flush=True)
        if self._tty is not None:
            try:
                self._tty.write("\n" + line)
                self._tty.flush()
            except OSError:
                self._tty = None

    def run(self, argv: list[str], cwd) -> None:
        """Run the build, streaming its output; raises CalledProcessError on failure."""
        process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        last = time.monotonic()
        for line in process.stdout:
            sys.stdout.write(line)
            m = PERCENT.match(line.strip())
            if m and time.monotonic() - last >= EVERY_S:
                last = time.monotonic()
                self.say(f"C++ build {m.group(1)}%: {_short(m.group(2))}")
        if process.wait() != 0:
            self.say("C++ build FAILED; rerun with `pip install -v .` to see the compiler's messages")
            raise subprocess.CalledProcessError(process.returncode, argv)


def _short(step: str) -> str:
    """'Building CXX object csrc/CMakeFiles/_core.dir/src/emulator/exec.cpp.o' -> 'compiling exec.cpp'."""
    m = re.search(r"Building CXX object .*/([^/]+)\.o$", step)
    if m:
        return f"compiling {m.group(1)}"
    m = re.search(r"Linking CXX \w+ (?:library|module|executable) (.*)$", step)
    return f"linking {m.group(1).rsplit('/', 1)[-1]}" if m else step
