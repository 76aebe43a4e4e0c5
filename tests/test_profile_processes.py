"""`tally-bench profile --backend emulator|cuda`: a real tally-server per share
and batch, the dense-inference CUDA program (nvcc) under `tally-run --priority
high --sm-percent P`, and the table tally-plan reads.

On this 2-core CI machine the emulator's 8 workers cannot all run at once, so
throughput need not grow from 25% to 100%: the tests check what holds on any
host (the job got the asked share, every figure is a positive measurement of
a run whose outputs were right) and leave scaling to the recorded results."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tally.backends.registry import real_driver_present
from tally.cli.bench_main import main as bench_main
from tally.cluster.planner.profiles import load_profile


@pytest.fixture(scope="module")
def emulator_profile(tmp_path_factory, nvcc):
    """Two shares, batch 2 (two rows of blocks per layer), half a second each."""
    out = tmp_path_factory.mktemp("profile") / "table.yaml"
    capture = pytest.MonkeyPatch()
    lines: list[str] = []
    capture.setattr("sys.stderr", _Lines(lines))
    try:
        status = bench_main(["profile", "--backend", "emulator", "--shares", "25,100", "--batches", "2",
                             "--duration", "0.5", "--keep-workdir", "-o", str(out)])
    finally:
        capture.undo()
    text = "".join(lines)
    kept = re.search(r"logs and reports kept in (\S+)", text)
    workdir = Path(kept.group(1)) if kept else None
    yield status, out, text, workdir
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


class _Lines:
    def __init__(self, lines: list[str]):
        self.lines = lines

    def write(self, text: str) -> int:
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_an_emulator_profile_is_a_table_the_planner_loads_and_says_where_it_comes_from(emulator_profile):
    status, out, stderr, _ = emulator_profile
    assert status == 0, stderr
    table = load_profile(out, "a100-40gb", "sm-share")
    assert table.models == ["dense-inference"] and not table.example
    assert table.step_percent == 25
    assert [(r.partition, r.batch) for r in table.rows] == [("25%", 2), ("100%", 2)]
    for row in table.rows:
        assert row.throughput > 0 and row.latency_ms > 0
    assert "--backend emulator" in table.source and "CPU-interpreter timings, not a GPU's" in table.source
    assert f"with {os.cpu_count()} CPU cores" in table.source
    assert "not a GPU's speed" in stderr and f"up to this host's {os.cpu_count()} CPU cores" in stderr


def test_each_run_had_the_share_it_asked_for_in_the_servers_log(emulator_profile):
    status, _, stderr, workdir = emulator_profile
    assert status == 0 and workdir is not None, stderr
    logs = {p.parent.name: p.read_text() for p in workdir.glob("*/run*/server.log")}
    assert sorted(logs) == ["run01-25pct-b2", "run02-100pct-b2"]
    assert "SM share 25% (2 SMs)" in logs["run01-25pct-b2"]
    assert "SM share 100% (8 SMs)" in logs["run02-100pct-b2"]
    assert "25% (2 of 8 SMs granted), batch 2" in stderr and "100% (8 of 8 SMs granted), batch 2" in stderr
    for report in workdir.glob("*/run*/hp.log"):
        assert "batch 2), results correct" in report.read_text()


def test_a_job_that_fails_is_named_with_its_output_and_no_table_is_written(tmp_path, capsys, nvcc):
    out = tmp_path / "t.yaml"
    assert bench_main(["profile", "--backend", "emulator", "--shares", "50", "--batches", "1", "--duration", "0.2",
                       "--job-args", "--width -3", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "high-priority job (dense-inference) exited with status 2" in err
    assert "--width needs a whole number >= 1" in err
    assert not out.exists()


@pytest.mark.skipif(real_driver_present(), reason="a GPU is present: --backend cuda would profile it")
def test_cuda_without_a_gpu_says_so_before_starting_anything(tmp_path, capsys):
    assert bench_main(["profile", "--backend", "cuda", "-o", str(tmp_path / "t.yaml")]) == 2
    err = capsys.readouterr().err
    assert "--backend cuda needs an NVIDIA driver and GPU, and none was found" in err
    assert "--backend emulator" in err
    assert not (tmp_path / "t.yaml").exists()


def test_real_process_options_are_checked(tmp_path, capsys):
    for flags, message in ((["--emulate-sms", "0"], "--emulate-sms must be >= 1"),
                           (["--duration", "0"], "--duration must be > 0 s"),
                           (["--models", "whisper"], "unknown models whisper; choose from dense-inference")):
        assert bench_main(["profile", "--backend", "emulator", *flags, "-o", str(tmp_path / "t.yaml")]) == 2, flags
        assert message in capsys.readouterr().err, flags
