"""`tally-bench graphs`' parts: its job program's graph reaches the server however
big (a graph past one ring record, 1500 kernels of 84 KB, travels through the
staging buffer and still replays as one unit), the server-cost measurement runs
both servers and reports both figures, and the decode model runs on the sim with
graph units and node by node, the counters saying which ran."""
from __future__ import annotations

from pathlib import Path

from e2e_helpers import Server, run_job

from tally.bench.graph_bench import GraphBenchConfig, server_cost
from tally.bench.graph_decode import HostCosts, decode_step, run_decode, step_time_alone
from tally.bench.process_jobs import build_cuda_job


def test_a_graph_too_big_for_one_record_is_staged_and_replayed_as_one_unit():
    server = Server("null")
    try:
        program = build_cuda_job("graph_replay.cu")
        job = run_job(server.socket, program, "--nodes", "1500", "--replays", "5", "--rounds", "2", "--warmup", "1",
                      priority="high", timeout=300)
        assert job.returncode == 0, job.stdout + job.stderr
        assert "nodes=1500 " in job.stdout
        s = server.status()["server"]["scheduler"]
        assert (s["graph_launches"], s["graph_nodes_replayed"], s["kernels"]) == (11, 0, 11 * 1500)
    finally:
        server.stop()


def test_server_cost_runs_both_servers(tmp_path: Path):
    config = GraphBenchConfig(nodes=16, runs=1, replays=20, node_replays=5, rounds=2, sim=False)
    cost = server_cost(config, tmp_path)
    assert cost["nodes"] == 16
    assert cost["units_us_per_replay"] > 0 and cost["nodes_us_per_replay"] > 0
    assert set(cost["targets"]) == {"units_us_per_replay", "ratio"}


def test_the_decode_model_replays_one_graph_per_step():
    costs = HostCosts(per_launch_us=5.0, per_replay_us=20.0)
    kernels = len(decode_step(4))
    assert kernels == 12 * 32 + 2
    # alone, graph units are faster: per-kernel host calls set the pace node by node
    assert step_time_alone(4, costs, True) < step_time_alone(4, costs, False)
    arrivals = [0.0, 0.01, 0.02]
    units = run_decode(4, costs, True, True, arrivals)
    nodes = run_decode(4, costs, False, False, arrivals)
    assert (units["graph_launches"], units["graph_nodes_replayed"]) == (3, 0)
    assert (nodes["graph_launches"], nodes["graph_nodes_replayed"]) == (0, 3 * kernels)
    assert units["training_iterations_per_s"] >= 0 and "training_iterations_per_s" not in nodes
