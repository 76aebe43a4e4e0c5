"""The pod annotations tally reads, parsed and checked in one place.

    tally.dev/sm-percent     the job's SM share, a number in (0, 100] and at most the
                             node's limit (--max-sm-percent of the device plugin)
    tally.dev/memory-quota   device memory the job may use: a size with a unit (8G, 512M, 4096B)
                             or a share of the GPU (40%), as tally-run --memory-quota
    tally.dev/job-class      which profile placement uses for the job (optional)
    tally.dev/gpu            written by the placement controller: the GPU index it chose

A malformed value is an error naming the pod, the annotation, the value and what
to write instead; nothing is guessed.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from tally.cli.run_main import parse_quota

PREFIX = "tally.dev/"
SM_PERCENT = PREFIX + "sm-percent"
MEMORY_QUOTA = PREFIX + "memory-quota"
JOB_CLASS = PREFIX + "job-class"
GPU = PREFIX + "gpu"


class AnnotationError(ValueError):
    """A pod's tally annotation cannot be used; the message says what to change."""


@dataclass(frozen=True)
class JobRequest:
    """What a pod asks of tally beyond its resource count."""

    sm_percent: float | None = None
    memory_quota: str | None = None      # canonical: bytes or "N%"
    job_class: str | None = None
    gpu: int | None = None


def pod_name(pod: dict) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def parse_sm_percent(text: str, limit: float, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise AnnotationError(f"{where}: {SM_PERCENT}={text!r} is not a number; write a percentage of the "
                              f"GPU's SMs such as \"40\"") from None
    if not math.isfinite(value) or not 0 < value <= 100:
        raise AnnotationError(f"{where}: {SM_PERCENT}={text!r} must be in (0, 100]")
    if value > limit:
        raise AnnotationError(f"{where}: {SM_PERCENT}={text!r} is above what this node allows a job "
                              f"({limit:g}%); ask for at most {limit:g} or remove the annotation")
    return value


def job_request(pod: dict, max_sm_percent: float = 100.0) -> JobRequest:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    where = f"pod {pod_name(pod)}"
    sm = annotations.get(SM_PERCENT)
    quota = annotations.get(MEMORY_QUOTA)
    gpu = annotations.get(GPU)
    job_class = annotations.get(JOB_CLASS)
    if quota is not None:
        try:
            quota = parse_quota(quota)
        except argparse.ArgumentTypeError as e:
            raise AnnotationError(f"{where}: annotation {MEMORY_QUOTA}: {e}") from None
    if gpu is not None:
        if not gpu.isdigit():
            raise AnnotationError(f"{where}: {GPU}={gpu!r} is not a GPU index; it is written by tally's "
                                  f"placement controller: remove it")
        gpu = int(gpu)
    if job_class is not None and not job_class.strip():
        raise AnnotationError(f"{where}: {JOB_CLASS} is empty; name the job's profile or remove it")
    return JobRequest(sm_percent=parse_sm_percent(sm, max_sm_percent, where) if sm is not None else None,
                      memory_quota=quota, job_class=job_class, gpu=gpu)
