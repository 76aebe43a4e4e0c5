"""`tally-bench chaos` with a few rounds on the emulator: real nvcc-built jobs
under tally-run, best-effort ones struck by each signal (and evicted where the
server can) while the high-priority one checks every answer; the campaign's
checks must all pass, and each must be able to fail (the checks are judged on a
report with a leak, a stray segment, a grown server and a wrong answer)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from tally.bench.chaos import EVICT, PHASES, SIGNALS, ChaosConfig, eviction_available, run_chaos
from tally.bench.chaos_checks import MIB, RSS_MIN_ROUNDS, check_campaign, failed, format_table

ROUNDS = 5


@pytest.fixture(scope="module")
def report(nvcc):   # noqa: ARG001  (the jobs are built with nvcc)
    actions = (*SIGNALS, *((EVICT,) if eviction_available() else ()))
    return run_chaos(ChaosConfig(rounds=ROUNDS, seed=3, actions=actions))


def test_a_few_rounds_pass_every_check(report):
    assert not failed(report["checks"]), json.dumps(report, indent=1)[-6000:]
    judged = {c["name"]: c["passed"] for c in report["checks"]}
    assert judged.pop("server RSS flat") is None          # 5 rounds are too few to judge a trend
    assert all(judged.values()), judged
    assert len(report["rounds"]) == ROUNDS
    assert report["service"]["iterations"] > 0 and report["service"]["wrong"] == 0
    for r in report["rounds"]:
        assert r["target_phase"] in PHASES and r["struck_in"] in PHASES, r
        assert r["leaked_bytes"] == 0 and r["shm_left"] == [] and r["service_running"], r
    assert report["final"] == {**report["final"], "in_use_bytes": 0, "shm_left": [], "server_running": True}
    # the baseline is the service's own buffers: 3 x 2048 x 4 bytes, at least
    assert report["baseline_in_use_bytes"] >= 3 * 2048 * 4


def test_the_same_seed_draws_the_same_rounds(report):
    again = ChaosConfig(rounds=ROUNDS, seed=3, actions=tuple(report["actions"]))
    import random
    rng = random.Random(again.seed)
    drawn = [(rng.choice(again.chosen_actions()), rng.choice(PHASES), round(rng.uniform(0, again.max_delay_s), 4))
             for _ in range(ROUNDS)]
    assert drawn == [(r["action"], r["target_phase"], r["delay_s"]) for r in report["rounds"]]


def test_each_check_fails_on_what_it_guards(report):
    def failing(change) -> set[str]:
        broken = copy.deepcopy(report)
        broken["rounds"] = [{**broken["rounds"][i % ROUNDS], "index": i} for i in range(RSS_MIN_ROUNDS)]
        change(broken)
        return {c["name"] for c in failed(check_campaign(broken))}

    assert failing(lambda r: r["rounds"][2].update(leaked_bytes=4096)) == {"device memory back to baseline"}
    assert failing(lambda r: r["final"].update(shm_left=["tally-1-7"])) == {"no /dev/shm object left"}
    assert failing(lambda r: r["service"].update(wrong=1)) == {"high-priority results"}
    assert failing(lambda r: None) == set()
    grown = report["rounds"][0]["server_rss_bytes"] + 64 * MIB
    assert failing(lambda r: [x.update(server_rss_bytes=grown) for x in r["rounds"][-5:]]) == {"server RSS flat"}
    assert failing(lambda r: r["rounds"][0].update(exit_status=0)) == {"every strike ended its job"}
    assert failing(lambda r: r["server_log_errors"].append("Traceback")) == {"server kept serving"}
    table = format_table(report)
    assert "PASS  high-priority results" in table and "SIGKILL" in table


def test_the_command_line_refuses_bad_flags():
    done = subprocess.run([sys.executable, "-m", "tally.cli.bench_main", "chaos", "--rounds", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == "tally-bench chaos: --rounds must be at least 1, got 0"
    done = subprocess.run([sys.executable, "-m", "tally.cli.bench_main", "chaos", "--actions", "SIGHUP"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "unknown action(s) SIGHUP" in done.stderr


def test_a_traceback_in_the_server_log_is_reported_whole():
    from tally.bench.chaos import server_log_errors
    log = ("INFO serving\nTraceback (most recent call last):\n  File \"h.py\", line 3, in release\n"
           "    pool.free(p)\nKeyError: 4096\nINFO next\nERROR a job crashed\n")
    assert server_log_errors(log) == [
        "Traceback (most recent call last):\n  File \"h.py\", line 3, in release\n    pool.free(p)\nKeyError: 4096",
        "ERROR a job crashed"]
