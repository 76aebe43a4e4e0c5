"""A job's SM share end to end on the emulator (8 SMs, one worker thread each):
tally-run --sm-percent (or the job's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, or the
server's --be-sm-percent) confines every kernel of the job to its share of the
workers, measured inside the kernel (%smid per block, and an atomic count of the
blocks running at once); and a paused job's work waits and then completes exactly.
"""
from __future__ import annotations

import subprocess
import threading
import time

import pytest
from e2e_helpers import build_cuda, emulator_server, job_command, job_env, run_job  # noqa: F401
from server_harness import ServerProcess

from tally import paths
from tally.backends.emulator import EmulatorBackend
from tally.cli.server_main import query_status
from tally.server.server import TallyServer
from tally.server.server_config import ServerConfig

BLOCKS, SPIN_US = 64, 1000      # 64 blocks that each hold their worker for 1 ms


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "sm_share.cu")


def measured(job) -> tuple[int, int]:
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.value("results") == "ok" and job.value("smid_in_range") == "1", job.stdout
    assert job.value("sm_count") == "8"
    return int(job.value("sms_used")), int(job.value("peak_blocks"))


def test_a_best_effort_job_at_25_percent_uses_at_most_a_quarter_of_the_workers(emulator_server, program):
    capped = run_job(emulator_server.socket, program, BLOCKS, SPIN_US, priority="best-effort", sm_percent=25)
    sms_used, peak = measured(capped)
    assert 1 <= sms_used <= 2 and 1 <= peak <= 2
    # The same job without a share spreads over the workers: the measurement can fail.
    whole = run_job(emulator_server.socket, program, BLOCKS, SPIN_US, priority="best-effort")
    sms_used, peak = measured(whole)
    assert sms_used >= 3 and peak >= 3
    assert "SM share 25% (2 SMs)" in emulator_server.process.log()


def test_the_jobs_own_mps_percentage_is_its_share(emulator_server, program):
    job = run_job(emulator_server.socket, program, BLOCKS, SPIN_US, env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "12.5"})
    sms_used, peak = measured(job)
    assert sms_used == 1 and peak == 1
    # tally-run's flag wins over the MPS setting
    job = run_job(emulator_server.socket, program, BLOCKS, SPIN_US, sm_percent=25,
                  env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "12.5"})
    sms_used, _ = measured(job)
    assert sms_used == 2


def test_the_servers_best_effort_share_applies_to_jobs_that_ask_for_none_or_more(tmp_path, program):
    server = ServerProcess(tmp_path / "s.sock", backend="emulator", extra_args=("--be-sm-percent", "25"))
    try:
        for asked in (None, 75):
            sms_used, peak = measured(run_job(server.socket_path, program, BLOCKS, SPIN_US, sm_percent=asked))
            assert sms_used <= 2 and peak <= 2
        # a high-priority job is not a best-effort one: the server's share does not apply
        sms_used, _ = measured(run_job(server.socket_path, program, BLOCKS, SPIN_US, priority="high"))
        assert sms_used >= 3
    finally:
        server.stop()


@pytest.mark.parametrize("flag, env, words", [
    (("--sm-percent", "0"), {}, "SM share '0' is not a percentage"),
    (("--sm-percent", "150"), {}, "SM share '150' is not a percentage"),
    (("--sm-percent", "lots"), {}, "SM share 'lots' is not a percentage"),
    ((), {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "half"}, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='half'"),
])
def test_a_bad_share_is_refused_by_tally_run_with_the_reason(emulator_server, program, flag, env, words):
    cmd = job_command(emulator_server.socket, program, 1, 0)
    cmd[cmd.index("--"):cmd.index("--")] = list(flag)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**job_env(), **env}, check=False)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert emulator_server.alive()


def test_a_bad_share_in_the_jobs_environment_is_refused_by_the_client(emulator_server, program):
    """Without tally-run (a pod whose environment the device plugin set), the client
    itself refuses a malformed TALLY_SM_PERCENT, saying what to set."""
    env = {**job_env(), "TALLY_SERVER": str(emulator_server.socket), "TALLY_SM_PERCENT": "150",
           "LD_LIBRARY_PATH": str(paths.LIB_DIR), "LD_PRELOAD": str(paths.CLIENT_LIBRARY)}
    r = subprocess.run([str(program), "1", "0"], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert r.returncode != 0
    assert "TALLY_SM_PERCENT='150' is not an SM share" in r.stderr, r.stderr
    assert "tally-run --sm-percent" in r.stderr


def test_a_paused_job_waits_and_its_results_stay_exact(tmp_path, program):
    """Through the executor's API (the operator's command calls it): the job's work
    is held while paused, nothing is lost, and it completes exactly once resumed."""
    config = ServerConfig(socket_path=tmp_path / "pause.sock")
    server = TallyServer(config, EmulatorBackend(printf_to_stdout=False))
    server.bind()
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        job = subprocess.Popen(job_command(config.socket_path, program, 16, 200, 10, "wait", priority="best-effort"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
                               env=job_env())
        assert job.stdout.readline().strip() == "ready"
        (client_id,) = server.sessions
        server.executor.pause_client(client_id)
        job.stdin.write("go\n")
        job.stdin.flush()
        time.sleep(1.5)
        assert job.poll() is None                           # its first synchronization waits
        held = server.executor.counters()["clients"][client_id]
        assert held["paused"] and held["kernels"] == 0 and held["ops_queued"] >= 1
        server.executor.resume_client(client_id)
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, out + err
        assert "results=ok" in out and "sms_used=" in out
        assert query_status(config.socket_path)["server"]["scheduler"]["kernels"] >= 10
    finally:
        server.stop()
        serving.join(30)


def test_dynamic_sm_moves_a_best_effort_job_to_the_floor_while_the_high_priority_job_is_busy(tmp_path, program):
    """The whole wiring on the emulator: the sampler reads the executor's accounting,
    dynamic SM lowers the waiting best-effort job's share while a high-priority job
    keeps the device busy and gives it back afterwards; compute control reports its
    hold; the status shows both."""
    server = ServerProcess(tmp_path / "dyn.sock", backend="emulator",
                           extra_args=("--dynamic-sm", "--be-util-target", "0.9", "--sample-period-ms", "20"))
    try:
        be = subprocess.Popen(job_command(server.socket_path, program, 8, 0, 1, "wait", priority="best-effort"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
                              env=job_env())
        assert be.stdout.readline().strip() == "ready"

        def best_effort(status):
            return next(c for c in status["clients"] if c["priority"] == "best-effort")

        assert best_effort(query_status(server.socket_path))["sm_granted"] == 8
        hp = subprocess.Popen(job_command(server.socket_path, program, 64, 2000, 60, priority="high"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=job_env())
        floor = None
        busiest = 0.0      # one 20 ms sample may see no kernel end on a loaded machine: keep the peak
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and hp.poll() is None and (floor is None or busiest <= 50):
            status = query_status(server.socket_path)
            sample = status["server"]["levers"].get("device_sample") or {}
            busiest = max(busiest, sample.get("hp_sm_active_percent") or 0.0)
            if floor is None and best_effort(status)["sm_granted"] == 1:          # 10% of 8 SMs, at least one
                floor = status
            time.sleep(0.02)
        assert floor is not None, server.log()[-3000:]
        levers = floor["server"]["levers"]
        assert floor["server"]["dynamic_sm"] and levers["dynamic_sm"]["best_effort_percent"] == 10.0
        assert floor["server"]["be_util_target"] == 0.9 and "hold" in levers["compute_control"]
        assert busiest > 50
        out, err = hp.communicate(timeout=300)
        assert hp.returncode == 0 and "results=ok" in out, out + err
        deadline = time.monotonic() + 30
        while best_effort(query_status(server.socket_path))["sm_granted"] != 8:
            assert time.monotonic() < deadline, "the best-effort job never got the device back"
            time.sleep(0.05)
        out, err = be.communicate("go\n", timeout=120)
        assert be.returncode == 0 and "results=ok" in out, out + err
        assert "Traceback" not in server.log()
    finally:
        server.stop()
