"""What a job's C++ data plane must know of the job's Python state to take its
requests without Python (docs/data-plane.md), kept current by the state's
owners: the kernels it resolved and launched (modules), its allocations
(memory), which of its stream ids exist and whether CUDA's default-stream rules
let the next operation on one go straight to the device (streams), and whether
Python has anything of the job pending (sync).

The C++ side only ever uses this to decide that a request needs nothing Python
would do beyond what C++ does itself; whatever it does not know, it hands to
Python. So a missing entry costs speed, never correctness: only a stale one
could do harm, which is why every change reaches it before the request that
could depend on it is handled.
"""
from __future__ import annotations

import threading

from tally.protocol import Priority
from tally.server.job import Job


class FastPath:
    def __init__(self, owner, device, job: Job):
        self._owner = owner                    # the plane's one writer (tally/scheduler/plane_owner.py)
        self._device = device                  # the backend's DataPlaneDevice (None: nothing to issue)
        self._job = job
        self._lock = threading.Lock()
        self._functions: set[int] = set()      # function ids in the plane's table
        # A best-effort job (whose kernels the policy holds back): the launch shapes the
        # planner runs whole, in the plane's table too.
        self._best_effort = job.priority == Priority.BEST_EFFORT
        self._whole_shapes: set[tuple] = set()
        self._whole_times: dict[tuple, int] = {}   # shape -> expected ns the plane was told
        # Graphs in the plane's table, by the client's id: the ReplayGraph each was
        # registered as (held, so its backend executable lives while the plane may
        # launch it) and that executable's native handle.
        self._graphs: dict[int, tuple[object, int]] = {}

    # ---- kernels -------------------------------------------------------------------

    def learn_launch(self, fn, launch) -> None:
        """A kernel the job launched through Python (a LoadedFunction and its
        ops.Launch): its later launches may go straight to the device; a
        best-effort job's, once the planner runs this launch shape whole."""
        if self._device is None:
            return
        if fn.function_id not in self._functions:
            with self._lock:
                if self._owner.register_function(self._device, fn.function_id, fn.backend_function,
                                                 fn.param_bytes):
                    self._functions.add(fn.function_id)
        if not self._best_effort:
            return
        shape = (fn.function_id, launch.grid, launch.block, launch.shared_bytes)
        executor = self._job.services.executor
        if shape not in self._whole_shapes:
            if not executor.runs_whole(self._job.client_id, launch):
                return
            with self._lock:
                self._whole_shapes.add(shape)
                self._owner.add_whole_shape(*shape)
        # Its expected device time, once launches Python timed told it (the plane's own
        # are not timed; it sends the shape's kernels here now and then to be timed):
        # the plane batches the shape's kernels by it. Told here, at a later launch of
        # the shape through Python, so the plane's time lags one sample.
        expected = executor.whole_expected(self._job.client_id, launch)
        if expected is not None:
            expected_ns = max(1, round(expected * 1e9))
            if self._whole_times.get(shape) != expected_ns:
                with self._lock:
                    self._whole_times[shape] = expected_ns
                    self._owner.set_whole_time(*shape, expected_ns)

    # ---- graphs --------------------------------------------------------------------

    def learn_graph(self, graph_id: int, replay) -> None:
        """A graph replay Python submitted (an ops.ReplayGraph): a high-priority job's
        later replays of it may go to the device as one graph launch without Python,
        where the backend's issuer launches graphs (and the server runs replays as
        units: not under --graph-replay nodes). Best-effort jobs' replays stay the
        policy's (whole or node by node)."""
        executor = self._job.services.executor
        if self._device is None or self._best_effort or not executor.graph_units:
            return
        # (the executable is made again after a device fault: a replay that reached
        # Python because the plane's one failed registers the new one)
        native = self._device.graph_handle(executor.graphs.executable(replay))
        known = self._graphs.get(graph_id)
        if native is None or (known is not None and known[0] is replay and known[1] == native):
            return
        with self._lock:
            self._graphs[graph_id] = (replay, native)
            self._owner.add_graph(graph_id, native, replay.kernel_count)

    def forget_graph(self, graph_id: int) -> None:
        """The job's graph changed or is gone: its next replay goes through Python."""
        with self._lock:
            if self._graphs.pop(graph_id, None) is not None:
                self._owner.remove_graph(graph_id)

    def _forget_graphs(self) -> None:   # under _lock
        for graph_id in self._graphs:
            self._owner.remove_graph(graph_id)
        self._graphs.clear()

    def forget_functions(self, function_ids) -> None:
        """The ids no longer name kernels (their module was unloaded); graphs made of
        the job's kernels are learned again from their next replay."""
        function_ids = set(function_ids)
        with self._lock:
            self._forget_graphs()
            for function_id in function_ids:
                if function_id in self._functions:
                    self._functions.discard(function_id)
                    self._owner.remove_function(function_id)     # and its whole shapes
            self._whole_shapes = {s for s in self._whole_shapes if s[0] not in function_ids}
            self._whole_times = {s: t for s, t in self._whole_times.items() if s[0] not in function_ids}

    # ---- memory ---------------------------------------------------------------------

    def allocation_added(self, ptr: int, nbytes: int) -> None:
        self._owner.add_allocation(ptr, nbytes)

    def allocation_removed(self, ptr: int) -> None:
        self._owner.remove_allocation(ptr)

    def allocations_cleared(self) -> None:
        self._owner.clear_allocations()

    # ---- streams ----------------------------------------------------------------------

    def stream_rules(self, key: int, exists: bool, allowed: bool) -> None:
        """Whether the job's stream id `key` names a stream, and whether its next
        operation needs no ordering fence first (server/client/streams.py)."""
        self._owner.stream_rules(key, exists, allowed)

    def take_legacy_touched(self) -> bool:
        """Whether C++ issued work on the legacy stream since the last call."""
        return self._owner.take_legacy_touched()

    # ---- synchronization ---------------------------------------------------------------

    def note_idle(self) -> None:
        """Python just answered a synchronization of all the job's streams with
        Done. If nothing of the job is still pending in Python, the next
        synchronization may be answered in C++ (once the device is quiet), until
        Python handles another request of the job."""
        job = self._job
        if job.deferred_error is None and job.client.blocking.idle():
            self._owner.set_quiet(True)

    def not_idle(self) -> None:
        self._owner.set_quiet(False)

    def disable(self) -> None:
        """The job's context is unusable: every request goes to Python (which fails it)."""
        self._owner.set_enabled(False)
