"""Log the first event of each cause, count the rest.

Some events arrive in crowds with one cause (200 idle probes, a job restarted
in a loop): a warning per event buries everything else in the log. The first
of each cause is logged at WARNING, saying that more are only counted; the
counts are in `tally-server status` and each repeat is logged at DEBUG.
"""
from __future__ import annotations

import collections
import logging
import threading


class OncePerCause:
    def __init__(self, log: logging.Logger, what: str):
        self.log, self.what = log, what
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def note(self, cause: str, detail: str = "") -> None:
        with self._lock:
            self.counts[cause] += 1
            first = self.counts[cause] == 1
        suffix = f": {detail}" if detail and detail != cause else ""
        if first:
            self.log.warning("%s (%s)%s; more of this kind are counted in `tally-server status`, not logged",
                             self.what, cause, suffix)
        else:
            self.log.debug("%s (%s)%s", self.what, cause, suffix)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)
