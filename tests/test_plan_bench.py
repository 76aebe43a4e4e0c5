"""`tally-bench profile` (sim backend; others refused by name) and a tiny
`tally-bench plan` run end to end through the CLI."""
from __future__ import annotations

import json

from tally.cli import bench_main
from tally.cluster.planner.profiles import load_profile


def test_profile_on_the_sim_writes_a_table_the_planner_reads(tmp_path):
    out = tmp_path / "table.yaml"
    assert bench_main.main(["profile", "--backend", "sim", "--partitions", "sm-share", "--step", "25",
                            "--models", "resnet50,dlrm-small", "--batches", "1,4", "-o", str(out)]) == 0
    table = load_profile(out, "a100-40gb", "sm-share")
    assert table.models == ["dlrm-small", "resnet50"] and not table.example
    assert sorted({r.partition for r in table.rows}) == ["100%", "25%", "50%", "75%"]
    assert len(table.rows) == 2 * 4 * 2
    assert table.memory_gb["dlrm-small"] == 12.0
    quarter = [r for r in table.rows_for("resnet50", "25%") if r.batch == 4][0]
    whole = [r for r in table.rows_for("resnet50", "100%") if r.batch == 4][0]
    assert whole.latency_ms < quarter.latency_ms and whole.throughput > quarter.throughput


def test_profile_refuses_backends_it_cannot_profile_yet(tmp_path, capsys):
    for backend, reason in (("cuda", "per-job SM shares are not in tally yet"), ("emulator", "no timing model")):
        assert bench_main.main(["profile", "--backend", backend, "-o", str(tmp_path / "t.yaml")]) == 2
        err = capsys.readouterr().err
        assert f"--backend {backend} is not supported yet" in err and reason in err and "--backend sim" in err
    assert not (tmp_path / "t.yaml").exists()


def test_bench_plan_reports_every_plan_covering_demand(tmp_path, capsys):
    report = tmp_path / "plan.json"
    png = tmp_path / "plan.png"
    assert bench_main.main(["plan", "--workloads", "normal-1", "--scale", "0.05", "--time-limit", "10",
                            "--json", str(report), "--png", str(png)]) == 0
    rows = json.loads(report.read_text())["rows"]
    assert [r["partitions"] for r in rows] == ["mig", "sm-share"]
    for r in rows:
        assert r["all_plans_cover_demand"]
        assert r["lower_bound"] <= r["optimizer"] <= min(r["greedy"], r["whole_gpus"], r["all_smallest"])
    assert png.stat().st_size > 10_000
    assert "normal-1" in capsys.readouterr().out
