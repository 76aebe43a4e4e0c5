"""`tally-bench profile` on the sim backend (the real-process backends:
test_profile_processes.py) and a tiny `tally-bench plan` run end to end through
the CLI."""
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


def test_profile_on_the_sim_measures_only_the_shares_asked_for(tmp_path):
    out = tmp_path / "table.json"
    assert bench_main.main(["profile", "--shares", "30,60", "--models", "resnet18", "--batches", "2",
                            "-o", str(out)]) == 0
    table = load_profile(out, "a100-40gb", "sm-share")
    assert table.step_percent == 10                     # gcd(30, 60, 100)
    assert [(r.partition, r.batch) for r in table.rows] == [("30%", 2), ("60%", 2)]
    assert table.rows[1].throughput > table.rows[0].throughput


def test_profile_refuses_unknown_backends_and_bad_shares(tmp_path, capsys):
    cases = ((["--backend", "tpu"], "unknown backend 'tpu'; use --backend sim"),
             (["--backend", "emulator", "--partitions", "mig"], "--backend emulator measures SM shares"),
             (["--shares", "25,60", "--step", "25"], "--shares 60 are not multiples of --step 25"),
             (["--shares", "0,50"], "--shares must be percentages from 1 to 100"),
             (["--shares", "half"], "--shares must be comma-separated integers"),
             (["--partitions", "mig", "--shares", "50"], "--shares lists SM shares"),
             (["--batches", "0"], "--batches must be integers >= 1"))
    for flags, message in cases:
        assert bench_main.main(["profile", *flags, "-o", str(tmp_path / "t.yaml")]) == 2, flags
        assert message in capsys.readouterr().err, flags
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
