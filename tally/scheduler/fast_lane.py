"""Fast lanes: the executor's side of the C++ data plane (docs/data-plane.md).

A job's C++ data plane (tally/server/data_plane.py, csrc/src/data_plane/) may
issue a stream's launches, memsets and copies to the device itself, without
Python, but only while the executor has granted it that stream's lane. The
executor grants a lane exactly when it would itself issue the stream's next
operation at once: the stream's queue is empty, its client's kernels start the
moment they reach the head of the queue (`policy.starts_at_once`), and no
preemptible unit is on the device (whose preemption a new high-priority kernel
would have to trigger), unless the lane's plane triggers it itself: a
high-priority job's plane sets the flag of every PTB launch pinned on the
gate's board before it issues a kernel (device_units.py pins them;
docs/data-plane.md, "Preemption from the plane"). Everything else, and so every
decision to release best-effort work, stays with the executor and its policy.

What the executor still needs to know of a lane's work:
- whether it may still be running, so the policy sees the high-priority job as
  busy (`running`: one RunningUnit per busy lane) and holds best-effort work back
  exactly as for its own units. A lane whose work is not known to be complete is
  watched: an event recorded on its stream and a host callback on its notify
  stream (the device layer's) tell the executor when the work issued so far has
  completed, and the policy hears of it as of any unit's end;
- that it must not grow behind the policy's back while a preemptible unit runs:
  the executor revokes every lane but the high-priority ones that preempt it
  before it starts one (`revoke_all`; a revocation waits for an operation the
  data plane is issuing at that moment), and if a lane issued work since the
  policy last looked, the unit waits and the policy looks again (seeing the
  high-priority job busy, it holds the unit back). The unit is pinned before
  that look, so a high-priority kernel issued after it stops the unit;
- its counters, for `tally-server status`.

Best-effort release (a job whose kernels the policy holds back, e.g. while a
high-priority job is busy): such a job's lane is granted only when the policy
says it would start one of its kernels now (`releases_at_once`), and only one
such job holds lanes at a time. Its C++ plane then issues a kernel only while
the server's best-effort gate is open (every high-priority kernel closes it, in
C++ or here), only a launch shape the planner settled on running whole (the
transformed ones need the executor), and only once the job's streams are quiet
(one unit at a time, as the policy starts them) or, under a rule with
`max_batch` over 1, into the plane's own batch of kernels of known device times
within the batch budget (docs/data-plane.md, "Best-effort release"). Otherwise
the launch goes to Python, whose policy decides as always; the next grant opens
the gate again.

Synchronization needs nothing from here: a lane's operations go to the
executor's own backend stream, so the executor's stream synchronization and
queries cover them. Every method is called with the executor's lock held.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from tally import _core
from tally.scheduler.policy import LaneRule, RunningUnit, SchedulingPolicy
from tally.scheduler.run_mode import WHOLE
from tally.scheduler.sm_activity import SmActivity

# (policy, now) -> None, run by the executor under its lock before it schedules again
LaneChange = Callable[[SchedulingPolicy, float], None]


@dataclass(eq=False)
class _Attached:
    owner: Any                          # the job's plane's one writer (plane_owner.PlaneOwner)
    stream_handle: Callable[[Any], int]     # backend stream -> the handle the plane issues to
    completes_at_issue: bool            # the null device: nothing to watch
    carries_sm_cap: bool                # the issuer confines a launch to an SM cap (else: no capped lane)
    needs_gate: bool = False            # a best-effort job: its kernels go through the gate
    closes_gate: bool = False           # a high-priority job: its kernels close the gate and preempt
    batches: bool = False               # its plane makes best-effort batches (LaneRule.max_batch > 1)


@dataclass(eq=False)
class _Lane:
    stream: Any                         # the executor's StreamState
    attached: _Attached
    view: RunningUnit
    granted: bool = False
    sm_cap: int | None = None           # what its launches carry (the job's share, its green context)
    seen: int = 0                       # operations issued when the executor last looked
    drained: int = 0                    # operations known to have completed
    launches_done: int = 0              # kernels among them
    watched: int | None = None          # issued count a pending watch covers
    busy: bool = False                  # the policy was told the lane's work is running
    closed: bool = False


class FastLanes:
    def __init__(self, backend, clock, on_change: Callable[[LaneChange], None], activity: SmActivity,
                 sm_count: int):
        self._backend = backend
        self._clock = clock
        self._on_change = on_change     # the executor: run it under the lock, then schedule
        self._activity = activity       # the executor's SM account: busy lanes count in it
        self._sm_count = sm_count
        self._attached: dict[Hashable, _Attached] = {}
        self._lanes: dict[Any, _Lane] = {}      # StreamState -> lane
        self._unit_ids = itertools.count(-1, -1)    # never an id of the device layer's units
        self.gate = _core.data_plane.BestEffortGate()
        self._best_effort_holder: Hashable | None = None   # the job whose best-effort lanes are granted
        # PTB flags pinned for the planes to set (flag address -> the control stream), kept
        # here too: pinned on the gate once a plane says what the stream's handle is
        self._pinned: dict[int, Any] = {}
        self._stream_handle: Callable[[Any], int] | None = None
        # What closed lanes issued (kernels, operations, graph replays): the server's
        # counters keep it after the plane resets the lane.
        self._closed = {"kernels": 0, "ops_submitted": 0, "graph_launches": 0, "kernels_batched": 0}

    def attach(self, client_id: Hashable, owner, device) -> None:
        """The client's requests go through a C++ plane that may be given lanes;
        `device`: the backend's DataPlaneDevice."""
        issuer = device.issuer
        self._attached[client_id] = _Attached(owner, device.stream_handle, issuer.completes_at_issue,
                                              issuer.carries_sm_cap)
        if self._stream_handle is None:
            self._stream_handle = device.stream_handle
            for flag, control in list(self._pinned.items()):    # pinned before any plane came
                self.gate.pin_preemptible(flag, self._stream_handle(control))

    def attached(self, client_id: Hashable) -> bool:
        return client_id in self._attached

    def carries_sm_cap(self, client_id: Hashable) -> bool:
        attached = self._attached.get(client_id)
        return attached is not None and attached.carries_sm_cap

    def set_rule(self, client_id: Hashable, rule: LaneRule, batch_budget_s: float, timed_every: int) -> None:
        """The policy's rule for the client's kernels (policy.LaneRule), handed to its
        plane as it is: whether they close the best-effort gate, go only through it,
        one at a time or in batches; with the executor's batch budget and how often
        the plane sends a launch shape's kernel to Python to be timed
        (whole_durations.py: the plane's own launches are not timed)."""
        attached = self._attached[client_id]
        attached.needs_gate = rule.through_gate
        attached.closes_gate = rule.closes_best_effort_gate
        attached.batches = rule.through_gate and rule.one_unit_at_a_time and rule.max_batch > 1
        attached.owner.set_lane_rule(self.gate, rule.closes_best_effort_gate, rule.through_gate,
                                     rule.one_unit_at_a_time, rule.max_batch, round(batch_budget_s * 1e9),
                                     timed_every)

    def batches(self, client_id: Hashable) -> bool:
        """Whether the client's plane makes best-effort batches of its own, untimed."""
        attached = self._attached.get(client_id)
        return attached is not None and attached.batches

    def detach(self, client_id: Hashable) -> None:
        """The client is going: no lane of it issues anything from now on."""
        attached = self._attached.pop(client_id, None)
        if attached is not None:
            attached.owner.revoke_all()
            self._closed["kernels_batched"] += attached.owner.batched()
            for lane in self._lanes.values():
                if lane.attached is attached:
                    lane.granted = False
        if self._best_effort_holder == client_id:
            self._best_effort_holder = None

    def offer(self, stream, eligible: bool, sm_cap: int | None = None) -> None:
        """After a submission to `stream`: grant its lane if `eligible` (the
        executor would issue the stream's next operation at once), its launches
        confined to `sm_cap` SMs; else revoke it."""
        lane = self._lanes.get(stream)
        if lane is None:
            attached = self._attached.get(stream.client.client_id)
            if attached is None:
                return
            # Opened even when not granted: a best-effort plane looks at every stream
            # of its job before it issues a kernel (one unit at a time).
            attached.owner.open_lane(stream.key, attached.stream_handle(stream.backend_stream))
            client = stream.client
            lane = _Lane(stream, attached, RunningUnit(next(self._unit_ids), 0, client.client_id, stream.key,
                                                       client.priority, WHOLE, False, self._clock.now()))
            self._lanes[stream] = lane
        if eligible and lane.attached.needs_gate:
            client_id = stream.client.client_id
            if self._best_effort_holder not in (None, client_id):
                self.revoke_best_effort(client_id)
            self._best_effort_holder = client_id
            self.gate.open()
        if lane.granted != eligible or (eligible and lane.sm_cap != sm_cap):
            lane.attached.owner.grant(stream.key, eligible, sm_cap or 0)
            lane.granted, lane.sm_cap = eligible, sm_cap

    def revoke_client(self, client_id: Hashable) -> None:
        """The client is paused or its SM share changed: no lane of it issues
        anything until the executor offers it again."""
        for lane in self._lanes.values():
            if lane.granted and lane.stream.client.client_id == client_id:
                lane.attached.owner.grant(lane.stream.key, False, 0)   # waits for an operation being issued
                lane.granted = False

    def revoke_best_effort(self, client_id: Hashable) -> None:
        """A kernel of `client_id` waits for the policy: another job's best-effort
        lanes must not go on issuing past it (the policy shares the idle device)."""
        holder = self._best_effort_holder
        if holder is None or holder == client_id:
            return
        self._best_effort_holder = None
        for lane in self._lanes.values():
            if lane.granted and lane.stream.client.client_id == holder:
                lane.attached.owner.grant(lane.stream.key, False, 0)
                lane.granted = False

    def revoke_all(self) -> bool:
        """A preemptible unit is about to start: no lane that does not preempt it may
        issue until offered again (a high-priority lane goes on: its plane sets the
        unit's flag before each kernel, the unit being pinned already). True when a
        lane issued work since the policy last looked: the unit must not start before
        the policy has seen that work (it would hold the unit back, or preempt it)."""
        moved = False
        for lane in self._lanes.values():
            if not lane.granted:
                continue
            if not lane.attached.closes_gate:
                lane.attached.owner.grant(lane.stream.key, False, 0)     # waits for an operation being issued
                lane.granted = False
            moved |= self._counts(lane)[1] != lane.seen
        return moved

    def preempts_itself(self, client_id: Hashable) -> bool:
        """Whether the client's plane stops PTB launches before its kernels (so its lanes
        may stay granted while one runs)."""
        attached = self._attached.get(client_id)
        return attached is not None and attached.closes_gate

    # the board of PTB launches the planes stop (device_units.PreemptBoard) --------------
    def pin_preemptible(self, flag_address: int, control_stream: Any) -> None:
        self._pinned[flag_address] = control_stream
        if self._stream_handle is not None:
            self.gate.pin_preemptible(flag_address, self._stream_handle(control_stream))

    def unpin_preemptible(self, flag_address: int) -> bool:
        if self._pinned.pop(flag_address, None) is None:
            return False
        return self.gate.unpin_preemptible(flag_address)

    def unpin_all_preemptible(self) -> None:
        for flag in list(self._pinned):
            self.unpin_preemptible(flag)

    def close(self, stream) -> None:
        """The executor stream is being released: its lane goes (a watch still
        pending finds it closed)."""
        lane = self._lanes.pop(stream, None)
        if lane is not None:
            lane.closed = True
            if lane.busy:       # its work drained (the stream is released after it)
                lane.busy = False
                self._activity.completed(lane, self._lane_sms(lane), self._clock.now())
            launches, issued, _, graph_launches = self._counts(lane)
            self._closed["kernels"] += launches
            self._closed["ops_submitted"] += issued
            self._closed["graph_launches"] += graph_launches
            lane.attached.owner.close_lane(stream.key)

    def launches(self, stream) -> int:
        """Kernels the C++ data plane launched on the executor stream so far."""
        lane = self._lanes.get(stream)
        return self._counts(lane)[0] if lane is not None else 0

    def lanes(self) -> list[tuple[Hashable, Hashable, bool, int | None]]:
        """(client id, stream key, granted, SM cap of its launches) of every lane."""
        return [(lane.stream.client.client_id, lane.stream.key, lane.granted, lane.sm_cap)
                for lane in self._lanes.values()]

    def running(self, policy: SchedulingPolicy, now: float) -> tuple[RunningUnit, ...]:
        """The lanes whose work may still be on the device, as running units of
        their clients, for the policy's view; lanes whose work completed are
        reported to the policy as finished units."""
        if not self._lanes:
            return ()
        busy = []
        for lane in self._lanes.values():
            launches, issued, last_ns, _graphs = self._counts(lane)
            lane.seen = issued
            if issued == lane.drained:
                continue
            if lane.attached.completes_at_issue:
                lane.drained = issued
                # Done the moment it was issued: no device time to account for.
                policy.on_unit_finished(dataclasses.replace(lane.view, started_at=last_ns / 1e9), last_ns / 1e9)
                continue
            if lane.attached.needs_gate and lane.attached.owner.lane_quiet(lane.stream.key):
                # A best-effort lane's work completed before its watch's callback says
                # so: the policy hears of it now. Else a launch its plane handed to
                # Python once the lane was quiet (to be timed, whole_durations.py) would
                # wait for that callback, and every launch of the job after it, which
                # go to Python while it waits, would wait with it.
                if not lane.busy:
                    lane.busy = True
                    lane.view = dataclasses.replace(lane.view, started_at=last_ns / 1e9)
                    self._activity.launched(lane, lane.view.priority, self._lane_sms(lane), now)
                self._drained(lane, issued, launches, policy, now)
                continue
            if not lane.busy:
                # The policy counts a unit's device time from its start (best-effort
                # fairness): the lane's work started at the latest now.
                lane.busy = True
                lane.view = dataclasses.replace(lane.view, started_at=now)
                self._activity.launched(lane, lane.view.priority, self._lane_sms(lane), now)
            busy.append(lane.view)
            if lane.watched is None:
                self._watch(lane)
        return tuple(busy)

    def busy(self, client_id: Hashable) -> bool:
        """Whether a lane of the client issued work not known to have completed."""
        return any(self._refresh(lane)[1] != lane.drained for lane in self._lanes.values()
                   if lane.stream.client.client_id == client_id)

    def _refresh(self, lane: _Lane) -> tuple[int, int, int]:
        """The lane's (launches, operations, graph replays) issued so far; what of it is
        quiet counts as drained."""
        launches, issued, _, graph_launches = self._counts(lane)
        if issued != lane.drained and (lane.attached.completes_at_issue
                                       or lane.attached.owner.lane_quiet(lane.stream.key)):
            lane.drained, lane.launches_done = issued, launches
        return launches, issued, graph_launches

    def add_counters(self, out: dict) -> None:
        """Add the lanes' launches (graph replays' kernels among them), graph
        replays and operations to the executor's counters, `lanes_busy`: lanes
        whose issued work may still be on the device, and `preemptions_by_planes`:
        PTB launches a high-priority plane stopped (counted in `preemptions` too,
        once the executor took them off the board)."""
        out.setdefault("lanes_busy", 0)
        out["preemptions_by_planes"] = self.gate.preemptions_fired    # of out["preemptions"]
        out["ops_submitted"] += self._closed["ops_submitted"]
        out["kernels"] += self._closed["kernels"]
        out["kernels_whole"] += self._closed["kernels"]
        out["graph_launches"] += self._closed["graph_launches"]
        # best-effort kernels the planes issued next to the job's earlier ones (their batches)
        out["kernels_batched"] = (out.get("kernels_batched", 0) + self._closed["kernels_batched"]
                                  + sum(a.owner.batched() for a in self._attached.values()))
        for lane in self._lanes.values():
            launches, issued, graph_launches = self._refresh(lane)
            out["lanes_busy"] += issued != lane.drained
            client_id = lane.stream.client.client_id
            out["ops_submitted"] += issued
            out["kernels"] += launches
            out["kernels_whole"] += launches
            out["graph_launches"] += graph_launches
            client = out["clients"].get(client_id)
            if client is not None:
                client["kernels"] += launches
                client["kernels_completed"] += lane.launches_done
                client["graph_launches"] += graph_launches

    # internals --------------------------------------------------------------------------
    def _lane_sms(self, lane: _Lane) -> int:
        # What is on the lane is not known kernel by kernel: count the SMs it may use.
        return lane.sm_cap or self._sm_count

    def _counts(self, lane: _Lane) -> tuple[int, int, int]:
        return lane.attached.owner.lane_counts(lane.stream.key)

    def _drained(self, lane: _Lane, issued: int, launches: int, policy: SchedulingPolicy, now: float) -> None:
        """The lane's operations up to `issued` (`launches` kernels among them) completed."""
        if issued > lane.drained:
            lane.drained, lane.launches_done = issued, launches
        if lane.busy:
            lane.busy = False
            self._activity.completed(lane, self._lane_sms(lane), now)
            policy.on_unit_finished(lane.view, now)

    def _watch(self, lane: _Lane) -> None:
        """Learn when the operations the lane issued so far have completed: the
        same event-then-callback the device layer watches its units with, on the
        stream's notify stream. Counted before the event is recorded, so the
        event follows every operation counted."""
        b, stream = self._backend, lane.stream
        launches, issued, _, _ = self._counts(lane)
        event = b.event_create(False)
        b.event_record(event, stream.backend_stream)
        b.stream_wait_event(stream.lane.notify, event)
        lane.watched = issued

        def drained(policy: SchedulingPolicy, now: float) -> None:
            b.event_destroy(event)
            lane.watched = None
            if not lane.closed:
                self._drained(lane, issued, launches, policy, now)

        b.host_callback(stream.lane.notify, lambda: self._clock.call_soon(lambda: self._on_change(drained)))
