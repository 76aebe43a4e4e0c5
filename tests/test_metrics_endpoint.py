"""tally-server --metrics-port: /metrics fetched over HTTP from a real server on the
emulator while an nvcc-compiled job runs under tally-run, parsed with
prometheus_client's own text parser; and the flag's bad inputs."""
from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from e2e_helpers import build_cuda, finish, idle, job_command, job_env
from prometheus_client.parser import text_string_to_metric_families
from server_harness import ServerProcess

from tally.cli.server_main import query_status

QUOTA = 64 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, list]:
    """{sample name: [(labels, value), ...]} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def one(samples: dict, name: str, **labels) -> float:
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == v2 for k, v2 in labels.items())]
    assert len(found) == 1, f"{name}{labels}: {samples.get(name)}"
    return found[0]


def start_metrics_server(*flags: str) -> tuple[ServerProcess, int]:
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="tally-metrics-"))
    return ServerProcess(directory / "server.sock", backend="emulator",
                         extra_args=("--metrics-port", str(port), *flags)), port


@pytest.fixture
def metrics_server():
    # Without SysProbe nothing samples the device between scrapes, so each scrape takes its
    # own sample, covering the time since the last one: what these figures are checked against.
    # (With SysProbe on, the default, a scrape shows its sampler's latest sample: see
    # test_health_and_evictions_with_sysprobe_on.)
    process, port = start_metrics_server("--no-health")
    yield process, port
    process.stop()


def start_pod_job(socket_path, program, **options) -> subprocess.Popen:
    """pod_job.cu under tally-run, once it has allocated, computed and waits for a line."""
    job = subprocess.Popen(job_command(socket_path, program, **options), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=job_env())
    first = job.stdout.readline()
    assert first.startswith("total=") and " wrong=0 " in first, first + job.stderr.read()
    assert job.stdout.readline().strip() == "ready"
    return job


def end(job: subprocess.Popen) -> None:
    job.stdin.write("done\n")
    job.stdin.flush()
    done = finish(job)
    assert done.returncode == 0, done.stdout + done.stderr


def test_metrics_show_a_running_job_and_forget_it_when_it_leaves(nvcc, metrics_server):
    process, port = metrics_server
    program = build_cuda(nvcc, "pod_job.cu")
    job = start_pod_job(process.socket_path, program, priority="high", quota="64M")
    try:
        status = query_status(process.socket_path)
        (client,) = status["clients"]
        samples = scrape(port)
        me = {"client": str(client["client_id"]), "pid": str(client["pid"]), "priority": "high",
              "program": client["program"]}
        # three 16 KiB buffers (the over-quota allocation was refused)
        assert one(samples, "tally_client_memory_used_bytes", **me) == client["memory_used"] >= 3 * 16384
        assert one(samples, "tally_client_memory_quota_bytes", **me) == QUOTA
        assert one(samples, "tally_client_kernels_total", **me) == 1
        assert one(samples, "tally_client_sm_share_percent", **me) == 100.0        # the whole device
        assert one(samples, "tally_client_sm_granted", **me) == status["server"]["sm_count"]
        assert one(samples, "tally_client_paused", **me) == 0
        assert one(samples, "tally_clients", priority="high") == 1
        assert one(samples, "tally_clients", priority="best-effort") == 0
        assert one(samples, "tally_kernels_total", mode="whole") >= 1
        assert one(samples, "tally_hp_queueing_delay_seconds_count") == 1      # its one kernel
        assert one(samples, "tally_hp_queueing_delay_seconds_bucket", le="+Inf") == 1
        assert 0 <= one(samples, "tally_hp_queueing_delay_seconds_sum") < 1.0
        total_mib = status["server"]["memory_total"] / (1 << 20)
        used_mib = one(samples, "DCGM_FI_DEV_FB_USED")
        assert used_mib >= client["memory_used"] / (1 << 20)
        assert one(samples, "DCGM_FI_DEV_FB_FREE") == pytest.approx(total_mib - used_mib)
        assert one(samples, "tally_device_faults_total") == 0
        # tally's own accounting since the server started: its kernel kept some SMs busy for a while,
        # and all of that was high-priority work
        busy = one(samples, "DCGM_FI_PROF_SM_ACTIVE")
        assert 0 < busy <= 1
        assert one(samples, "tally_hp_sm_active_ratio") == pytest.approx(busy)
        assert 0 < one(samples, "DCGM_FI_DEV_GPU_UTIL") <= 100
    finally:
        end(job)
    deadline = time.monotonic() + 30
    while not idle(query_status(process.socket_path)):
        assert time.monotonic() < deadline, "the job's memory was not freed"
        time.sleep(0.1)
    samples = scrape(port)
    assert "tally_client_memory_used_bytes" not in samples       # the family is there, with no job in it
    assert one(samples, "tally_clients", priority="high") == 0
    assert one(samples, "DCGM_FI_DEV_FB_USED") == 0
    assert one(samples, "DCGM_FI_PROF_SM_ACTIVE") == 0          # no kernel since the last scrape
    assert one(samples, "tally_hp_queueing_delay_seconds_count") == 1      # counters outlive the job


def test_a_best_effort_job_shows_its_sm_share_next_to_the_high_priority_job(nvcc):
    process, port = start_metrics_server("--be-sm-percent", "25")
    program = build_cuda(nvcc, "pod_job.cu")
    try:
        online = start_pod_job(process.socket_path, program, priority="high")
        batch = start_pod_job(process.socket_path, program, priority="best-effort")
        try:
            status = query_status(process.socket_path)
            samples = scrape(port)
            by_priority = {c["priority"]: c for c in status["clients"]}
            for priority, share in (("high", 100.0), ("best-effort", 25.0)):
                c = by_priority[priority]
                me = {"client": str(c["client_id"]), "pid": str(c["pid"]), "priority": priority}
                assert one(samples, "tally_client_sm_share_percent", **me) == share
                assert one(samples, "tally_client_sm_granted", **me) == c["sm_granted"]
                assert one(samples, "tally_client_kernels_total", **me) == 1
            sms = status["server"]["sm_count"]
            assert by_priority["high"]["sm_granted"] == sms and by_priority["best-effort"]["sm_granted"] == sms // 4
            assert one(samples, "tally_clients", priority="high") == 1
            assert one(samples, "tally_clients", priority="best-effort") == 1
            assert sum(v for _, v in samples["tally_kernels_total"]) == 2
            assert one(samples, "tally_hp_queueing_delay_seconds_count") == 1     # the best-effort kernel is not in it
        finally:
            end(online)
            end(batch)
    finally:
        process.stop()


def test_a_metrics_port_in_use_stops_the_server_at_startup_with_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        sock = tmp_path / "server.sock"
        r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--backend", "null", "--socket",
                            str(sock), "--metrics-port", str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"cannot serve /metrics on 127.0.0.1:{port}: Address already in use" in r.stderr
    assert "choose another --metrics-port" in r.stderr
    assert not sock.exists()          # it never started listening for jobs


def test_an_address_not_of_this_host_is_refused_at_startup(tmp_path):
    sock = tmp_path / "server.sock"
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--backend", "null", "--socket", str(sock),
                        "--metrics-port", str(free_port()), "--metrics-host", "192.0.2.1"],   # TEST-NET-1
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot serve /metrics on 192.0.2.1:" in r.stderr
    assert "Cannot assign requested address" in r.stderr and not sock.exists()


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_bad_metrics_port_is_refused(tmp_path, port):
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--backend", "null", "--socket",
                        str(tmp_path / "s.sock"), "--metrics-port", port], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"{port!r} is not a TCP port (0 to 65535)" in r.stderr


def test_health_and_evictions_with_sysprobe_on(nvcc):
    process, port = start_metrics_server()
    program = build_cuda(nvcc, "pod_job.cu")
    try:
        job = start_pod_job(process.socket_path, program, priority="best-effort")
        (client,) = query_status(process.socket_path)["clients"]
        samples = scrape(port)
        assert one(samples, "tally_health_state", state="healthy") == 1
        assert one(samples, "tally_health_state", state="overlimit") == 0
        r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "evict", "--client",
                            str(client["client_id"]), "--reason", "testing /metrics", "--socket",
                            str(process.socket_path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        samples = scrape(port)
        assert one(samples, "tally_evictions_total", reason="operator") == 1
        evicted = {"client": str(client["client_id"]), "priority": "best-effort"}
        assert one(samples, "tally_client_memory_used_bytes", **evicted) == 0
        job.stdin.write("done\n")
        job.stdin.flush()
        done = finish(job)
        # Its work was done when it was evicted and it asked for nothing more: its own 0 stands.
        assert done.returncode == 0 and "after its work was done" in done.stderr, done.stderr
    finally:
        process.stop()
