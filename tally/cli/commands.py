"""argv for the processes tally starts itself (servers, tally-run, job scripts).

They must run the *installed* tally whatever the working directory. `python -m
tally.cli.server_main` started from a clone's root imports the source tree there
(which has no built `_core`) instead of the installed package, because `-m` puts
the working directory first on sys.path. So: the console script installed next to
this interpreter when there is one (its sys.path starts at its own bin/), else the
interpreter told not to put the working directory on sys.path.
"""
from __future__ import annotations

import sys
from pathlib import Path

TOOL_MODULES = {
    "tally-server": "tally.cli.server_main",
    "tally-run": "tally.cli.run_main",
    "tally-bench": "tally.cli.bench_main",
}

# `python -c` keeps the working directory out of sys.path on every supported
# Python (3.11's -P does the same, 3.10 has no flag for it).
_RUN_MODULE = ("import runpy, sys\n"
               "if sys.path and sys.path[0] in ('', '.'): del sys.path[0]\n"
               "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def python_module(module: str, *interpreter_flags: str) -> list[str]:
    """argv that runs `python -m module` without importing from the working directory."""
    return [sys.executable, *interpreter_flags, "-c", _RUN_MODULE, module]


def python_code(code: str) -> list[str]:
    """argv that runs `python -c code` without importing from the working directory."""
    return [sys.executable, "-c", "import sys\nif sys.path and sys.path[0] in ('', '.'): del sys.path[0]\n" + code]


def tool(name: str) -> list[str]:
    """argv that starts a tally console script (tally-server, tally-run, ...)."""
    script = Path(sys.executable).parent / name
    if script.is_file():
        return [str(script)]
    return python_module(TOOL_MODULES[name])
