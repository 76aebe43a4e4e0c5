"""SysProbe as a server plugin: the health state machine (tally.cluster.health)
fed by the device's samples, answering admissions, and holding the actions the
server must carry out.

What the server does with it:
- registers it (hooks.Hooks.register): OnDeviceSample.on_sample gets every
  sample of the metrics source, AdmitClient.admit every handshake;
- after each sample, `drain_actions()` and carries them out: EvictBestEffort
  (that many best-effort jobs, None: all, in that order, each told the reason),
  RefuseBestEffort (nothing to do: admit() refuses already; for logs/status);
- the operator's commands: `disable(reason)`, `enable(reason)`;
- SIGHUP: `reload(load_health_config(path))`, the state kept;
- status: `describe()` is the `health` record (state, reason, since, back-off,
  recent transitions), which tally.cluster.k8s.gpu_servers reads.

Every transition is logged (logger "tally.health") with its cause, and kept
(the last `transitions_kept`). Pending actions are bounded too (`actions_kept`,
oldest dropped with a logged warning), so a server that never drains them
cannot grow without bound. Thread-safe: samples, admissions and commands may
come from different threads.
"""
from __future__ import annotations

import logging
import threading
from collections import deque

from tally.cluster.device_metrics import DeviceSample
from tally.cluster.health import (Action, HealthState, State, Step, Transition, admits_best_effort, disable,
                                  enable, health_step)
from tally.cluster.health_config import HealthConfig
from tally.scheduler.hooks import ALLOW, AdmissionRequest, Status, deny

log = logging.getLogger("tally.health")


class SysProbe:
    def __init__(self, config: HealthConfig | None = None, transitions_kept: int = 32, actions_kept: int = 256):
        self.config = config or HealthConfig()
        self._health = HealthState()
        self._transitions: deque[Transition] = deque(maxlen=transitions_kept)
        self._actions: deque[Action] = deque()
        self._actions_kept = actions_kept
        self._lock = threading.Lock()

    # -- extension points (tally.scheduler.hooks) --

    def on_sample(self, sample: DeviceSample) -> None:
        """OnDeviceSample: feed the machine. Non-fatal XIDs are logged, not acted on."""
        other = [x for x in sample.xid_errors if x not in self.config.xid.fatal]
        if other:
            log.warning("XID %s on the device at t=%g (not in [xid] fatal: left to device-fault handling)",
                        ", ".join(map(str, other)), sample.t)
        with self._lock:
            self._apply(health_step(self._health, sample, self.config))

    def admit(self, request: AdmissionRequest) -> Status:
        """AdmitClient: high-priority jobs always; best-effort jobs only while healthy."""
        if request.high_priority:
            return ALLOW
        admitted, why = admits_best_effort(self._health)     # one read of a frozen state: no lock
        return ALLOW if admitted else deny(why)

    # -- the server's side --

    @property
    def state(self) -> State:
        return self._health.state

    @property
    def health(self) -> HealthState:
        return self._health

    def transitions(self) -> list[Transition]:
        """The last transitions, oldest first."""
        with self._lock:
            return list(self._transitions)

    def drain_actions(self) -> list[Action]:
        """The actions not yet taken, oldest first; each is returned once."""
        with self._lock:
            actions = list(self._actions)
            self._actions.clear()
            return actions

    def disable(self, reason: str, t: float | None = None) -> list[Transition]:
        """The operator disables the device. `t` in the metrics source's clock
        (default: the last sample's time)."""
        with self._lock:
            return self._apply(disable(self._health, self._now(t), reason))

    def enable(self, reason: str = "", t: float | None = None) -> list[Transition]:
        """The operator enables a disabled device (-> init); otherwise nothing happens."""
        with self._lock:
            return self._apply(enable(self._health, self._now(t), reason))

    def reload(self, config: HealthConfig) -> None:
        """New thresholds (SIGHUP); the state and the runs under way are kept and
        judged by the new values from the next sample on."""
        with self._lock:
            self.config = config
        log.info("health config reloaded from %s", config.source)

    def describe(self) -> dict:
        """The `health` record of the server's status."""
        h = self._health
        record = {"state": h.state.value, "reason": h.reason, "since": h.entered_t,
                  "transitions": [tr.to_dict() for tr in self.transitions()]}
        if h.state is State.OVERLIMIT:
            record["backoff_until"] = h.refuse_until
        if h.overlimit_entries:
            record["recent_overlimit_entries"] = len(h.overlimit_entries)
        return record

    def _now(self, t: float | None) -> float:
        if t is not None:
            return t
        return self._health.last_t if self._health.last_t is not None else 0.0

    def _apply(self, step: Step) -> list[Transition]:
        self._health = step.state
        for tr in step.transitions:
            self._transitions.append(tr)
            level = logging.INFO if tr.to_state in (State.HEALTHY, State.INIT) else logging.WARNING
            log.log(level, "health %s -> %s at t=%g: %s", tr.from_state.value, tr.to_state.value, tr.t, tr.cause)
        for action in step.actions:
            if len(self._actions) >= self._actions_kept:
                log.warning("health: dropping an action nobody took: %s", self._actions.popleft())
            self._actions.append(action)
        return list(step.transitions)
