"""The driver API, executed for a client: the server side of client_preload.

Each module handles one concept (memory, copies, modules, launches, streams,
events, pinned host memory, host functions) and registers its handlers with
tally.server.dispatch; `state.driver_state(session)` holds what a session has
created. Every stream-ordered operation goes through the stream executor
(`session.server.executor`), never straight to the backend; allocation, module
loading and function lookup go to `session.backend`.
"""
