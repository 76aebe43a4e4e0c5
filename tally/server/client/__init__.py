"""What one job has created through the driver API, and the checks every handler
needs: its allocations and quota (memory.py), streams and CUDA's default-stream
rules (streams.py), events (events.py; their times across a migration:
event_clock.py), modules and functions (modules.py, with code_choice.py and
function_attributes.py), pinned host memory (host_memory.py), managed memory's
objects (managed_objects.py), virtual memory (virtual_memory.py), other jobs'
allocations it opened (ipc.py),
link states (linker.py), host functions (host_functions.py), the pool that answers
requests that wait (blocking.py), and waiting for its streams (sync.py).

`state.ClientState` gathers them; each Session makes one. Every stream-ordered
operation goes through the stream executor (`ClientState.executor`), never
straight to the backend; allocation, module loading and function lookup go to
the backend.
"""
