"""The one writer of a job's C++ data plane (tally._core.data_plane.ClientPlane).

A job's plane is told things by three parties: the job's Python state (the
kernels it resolved, its allocations, its streams' ordering rules, whether it is
quiet: tally/server/client/fast_path.py), the executor's fast lanes (the lane
rule its policy declares, grants and revocations: fast_lane.py) and the session
loop that runs it (tally/server/data_plane.py). Each of them holds this owner,
never the plane, so every change to the plane is one of the methods below, in
one place to read and to lock down (tests/test_plane_owner.py fails on a call
to the plane from anywhere else). Backends describe their kernels to the plane
through `add_function`/`add_emulator_function`, called from
`DataPlaneDevice.register_function` with this owner as the table.
"""
from __future__ import annotations

from typing import Any

from tally import _core


class PlaneOwner:
    def __init__(self, segment, issuer):
        self._plane = _core.data_plane.ClientPlane(segment, issuer)

    # ---- the job's state (fast_path.py) ---------------------------------------------
    def register_function(self, device, function_id: int, backend_function, param_bytes: int) -> bool:
        """The backend puts one of its kernels in the plane's function table (False: it cannot)."""
        return device.register_function(self, function_id, backend_function, param_bytes)

    def add_function(self, function_id: int, param_bytes: int, *handle) -> None:
        self._plane.add_function(function_id, param_bytes, *handle)

    def add_emulator_function(self, *args) -> None:
        self._plane.add_emulator_function(*args)

    def remove_function(self, function_id: int) -> None:
        self._plane.remove_function(function_id)       # and its whole shapes

    def add_graph(self, graph_id: int, native: int, kernels: int) -> None:
        self._plane.add_graph(graph_id, native, kernels)

    def remove_graph(self, graph_id: int) -> None:
        self._plane.remove_graph(graph_id)

    def add_whole_shape(self, function_id: int, grid, block, shared_bytes: int) -> None:
        self._plane.add_whole_shape(function_id, grid, block, shared_bytes)

    def add_allocation(self, ptr: int, nbytes: int) -> None:
        self._plane.add_allocation(ptr, nbytes)

    def remove_allocation(self, ptr: int) -> None:
        self._plane.remove_allocation(ptr)

    def clear_allocations(self) -> None:
        self._plane.clear_allocations()

    def stream_rules(self, key: int, exists: bool, allowed: bool) -> None:
        self._plane.stream_rules(key, exists, allowed)

    def take_legacy_touched(self) -> bool:
        return self._plane.take_legacy_touched()

    def set_quiet(self, quiet: bool) -> None:
        self._plane.set_quiet(quiet)

    def set_enabled(self, enabled: bool) -> None:
        self._plane.set_enabled(enabled)

    # ---- the executor's lanes (fast_lane.py) ---------------------------------------
    def set_lane_rule(self, gate, closes_gate: bool, through_gate: bool, one_at_a_time: bool,
                      max_batch: int, batch_budget_ns: int, timed_every: int) -> None:
        self._plane.set_lane_rule(gate, closes_gate, through_gate, one_at_a_time, max_batch, batch_budget_ns,
                                  timed_every)

    def set_whole_time(self, function_id: int, grid, block, shared_bytes: int, expected_ns: int) -> None:
        self._plane.set_whole_time(function_id, grid, block, shared_bytes, expected_ns)

    def batched(self) -> int:
        return self._plane.batched()

    def open_lane(self, key: int, stream_handle: int) -> None:
        self._plane.open_lane(key, stream_handle)

    def grant(self, key: int, granted: bool, sm_cap: int) -> None:
        self._plane.grant(key, granted, sm_cap)    # a revocation waits for an operation being issued

    def revoke_all(self) -> None:
        self._plane.revoke_all()

    def close_lane(self, key: int) -> None:
        self._plane.close_lane(key)

    def lane_quiet(self, key: int) -> bool:
        return self._plane.lane_quiet(key)

    def lane_counts(self, key: int) -> tuple[int, int, int, int]:
        return self._plane.lane_counts(key)

    # ---- the session loop (tally/server/data_plane.py) -------------------------------
    def serve(self, handle, poll_s: float) -> tuple[bool, str]:
        return self._plane.serve(handle, poll_s)

    def stop(self) -> None:
        self._plane.stop()

    def poke(self) -> None:
        self._plane.poke()

    def push_completion(self, kind: int, tag: int, payload: bytes) -> None:
        self._plane.push_completion(kind, tag, payload)

    def close_replies(self) -> None:
        self._plane.close_replies()

    def close(self) -> None:
        self._plane.close()

    def counts(self) -> Any:
        return self._plane.counts()

    # the loop's hold between two records (tally/server/request_hold.py's interface)
    @property
    def held(self) -> bool:
        return self._plane.held

    def hold(self, timeout: float) -> bool:
        return self._plane.hold(timeout)

    def release(self) -> None:
        self._plane.release()

    def enter(self) -> bool:
        return self._plane.enter()

    def leave(self) -> None:
        self._plane.leave()
