"""The one exception a pass raises for a kernel it cannot transform."""
from __future__ import annotations


class PassRefused(Exception):
    """A pass met a kernel it cannot transform correctly. `reasons` says why, one line each;
    the pipeline records them and keeps the kernel untransformed."""

    def __init__(self, reasons: list[str] | tuple[str, ...] | str):
        self.reasons = (reasons,) if isinstance(reasons, str) else tuple(reasons)
        super().__init__("; ".join(self.reasons))
