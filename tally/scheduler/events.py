"""A client's event as the executor tracks it: the handle that EventRecord and
StreamWaitEvent operations name and that event_create returns."""
from __future__ import annotations

import collections
from typing import Any, Hashable


class ExecutorEvent:
    """A client's event. Each EventRecord gets its own backend event when it
    reaches the device, because a record can sit in a held queue while the
    client records the same event again elsewhere: a StreamWaitEvent must wait
    for the record that preceded it (CUDA semantics), not for a later one."""

    def __init__(self, client_id: Hashable, timing: bool):
        self.client_id = client_id
        self.timing = timing
        self.submitted_seq = 0                   # records submitted so far
        self.records: dict[int, Any] = {}        # seq -> backend event, once dispatched
        self.waiters: collections.Counter = collections.Counter()   # seq -> queued waits
        self.destroyed = False
        self.shared = False      # an interprocess event other clients may record and wait on
        # A migrated job's event last recorded on its old server: when that record was
        # reached, on the node's clock (DeviceBackend.event_host_time). Stands while the
        # event is not recorded here (submitted_seq == 0).
        self.recorded_elsewhere: float | None = None
