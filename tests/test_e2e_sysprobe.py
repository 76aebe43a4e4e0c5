"""SysProbe end to end on the emulator: a best-effort job whose device memory keeps
growing drives the device over its (small, for the test) memory limit; SysProbe
goes healthy -> unhealthy -> overlimit and evicts it, tally-run exits 75 naming the
reason, another best-effort job is refused during the back-off (tally-run exits
75 too), the high-priority job finishes with exact results, the device is healthy
again once the back-off is over, and nothing is left behind."""
from __future__ import annotations

import time
from pathlib import Path

from e2e_helpers import build_cuda, emulator_server_process, finish, idle, run_job, start_job

MIB = 1 << 20
EX_TEMPFAIL = 75
DEVICES_UNAVAILABLE = 46
# The emulator has 16 GiB: a warning over 0.5% (82 MiB), a limit at 1% (164 MiB).
HEALTH = """
[thresholds]
memory_used_percent = 0.5
[limits]
memory_used_percent = 1
[timing]
sample_interval_s = 0.1
window_s = 0.3
overlimit_after_s = 0.6
backoff_s = 6
backoff_max_s = 6
evict_interval_s = 1
"""


def test_a_growing_best_effort_job_is_evicted_and_the_high_priority_job_carries_on(nvcc, tmp_path):
    config = tmp_path / "health.toml"
    config.write_text(HEALTH)
    server = emulator_server_process("--health-config", str(config))
    try:
        status = server.status()
        assert status["server"]["health"]["state"] == "healthy"
        hp = start_job(server.socket, build_cuda(nvcc, "paused_job.cu"), priority="high")
        assert hp.stdout.readline().strip() == "ready"
        grower = start_job(server.socket, build_cuda(nvcc, "growing_job.cu"), 16, 100, 2048)
        grown = finish(grower, timeout=120)

        assert grown.returncode == EX_TEMPFAIL, grown.stdout + grown.stderr
        last = grown.stderr.splitlines()[-1]
        assert last.startswith("tally-run: evicted by tally-server: SysProbe: device over its limit: "
                               "memory_used_percent"), grown.stderr
        held = [int(line.split("=")[1]) for line in grown.stdout.split() if line.startswith("held=")]
        assert 164 <= held[-1] < 2048                  # over the limit, and stopped long before its goal
        assert grown.stdout.split()[-1] == f"error={DEVICES_UNAVAILABLE}"

        status = server.status()
        health = status["server"]["health"]
        assert [(tr["from"], tr["to"]) for tr in health["transitions"]][:3] == [
            ("init", "healthy"), ("healthy", "unhealthy"), ("unhealthy", "overlimit")]
        assert health["transitions"][2]["kind"] == "limit" and "memory_used_percent" in health["transitions"][2]["cause"]
        assert status["server"]["evictions"] == {"overlimit": 1} and health["evictions"] == 1
        log = server.process.log()
        assert "SysProbe evicts client 2 (pid" in log and "largest device memory first" in log
        assert "health unhealthy -> overlimit" in log

        # During the back-off (6 s from the eviction) another best-effort job is told to come back later.
        assert health["state"] == "overlimit" and health["backoff_until_s"] > time.time()
        refused = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 100)
        assert refused.returncode == EX_TEMPFAIL, refused.stdout + refused.stderr
        assert "tally-run: tally-server admits no best-effort job now: SysProbe: the device is overlimit" \
            in refused.stderr and "its back-off ends in" in refused.stderr

        hp.stdin.write("go\n")
        hp.stdin.flush()
        done = finish(hp)
        assert done.returncode == 0 and done.stdout.split() == ["launched", "synced", "wrong=0"], done.stderr

        # The back-off over and the memory freed: healthy again, best-effort jobs run.
        server.wait_for(lambda s: s["server"]["health"]["state"] == "healthy", timeout=30,
                        what="the device to be healthy again")
        after = run_job(server.socket, build_cuda(nvcc, "vector_add.cu"), 100)
        assert after.returncode == 0 and after.ints("n", "wrong") == [100, 0], after.stdout + after.stderr
        server.wait_for(idle, what="every job's memory to be freed")
        assert not list(Path("/dev/shm").glob(f"tally-{server.process.proc.pid}-*"))
    finally:
        server.stop()
