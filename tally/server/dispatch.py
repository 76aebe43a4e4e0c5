"""Request handlers, registered by message name.

A handler is a plain function `handler(session, fields, tail, tag)`, where
`fields` is the decoded fixed part of the message (a dict), `tail` its variable
bytes (memoryview) and `tag` the request's tag. It answers by calling
`session.reply(...)` (synchronous calls) or returns without replying
(asynchronous calls). It signals failure by raising DeviceError (the job sees
that CUresult) or ProtocolError (the message itself was bad).

Handlers live in modules beside their concept (tally/server/handlers_*.py and
tally/server/driver/*.py) and register with the decorator:

    @handler("MemAlloc")
    def mem_alloc(session, fields, tail, tag): ...

`load_handlers()` imports every handler module once; the registry is a plain
dict (no reflection beyond the decorator).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tally import protocol

Handler = Callable[["object", dict, memoryview, int], None]

HANDLERS: dict[int, tuple[protocol.Codec, Handler]] = {}


def handler(message_name: str) -> Callable[[Handler], Handler]:
    codec = protocol.codec(message_name)

    def register(fn: Handler) -> Handler:
        if codec.kind in HANDLERS:
            raise AssertionError(f"two handlers for {message_name}")
        HANDLERS[codec.kind] = (codec, fn)
        return fn

    return register


_HANDLER_PACKAGES = ("tally.server.handlers",)
_loaded = False


def load_handlers() -> None:
    """Import every module of the handler packages (idempotent)."""
    global _loaded
    if _loaded:
        return
    for package_name in _HANDLER_PACKAGES:
        try:
            package = importlib.import_module(package_name)
        except ModuleNotFoundError as e:
            if e.name == package_name:
                continue
            raise
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package_name}.{info.name}")
    _loaded = True
