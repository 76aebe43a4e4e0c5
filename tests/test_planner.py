"""tally-plan's planner: MIG layouts from NVIDIA's placement rules, the
optimizer against its bounds and baselines, reconfiguration that never drops a
service below its floor, output formats, and errors for bad input.

Fleets here are small (a few services) so the file runs in seconds; the
hundreds-of-GPUs fleets are `tally-bench plan`'s (bench/results/plan-*.md)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml

from tally.bench.plan_workloads import SHAPES, generate
from tally.cli import plan_main
from tally.cluster.planner.baselines import all_smallest, whole_gpus
from tally.cluster.planner.deployment import Deployment
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.formats import mig_parted, tally_run
from tally.cluster.planner.gpus import GPU_TYPES, gpu_type
from tally.cluster.planner.greedy import greedy
from tally.cluster.planner.layouts import PartitionScheme, mig_layouts, sm_share_layouts
from tally.cluster.planner.optimizer import optimize
from tally.cluster.planner.part_counts import deal_out, solve_part_counts
from tally.cluster.planner.plan import plan
from tally.cluster.planner.problem import Problem
from tally.cluster.planner.profiles import load_profile, profile_from_dict
from tally.cluster.planner.reconfigure import reconfigure
from tally.cluster.planner.services import PlanRequest, Service, check_request, load_request

A100 = gpu_type("a100-40gb")


@pytest.fixture(scope="module")
def mig_profile():
    return load_profile("example", "a100-40gb", "mig")


@pytest.fixture(scope="module")
def sm_profile():
    return load_profile("example", "a100-40gb", "sm-share")


def _table(rows: dict, kind: str = "mig", gpu: str = "a100-40gb", memory: dict | None = None):
    """A hand-made profile table: rows = {model: [[partition, batch, req/s, p99 ms], ...]}."""
    return profile_from_dict({"gpu": gpu, "partitions": kind, "source": "test", "models": {
        m: {"rows": r, **({"memory_gb": memory[m]} if memory and m in memory else {})} for m, r in rows.items()}},
        "test table")


def _request(table, services, kind="mig", gpu=A100, max_gpus=None):
    return check_request(PlanRequest(gpu, kind, table, services, max_gpus))


# layouts ---------------------------------------------------------------------------------------------------------

def test_a100_has_the_18_full_layouts_mig_serving_counts_13_distinct_size_sets():
    layouts = mig_layouts(A100)
    assert len(layouts) == 18
    assert len({layout.sizes for layout in layouts}) == 13
    assert {layout.sizes for layout in layouts} == {
        (7,), (4, 2, 1), (4, 1, 1, 1), (3, 3), (3, 2, 1), (3, 1, 1, 1), (3, 2, 2), (3, 2, 1, 1), (3, 1, 1, 1, 1),
        (2, 2, 2, 1), (2, 2, 1, 1, 1), (2, 1, 1, 1, 1, 1), (1, 1, 1, 1, 1, 1, 1)}


def test_the_4g_plus_3g_rule_is_what_separates_18_from_19():
    assert not any({4, 3} <= set(layout.sizes) for layout in mig_layouts(A100))
    unrestricted = dataclasses.replace(A100, mig_exclusive=())
    layouts = mig_layouts(unrestricted)
    assert len(layouts) == 19
    assert (4, 3) in {layout.sizes for layout in layouts}


@pytest.mark.parametrize("key", sorted(GPU_TYPES))
def test_every_layout_respects_the_placement_grid(key):
    gpu = GPU_TYPES[key]
    maximal = mig_layouts(gpu)
    assert len(maximal) == 18            # A100 40/80 GB and H100 80 GB share NVIDIA's placement grid
    every = mig_layouts(gpu, maximal=False)
    for layout in every:
        slices = []
        for part in layout.parts:
            profile = gpu.mig_profile(part.partition)
            size = dict(profile.placements)[part.start]          # a start NVIDIA lists for this profile
            slices += range(part.start, part.start + size)
        assert len(slices) == len(set(slices)) and max(slices) < gpu.memory_slices
        assert sum(p.units for p in layout.parts) <= gpu.compute_slices
    # every legal layout fits inside a maximal one, so the optimizer loses nothing by pricing maximal ones
    for layout in every:
        assert any(all(part in big.parts for part in layout.parts) for big in maximal)


def test_sm_share_layouts_are_the_integer_partitions():
    assert len(sm_share_layouts(10)) == 42
    assert all(sum(p) == 10 for p in sm_share_layouts(10))
    scheme = PartitionScheme(A100, "sm-share", 10)
    assert scheme.partitions[0] == "10%" and scheme.whole == "100%"
    assert [scheme.sms(p) for p in ("10%", "50%", "100%")] == [10, 54, 108]
    with pytest.raises(PlanInputError, match="must divide 100"):
        PartitionScheme(A100, "sm-share", 30)


# the optimizer on hand-checkable cases ---------------------------------------------------------------------------

def test_small_partitions_beat_a_whole_gpu_when_a_model_does_not_scale():
    table = _table({"m": [["1g", 1, 100.0, 5.0], ["2g", 1, 150.0, 4.0], ["3g", 1, 180.0, 3.0],
                          ["4g", 1, 200.0, 3.0], ["7g", 1, 600.0, 2.0]]})
    problem = Problem(_request(table, [Service("s", "m", 700.0, 10.0)]))
    result = optimize(problem, time_limit=10)
    assert result.gpus == 1 and result.lower_bound == 1
    assert result.configs[0][0].partitions == (0,) * 7        # seven 1g instances
    assert whole_gpus(problem).gpus == 2


def test_4g_and_3g_never_share_a_gpu_in_a_plan():
    # a needs a 4g or 7g (its SLO rules out 3g), b fits a 3g; one GPU would need 4g+3g
    table = _table({"a": [["3g", 1, 90.0, 15.0], ["4g", 1, 100.0, 10.0], ["7g", 1, 150.0, 8.0]],
                    "b": [["2g", 1, 60.0, 20.0], ["3g", 1, 100.0, 10.0], ["4g", 1, 110.0, 9.0],
                          ["7g", 1, 160.0, 7.0]]})
    services = [Service("a", "a", 100.0, 12.0), Service("b", "b", 100.0, 12.0)]
    assert optimize(Problem(_request(table, services)), time_limit=10).gpus == 2
    unrestricted = dataclasses.replace(A100, mig_exclusive=())
    assert optimize(Problem(_request(table, services, gpu=unrestricted)), time_limit=10).gpus == 1


def test_memory_keeps_a_model_off_small_instances():
    table = _table({"big": [["1g", 1, 100.0, 5.0], ["2g", 1, 190.0, 5.0], ["3g", 1, 280.0, 5.0],
                            ["4g", 1, 370.0, 5.0], ["7g", 1, 600.0, 5.0]]}, memory={"big": 12.0})
    problem = Problem(_request(table, [Service("s", "big", 250.0, 10.0)]))
    result = optimize(problem, time_limit=10)
    sizes = {problem.partitions[p] for config, _ in result.configs
             for p, i in zip(config.partitions, config.services) if i >= 0}
    assert sizes and sizes <= {"3g", "4g", "7g"}                 # 1g.5gb and 2g.10gb hold less than 12 GB


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_optimizer_meets_demand_within_1_percent_of_the_lp_bound_and_beats_the_baselines(mig_profile, shape):
    services = generate(shape, mig_profile, seed=3, scale=0.08)
    problem = Problem(_request(mig_profile, services))
    result = optimize(problem, time_limit=20)
    assert result.meets_demand(problem)
    assert result.details["config_lp_bound"] <= result.lp_bound + 1e-6     # the pattern LP is the stronger bound
    assert result.lower_bound <= result.gpus <= result.lower_bound * 1.01 + 1e-9
    fast = greedy(problem)
    assert fast.meets_demand(problem) and fast.gpus >= result.gpus
    assert whole_gpus(problem).gpus >= result.gpus and all_smallest(problem).gpus >= result.gpus


def test_the_aggregated_integer_master_alone_finds_the_optimum(mig_profile):
    # the optimizer usually stops at its rounded pattern LP; the full MIP must agree with it
    problem = Problem(_request(mig_profile, generate("normal-2", mig_profile, seed=4, scale=0.06)))
    counts, none = solve_part_counts(problem, time_limit=20)
    assert counts is not None and not none
    configs = deal_out(problem, counts)
    total = np.zeros(problem.n)
    for config, number in configs:
        total += number * problem.coverage(config)
    assert np.all(total >= problem.demand * (1 - 1e-9))
    assert sum(number for _, number in configs) == counts.layouts.sum() == optimize(problem, 20).gpus
    none_fit, proved = solve_part_counts(problem, time_limit=20, max_gpus=int(counts.layouts.sum()) - 1)
    assert none_fit is None and proved


def test_sm_share_plans_cover_demand(sm_profile):
    services = generate("lognormal-1", sm_profile, seed=5, scale=0.05)
    problem = Problem(_request(sm_profile, services, kind="sm-share"))
    result = optimize(problem, time_limit=20)
    assert result.meets_demand(problem)
    assert result.lower_bound <= result.gpus <= result.lower_bound * 1.01 + 1e-9
    for config, _ in result.configs:
        assert sum(problem.units[p] for p in config.partitions) <= 10


def test_the_generator_is_seeded(mig_profile):
    a = generate("normal-2", mig_profile, seed=7, scale=0.1)
    assert a == generate("normal-2", mig_profile, seed=7, scale=0.1)
    assert a != generate("normal-2", mig_profile, seed=8, scale=0.1)
    assert len(generate("lognormal-1", mig_profile, seed=0)) == SHAPES["lognormal-1"].services


# outputs ---------------------------------------------------------------------------------------------------------

def test_mig_parted_config_holds_exactly_the_planned_legal_layouts(mig_profile):
    deployment = plan(_request(mig_profile, generate("normal-2", mig_profile, seed=1, scale=0.06)), time_limit=20)
    config = yaml.safe_load(mig_parted(deployment, gpus_per_node=4))
    assert config["version"] == "v1"
    scheme = PartitionScheme(A100, "mig")
    seen = {}
    for name, entries in config["mig-configs"].items():
        node = int(name.rsplit("-", 1)[1])
        for entry in entries:
            assert entry["mig-enabled"] is True
            sizes = [int(profile.split("g.")[0]) for profile, k in entry["mig-devices"].items() for _ in range(k)]
            scheme.layout_for(sizes)                              # raises if no legal placement holds them
            for device in entry["devices"]:
                assert 0 <= device < 4
                seen[node * 4 + device] = entry["mig-devices"]
    assert sorted(seen) == [g.index for g in deployment.gpus]
    for gpu in deployment.gpus:
        assert sum(seen[gpu.index].values()) == len(gpu.parts)


def test_tally_run_lines_give_each_part_its_sm_share(sm_profile):
    services = [Service("ranker", "bert-base", 300.0, 40.0, command="serve --batch {batch}"),
                Service("tags", "resnet50", 900.0, 20.0)]
    deployment = plan(_request(sm_profile, services, kind="sm-share"), time_limit=10)
    script = tally_run(deployment)
    runs = [line for line in script.splitlines() if line.startswith("tally-run")]
    assert len(runs) == sum(len(g.parts) for g in deployment.gpus)
    assert all("--sm-percent" in line for line in runs)
    ranker = [p for g in deployment.gpus for p in g.parts if p.service == "ranker"]
    assert any(f"-- serve --batch {ranker[0].batch} &" in line for line in runs)
    for gpu in deployment.gpus:
        assert sum(int(p.partition.rstrip("%")) for p in gpu.parts) <= 100
    servers = [line for line in script.splitlines() if line.startswith("tally-server --device")]
    assert [int(line.split("--max-hp-jobs ")[1].split()[0]) for line in servers] == [len(g.parts)
                                                                                     for g in deployment.gpus]
    assert script.count("until tally-server status --socket") == len(deployment.gpus)
    with pytest.raises(PlanInputError, match="MIG plans"):
        mig_parted(deployment)


def test_json_round_trips(mig_profile):
    deployment = plan(_request(mig_profile, [Service("s", "resnet50", 2000.0, 20.0)]), time_limit=10)
    again = Deployment.from_dict(json.loads(json.dumps(deployment.to_dict())))
    assert again.to_dict() == deployment.to_dict()


# reconfiguration -------------------------------------------------------------------------------------------------

def _replay(current: Deployment, steps, new_services) -> None:
    """Walk the steps and check every service stays at min(old, new) required."""
    required_old = {s["name"]: s["throughput"] for s in current.services}
    required_new = {s.name: s.throughput for s in new_services}
    on_gpu = {g.index: list(g.parts) for g in current.gpus}

    def capacity():
        out = {}
        for parts in on_gpu.values():
            for p in parts:
                out[p.service] = out.get(p.service, 0.0) + p.throughput
        return out

    start = capacity()
    floor = {n: min(required_old.get(n, 0), required_new.get(n, 0), start.get(n, 0)) for n in required_new}
    def floors_hold():
        now = capacity()
        return all(now.get(n, 0.0) >= f * (1 - 1e-9) - 1e-9 for n, f in floor.items())

    for step in steps:
        parts = on_gpu.get(step.gpu, [])
        assert all(p in parts for p in step.stopped + step.kept), step.describe()
        on_gpu[step.gpu] = [p for p in parts if p not in step.stopped]
        assert floors_hold(), step.describe()                      # the step's low point
        on_gpu[step.gpu] += step.started
        if step.action == "release":
            assert not on_gpu.pop(step.gpu)
        assert floors_hold(), step.describe()
    final = capacity()
    assert all(final.get(n, 0.0) >= r * (1 - 1e-9) for n, r in required_new.items())


def test_reconfiguration_keeps_every_floor_and_touches_few_gpus(mig_profile):
    services = generate("lognormal-1", mig_profile, seed=1, scale=0.08)
    current = plan(_request(mig_profile, services), time_limit=20)
    same = reconfigure(current, _request(mig_profile, services), time_limit=20)
    assert same.summary["touched"] == 0 and same.steps == []
    changed = [Service(s.name, s.model, s.throughput * (1.6 if k % 3 == 0 else 0.7), s.p99_ms)
               for k, s in enumerate(services)]
    move = reconfigure(current, _request(mig_profile, changed), time_limit=20)
    _replay(current, move.steps, changed)
    assert move.summary["floors_met"]
    assert move.summary["gpus_after"] == move.summary["fresh_optimum"]
    assert move.summary["touched"] < len(current.gpus) + move.summary["gpus_after"]
    assert move.summary["kept"] > 0


# bad input -------------------------------------------------------------------------------------------------------

def test_an_slo_no_partition_meets_is_named(mig_profile):
    with pytest.raises(PlanInputError, match=r"service 'fast'.*no partition meets its p99 SLO of 0\.1 ms"):
        Problem(_request(mig_profile, [Service("fast", "bert-large", 10.0, 0.1)]))


def test_a_model_missing_from_the_profile_is_named(mig_profile):
    with pytest.raises(PlanInputError, match=r"service 'chat' runs model 'llama-70b'.*does not have"):
        _request(mig_profile, [Service("chat", "llama-70b", 10.0, 100.0)])


def test_an_unknown_gpu_type_is_named(tmp_path):
    path = tmp_path / "services.yaml"
    path.write_text("gpu: v100\npartitions: mig\nservices: [{name: s, model: bert-base, throughput: 1, p99_ms: 50}]\n")
    with pytest.raises(PlanInputError, match=r"unknown GPU type 'v100'.*a100-40gb"):
        load_request(path)


def test_an_infeasible_budget_is_named(mig_profile):
    request = _request(mig_profile, [Service("s", "resnet50", 20000.0, 20.0)], max_gpus=3)
    with pytest.raises(PlanInputError, match=r"infeasible GPU budget: the services need at least \d+ GPUs.*is 3"):
        plan(request, time_limit=10)
    with pytest.raises(PlanInputError, match="infeasible GPU budget"):
        plan(request, algorithm="greedy", time_limit=10)


def test_a_model_too_big_for_every_partition_is_named():
    table = _table({"huge": [["7g", 1, 10.0, 5.0]]}, memory={"huge": 60.0})
    with pytest.raises(PlanInputError, match="needs 60 GB"):
        Problem(_request(table, [Service("s", "huge", 1.0, 50.0)]))


def test_cli_prints_a_plan_and_reports_bad_input(tmp_path, capsys):
    services = tmp_path / "services.yaml"
    services.write_text("gpu: a100-40gb\npartitions: mig\nprofile: example\nservices:\n"
                        "  - {name: ranker, model: bert-base, throughput: 800, p99_ms: 30}\n"
                        "  - {name: tags, model: resnet50, throughput: 1500, p99_ms: 15}\n")
    out = tmp_path / "plan.json"
    assert plan_main.main([str(services), "--format", "json", "-o", str(out), "--time-limit", "10"]) == 0
    deployment = Deployment.from_dict(json.loads(out.read_text()))
    assert deployment.summary["gpus"] == len(deployment.gpus) >= deployment.summary["lower_bound"]
    assert plan_main.main([str(services), "--time-limit", "10"]) == 0
    assert "GPUs" in capsys.readouterr().out
    assert plan_main.main([str(services), "--from", str(out), "--time-limit", "10"]) == 0
    assert "touched 0" in capsys.readouterr().out
    services.write_text("gpu: a100-40gb\nservices: [{name: x, model: nope, throughput: 5, p99_ms: 9}]\n")
    assert plan_main.main([str(services)]) == 2
    assert "model 'nope'" in capsys.readouterr().err
    services.write_text("gpu: a100-40gb\nservices: [{name: x, model: bert-base, throughput: -5, p99_ms: 9}]\n")
    assert plan_main.main([str(services)]) == 2
    assert "'throughput' must be a number > 0" in capsys.readouterr().err
    services.write_text("gpu: [unclosed\n")
    assert plan_main.main([str(services)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_profile_table_errors_name_the_problem():
    with pytest.raises(PlanInputError, match="not a profile table"):
        profile_from_dict({"gpu": "a100-40gb"}, "t.yaml")
    with pytest.raises(PlanInputError, match=r"row \['1g', 1\] is not"):
        profile_from_dict({"gpu": "a100-40gb", "partitions": "mig", "models": {"m": {"rows": [["1g", 1]]}}}, "t.yaml")
    table = _table({"m": [["5g", 1, 10.0, 5.0]]})
    with pytest.raises(PlanInputError, match="partitions 5g"):
        Problem(_request(table, [Service("s", "m", 1.0, 50.0)]))
    with pytest.raises(PlanInputError, match="has mig partitions, the plan asks for sm-share"):
        _request(_table({"m": [["1g", 1, 10.0, 5.0]]}), [Service("s", "m", 1.0, 50.0)], kind="sm-share")


def test_example_profiles_are_marked_as_examples(mig_profile, sm_profile):
    for table in (mig_profile, sm_profile):
        assert table.example and "sim" in table.source
        assert set(table.models) >= {"bert-base", "resnet50"}
    # the sim's cost model: more SMs, lower latency for the same batch
    latencies = [mig_profile.rows_for("bert-base", p)[3].latency_ms for p in ("1g", "2g", "3g", "4g", "7g")]
    assert latencies == sorted(latencies, reverse=True)
    assert np.isclose(mig_profile.rows_for("bert-base", "1g")[0].throughput * 1e-3
                      * mig_profile.rows_for("bert-base", "1g")[0].latency_ms, 1.0, rtol=1e-3)
