"""SM shares on a real GPU (`pytest -m gpu`): green contexts confine kernels tally
cannot rewrite. A cubin-only best-effort job at 25% (its kernels run whole) records
%smid per block while a high-priority job's kernels run beside it: every block ran
on at most the granted SMs. And a job's own green contexts keep its kernels to their
groups. The figures go to bench/results/sm-share-gpu-<date>.md."""
from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import ROOT, Job, Server, build_cuda, finish, job_env, run_job

from tally import paths
from tally.backends.registry import real_driver_present
from tally.backends.sm_partitions import SmPartitionRules
from tally.protocol.messages_generated import Hello

pytestmark = pytest.mark.gpu

RESULTS = ROOT / "bench" / "results"
BE_PERCENT = 25


@pytest.fixture(scope="module")
def gpu():
    """(compute capability, SM count, partition rules, driver version) of device 0."""
    if not real_driver_present():
        pytest.skip("no NVIDIA driver with a GPU on this machine")
    from cuda.bindings import driver as cu
    cu.cuInit(0)
    _, dev = cu.cuDeviceGet(0)
    attr = cu.CUdevice_attribute
    cc = tuple(cu.cuDeviceGetAttribute(a, dev)[1] for a in (attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                              attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    sms = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)[1]
    err, resource = cu.cuDeviceGetDevResource(dev, cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
    if err != cu.CUresult.CUDA_SUCCESS:
        pytest.skip(f"this GPU or driver has no green contexts ({err}): tally falls back to PTB caps")
    rules = SmPartitionRules(resource.sm.minSmPartitionSize, resource.sm.smCoscheduledAlignment)
    name = cu.cuDeviceGetName(256, dev)[1].split(b"\0", 1)[0].decode()
    return {"cc": cc, "sms": sms, "rules": rules, "driver": cu.cuDriverGetVersion()[1], "name": name}


@pytest.fixture(scope="module")
def cuda_server(gpu):
    server = Server("cuda")
    yield server
    server.stop()


def cubin_only(nvcc, gpu, name: str) -> Path:
    """The program with SASS for this GPU and no PTX: tally cannot rewrite its kernels."""
    arch = f"{gpu['cc'][0]}{gpu['cc'][1]}"
    return build_cuda(nvcc, name, flags=("-gencode", f"arch=compute_{arch},code=sm_{arch}"))


def census(socket, program, *args, priority: str, share: int | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "tally.cli.run_main", "--server", str(socket), "--priority", priority]
    if share is not None:
        command += ["--sm-percent", str(share)]
    return subprocess.Popen([*command, "--", str(program), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=job_env())


def test_a_cubin_only_best_effort_job_at_25_percent_runs_on_its_share(nvcc, gpu, cuda_server):
    if "sm_percent" not in Hello.__dataclass_fields__:
        pytest.skip("a job's SM share reaches the server with Hello.sm_percent (tally-run --sm-percent), "
                    "which the share14 branch adds")
    program = cubin_only(nvcc, gpu, "sm_census.cu")
    granted = gpu["rules"].grant(gpu["sms"] * BE_PERCENT // 100, gpu["sms"])
    hp_alone = finish(census(cuda_server.socket, program, 20, 4 * gpu["sms"], 200_000, priority="high"), 600)
    assert hp_alone.returncode == 0, hp_alone.stdout + hp_alone.stderr
    be = census(cuda_server.socket, program, 40, 4 * gpu["sms"], 200_000, priority="best-effort", share=BE_PERCENT)
    hp = census(cuda_server.socket, program, 20, 4 * gpu["sms"], 200_000, priority="high")
    hp, be = finish(hp, 600), finish(be, 600)
    assert be.returncode == 0 and hp.returncode == 0, be.stdout + be.stderr + hp.stdout + hp.stderr
    be_sms, hp_sms = be.ints("distinct_sms")[0], hp.ints("distinct_sms")[0]
    write_results(gpu, granted, be, hp, hp_alone)
    assert be.ints("blocks_missed") == [0] and hp.ints("blocks_missed") == [0]
    # Every block of the best-effort job ran on at most its share of the SMs.
    assert 1 <= be_sms <= granted <= gpu["sms"] * BE_PERCENT // 100, be.stdout
    assert hp_sms > granted, hp.stdout


def test_a_jobs_own_green_contexts_on_the_gpu(nvcc, gpu, cuda_server):
    program = build_cuda(nvcc, "green_contexts.cu", flags=(f"-L{paths.LIB_DIR}", "-lcuda"))
    minimum = gpu["rules"].minimum
    job = run_job(cuda_server.socket, program, minimum, priority="high", timeout=300)
    assert job.returncode == 0 and job.value("done") == "1", job.stdout + job.stderr
    assert job.ints("device_sms", "min_partition", "alignment") == [gpu["sms"], minimum, gpu["rules"].alignment]
    assert job.ints("green_sms")[0] == job.ints("group_sms")[0] >= minimum
    for launch in ("green_stream", "green_null"):
        assert 1 <= job.ints(f"{launch}_distinct_sms")[0] <= job.ints("green_sms")[0], job.stdout
    assert job.ints("whole_distinct_sms")[0] > job.ints("green_sms")[0]


def write_results(gpu, granted: int, be: Job, hp: Job, hp_alone: Job) -> None:
    today = datetime.date.today().isoformat()
    hp_ms, alone_ms = float(hp.value("elapsed_ms")), float(hp_alone.value("elapsed_ms"))
    text = f"""# SM share with green contexts on a GPU ({today})

Device: {gpu['name']}, compute capability {gpu['cc'][0]}.{gpu['cc'][1]}, {gpu['sms']} SMs, driver CUDA \
{gpu['driver'] // 1000}.{gpu['driver'] % 1000 // 10}; partitions of at least {gpu['rules'].minimum} SMs in \
multiples of {gpu['rules'].alignment}.
Command: `python -m pytest -m gpu tests/test_e2e_gpu_sm_share.py` (tests/cuda/programs/sm_census.cu built for \
sm_{gpu['cc'][0]}{gpu['cc'][1]} only: no PTX, so its kernels run whole).

| job | share | SMs granted | distinct SMs that ran blocks | highest %smid | wall time of its launches |
|---|---|---|---|---|---|
| best-effort, cubin-only | {BE_PERCENT}% | {granted} | {be.value('distinct_sms')} | {be.value('max_smid')} | \
{float(be.value('elapsed_ms')):.1f} ms |
| high priority, beside it | - | all | {hp.value('distinct_sms')} | {hp.value('max_smid')} | {hp_ms:.1f} ms |
| high priority, alone | - | all | {hp_alone.value('distinct_sms')} | {hp_alone.value('max_smid')} | \
{alone_ms:.1f} ms ({hp_ms / alone_ms:.2f}x beside) |
"""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"sm-share-gpu-{today}.md").write_text(text)
