"""A job's texture and surface objects: the handles its backend made for it, so a
job destroys only its own and what it leaves behind goes with it."""
from __future__ import annotations

import logging

from tally.backends.texture_objects import TextureRequest
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError

log = logging.getLogger("tally.server")


class TextureObjects:
    def __init__(self, backend):
        self._backend = backend
        self._handles: set[int] = set()

    def create(self, req: TextureRequest) -> int:
        handle = self._backend.texture_create(req)
        self._handles.add(handle)
        return handle

    def take(self, handle: int) -> None:
        """Forget `handle` (no later request may name it); release() frees it."""
        if handle not in self._handles:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{handle:#x} is no texture or surface object of this job")
        self._handles.discard(handle)

    def release(self, handle: int) -> None:
        self._backend.texture_destroy(handle)

    def __len__(self) -> int:
        return len(self._handles)

    def clear(self) -> None:
        """The job is gone: its objects go too (a failure is logged; the job's other
        state is freed all the same)."""
        handles, self._handles = self._handles, set()
        for handle in handles:
            try:
                self._backend.texture_destroy(handle)
            except DeviceError as e:
                log.warning("destroying texture object 0x%x failed: %s", handle, e)
