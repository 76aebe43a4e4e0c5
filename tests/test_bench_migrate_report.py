"""`tally-bench migrate`'s report (tally/bench/migrate_report.py): the ratios the
goal is about are each operation over the baseline it must at least pay, the
steps table names both servers' steps, and the JSON and PNG are written."""
from __future__ import annotations

import json

from tally.bench.migrate import Row
from tally.bench.migrate_report import ratio_table, steps_table, table, write


def row(mib: int) -> Row:
    return Row(footprint_mib=mib, memcpy_ms=100.0, memcpy_warm_ms=20.0, suspend_ms=50.0, resume_ms=120.0,
               suspend_again_ms=10.0, resume_again_ms=90.0, migrate_ms=150.0, migrate_back_ms=140.0, pause_ms=130.0,
               pause_back_ms=125.0, suspend_wall_ms=52.0, resume_wall_ms=121.0, migrate_wall_ms=151.0,
               freed_mib=float(mib), server_peak_mib=300.0, exact=True,
               migrate_steps_ms={"offer": 2.0, "transfer": 120.0}, import_steps_ms={"module": 3.0})


def test_ratios_divide_by_the_baseline_each_must_pay():
    lines = ratio_table([row(16)]).splitlines()
    assert lines[2] == "| 16 MiB | 0.50 | 0.50 | 1.20 | 1.50 | 1.30 |"


def test_steps_of_both_servers_and_missing_ones_as_zero():
    text = steps_table([row(16)])
    assert "source: transfer" in text and "target: module" in text
    assert "| 16 MiB | 0.0 ms | 2.0 ms | 0.0 ms | 0.0 ms | 120.0 ms |" in text


def test_files_are_written(tmp_path):
    rows = [row(16), row(64)]
    write(rows, tmp_path / "r.json", tmp_path / "r.png")
    assert [r["footprint_mib"] for r in json.loads((tmp_path / "r.json").read_text())] == [16, 64]
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert table(rows).count("| 64 MiB |") == 3


def test_repeated_runs_report_each_times_median_and_exact_only_if_all_were():
    from dataclasses import replace

    from tally.bench.migrate import median_row
    runs = [replace(row(16), suspend_ms=v, migrate_ms=m, migrate_steps_ms={"offer": m})
            for v, m in ((50.0, 300.0), (10.0, 100.0), (30.0, 200.0))]
    runs[2].exact = False
    got = median_row(runs)
    assert (got.suspend_ms, got.migrate_ms, got.exact) == (30.0, 200.0, False)
    assert got.migrate_steps_ms == {"offer": 200.0}        # the steps of the median migration
