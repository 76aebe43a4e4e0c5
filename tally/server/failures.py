"""What a client's failed requests put in the server log: the first failure of each
kind (request, error code) at INFO with the server's explanation, so an operator
sees why a job's call failed without a trace flag; repeats are only counted, and
the counts are logged when the client leaves.

Answers that are not failures (CUDA_ERROR_NOT_READY from a query; the managed
allocation's CUDA_ERROR_ALREADY_MAPPED, on which the client retries elsewhere)
are not logged. The client library applies the same rule to what it prints.
"""
from __future__ import annotations

import collections
import logging
import threading

from tally.protocol import errors
from tally.protocol.errors import CUDA_ERROR_ALREADY_MAPPED, CUDA_ERROR_NOT_READY, DeviceError

log = logging.getLogger("tally.server")

ERROR_NAMES = {value: name for name, value in vars(errors).items() if name.startswith("CUDA_ERROR_")}


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"CUresult {code}")


def is_expected_answer(request: str, code: int) -> bool:
    return code == CUDA_ERROR_NOT_READY or (code == CUDA_ERROR_ALREADY_MAPPED and request == "MemAllocManaged")


class FailureLog:
    def __init__(self, client_id: int):
        self._client_id = client_id
        self._lock = threading.Lock()
        self._counts: collections.Counter = collections.Counter()

    def record(self, request: str, error: DeviceError) -> None:
        """Log the error if it is the first of its kind for this client; count it.
        An error object is counted once, however many answers carry it (a deferred
        error is logged when its request fails, not again at the sync that returns it)."""
        if is_expected_answer(request, error.code) or getattr(error, "logged", False):
            return
        error.logged = True
        key = (request, error.code)
        with self._lock:
            self._counts[key] += 1
            first = self._counts[key] == 1
        if first:
            log.info("client %d: %s failed with %s: %s (logged once per request and error; later ones are "
                     "counted)", self._client_id, request, error_name(error.code), error.message)

    @staticmethod
    def logged(error: DeviceError) -> DeviceError:
        """Mark an error as counted already (the same failure, carried by a later answer)."""
        error.logged = True
        return error

    def log_repeats(self) -> None:
        """When the client leaves: how many failures were counted without being logged."""
        with self._lock:
            repeats = {key: n - 1 for key, n in self._counts.items() if n > 1}
        if repeats:
            log.info("client %d: %d more failed requests not logged: %s", self._client_id, sum(repeats.values()),
                     ", ".join(f"{request} {error_name(code)} x{n}" for (request, code), n in sorted(repeats.items())))
