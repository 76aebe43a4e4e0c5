"""The SM-share levers on the sim, in the co-location benchmark (deterministic):
compute control holds best-effort work back as its target asks and never the
high-priority job; a static share lowers the best-effort job's throughput in
proportion; the report names what the levers did."""
from __future__ import annotations

import pytest

from tally.bench.colocate import ColocateConfig, run_colocate
from tally.cli.bench_main import main as bench_main


def _priority(**levers):
    config = ColocateConfig(policies=("priority",), duration=0.6, **levers)
    result = run_colocate(config)
    return result.report["policies"]["priority"]


def test_compute_control_holds_best_effort_work_to_its_target_and_never_the_high_priority_job():
    free = _priority(be_util_target=1.0)                 # the controller on, never over its target
    held = _priority(be_util_target=0.6)
    assert free["levers"]["compute_control"]["hold"] == 0.0
    assert held["levers"]["compute_control"]["hold"] > 0.3
    assert held["levers"]["device"]["mean_sm_active_percent"] < free["levers"]["device"]["mean_sm_active_percent"] - 10
    assert held["be_normalized_throughput"][0] < free["be_normalized_throughput"][0] - 0.1
    assert held["hp_normalized_throughput"] == free["hp_normalized_throughput"] == pytest.approx(1.0, abs=0.01)
    assert held["hp_p99_ms"] <= free["hp_p99_ms"] * 1.01


def test_a_static_share_confines_the_best_effort_job():
    whole = _priority(be_transform="none")
    tenth = _priority(be_transform="none", be_sm_percent=10)
    half = _priority(be_transform="none", be_sm_percent=50)
    be = [r["be_normalized_throughput"][0] for r in (tenth, half, whole)]
    assert be[0] < 0.15 and be[0] + 0.2 < be[1] < be[2]
    assert tenth["hp_p99_vs_alone"] == pytest.approx(1.0, abs=0.01)   # 10% fits beside the online job


@pytest.mark.parametrize("args, words", [
    (["--be-sm-percent", "0"], "--be-sm-percent"),
    (["--be-util-target", "1.5"], "--be-util-target"),
    (["--be-sm-floor", "200"], "--be-sm-floor"),
    (["--sample-period-ms", "0"], "--sample-period-ms"),
])
def test_bad_lever_options_are_refused_with_the_flag_named(capsys, args, words):
    with pytest.raises(SystemExit) as exit_:
        bench_main(["colocate", *args])
    assert exit_.value.code == 2 and words in capsys.readouterr().err


def test_the_sweep_is_a_sim_benchmark(capsys):
    assert bench_main(["colocate", "--sm-sweep", "--backend", "emulator"]) == 2
    assert "--sm-sweep runs on the sim backend" in capsys.readouterr().err
