"""`tally-bench launch` end to end at a small size on the null backend: the
report has issue 16's keys with values from real runs of both data planes, and
bad options are refused before anything starts."""
from __future__ import annotations

import json

import pytest

from tally.bench import process_runner
from tally.cli import bench_main

REQUIRED = {"hp_us_per_launch", "be_us_per_launch", "python_hp_us_per_launch", "sync_rtt_us", "wake_us",
            "polling_sync_rtt_us", "polling_wake_us",
            "aggregate_launches_per_s"}


def test_a_small_run_reports_both_planes(tmp_path, capsys):
    out = tmp_path / "launch.json"
    assert bench_main.main(["launch", "--backend", "null", "--rounds", "3", "--be-rounds", "1", "--batch", "200", "--syncs", "50",
                            "--wakes", "5", "--gap-us", "500", "--jobs", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert REQUIRED <= set(report)
    for key in REQUIRED:
        assert report[key] > 0, key
    assert set(report["planes"]) == {"cpp", "python"}
    assert (report["config"]["rounds"], report["config"]["be_rounds"]) == (3, 1)
    # Both planes really ran, told apart by what each server's C++ plane took (the timings
    # are the machine's: a loaded one can make the Python plane look as fast)
    assert report["planes"]["cpp"]["requests_taken_by_cpp"] > 0
    assert report["planes"]["python"]["requests_taken_by_cpp"] == 0
    assert report["hp_speedup_vs_python"] == pytest.approx(report["python_hp_us_per_launch"]
                                                           / report["hp_us_per_launch"])
    assert set(report["targets"]) == {"hp_us_per_launch", "hp_speedup_vs_python", "be_us_per_launch",
                                      "sync_rtt_us", "wake_us", "aggregate_launches_per_s"}
    printed = capsys.readouterr().out
    assert "high priority:" in printed and "targets:" in printed


@pytest.mark.parametrize("argv, words", [
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--gap-us", "-1"], "--gap-us must be > 0"),
    (["--be-rounds", "0"], "--be-rounds must be at least 1"),
])
def test_bad_options_are_refused(argv, words, capsys):
    assert bench_main.main(["launch", *argv]) == 2
    assert words in capsys.readouterr().err


def test_the_cuda_backend_needs_a_gpu(capsys, monkeypatch):
    monkeypatch.setattr(process_runner, "gpu_present", lambda: False)
    assert bench_main.main(["launch", "--backend", "cuda"]) == 2
    assert "needs an NVIDIA driver and GPU" in capsys.readouterr().err

