"""The request handlers, one module per driver concept (the client library's
folders carry the same names), and the table the session dispatches by:
message kind -> (message class, handler). tally/server/dispatch.py says what a
handler receives and returns."""
from __future__ import annotations

from tally.server.dispatch import Handler
from tally.server.handlers import (
    connection,
    contexts,
    copies,
    events,
    graphs,
    green_contexts,
    host_functions,
    host_memory,
    ipc,
    launch,
    linker,
    managed_memory,
    memory,
    modules,
    stream_attributes,
    stream_memory_ops,
    streams,
    sync,
    tensor_maps,
    textures,
    virtual_memory,
)

MODULES = (connection, memory, copies, host_memory, managed_memory, virtual_memory, ipc, streams, stream_attributes,
           events, host_functions, sync, modules, linker, launch, green_contexts, contexts, stream_memory_ops, tensor_maps,
           textures, graphs)


def _table() -> dict[int, tuple[type, Handler]]:
    table: dict[int, tuple[type, Handler]] = {}
    for module in MODULES:
        for message, fn in module.HANDLERS.items():
            if message.KIND in table:
                raise AssertionError(f"two handlers for {message.__name__}: {table[message.KIND][1]} and {fn}")
            table[message.KIND] = (message, fn)
    return table


HANDLERS: dict[int, tuple[type, Handler]] = _table()
