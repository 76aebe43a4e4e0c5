"""SysProbe wired into the server (tally/server/device_health.py): a recorded trace
replayed through the server's own sampler drives its health through every
transition, back-off growth included; the server evicts best-effort jobs in
SysProbe's order (each told why, its memory freed), refuses best-effort
handshakes during the back-off with the reason, admits high-priority jobs
throughout, and shows it all in its status. One trace sample per sampler tick,
on a null-backend server in this process, so every step is checked in order."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from server_harness import PyClient, ServerProcess

from tally import protocol
from tally.backends.null import NullBackend
from tally.cli.server_main import query_status
from tally.cluster.health_config import load_health_config
from tally.protocol.messages_generated import Evicted
from tally.server.server import TallyServer
from tally.server.server_config import ServerConfig

DATA = Path(__file__).parent / "data" / "health"
MIB = 1 << 20
DEVICE_UNAVAILABLE = 46


def trace_config():
    """health.toml (the traces' config), sampled only when the test says so."""
    config = load_health_config(DATA / "health.toml")
    return dataclasses.replace(config, timing=dataclasses.replace(config.timing, sample_interval_s=3600.0))


@pytest.fixture
def traced_server(tmp_path):
    config = ServerConfig(socket_path=tmp_path / "s.sock", health_config=trace_config(),
                          metrics_trace=DATA / "repeated_overlimit.jsonl", metrics_trace_realtime=False,
                          max_hp_jobs=2)
    server = TallyServer(config, NullBackend())
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stop()
    thread.join(10)


def replay_until(server, t: float) -> None:
    """Feed trace samples through the server's sampler up to time t."""
    sampler = server.levers.sampler
    while sampler.latest.t < t:
        sampler.tick()


def job(server, name: str, mib: int, priority=protocol.Priority.BEST_EFFORT) -> PyClient:
    c = PyClient(server.config.socket_path, priority=priority, program=name)
    assert c.status == protocol.HandshakeStatus.OK, c.message
    assert c.call("MemAlloc", bytes=mib * MIB)[0] == "MemAllocReply"
    return c


def states(server) -> list[tuple[float, str, str]]:
    return [(tr["t"], tr["from"], tr["to"]) for tr in server.status().health["transitions"]]


def evicted_record(c: PyClient) -> str:
    """The Evicted record the job was sent (after whatever came before it)."""
    for _ in range(8):
        got = c.segment.completion_ring.pop(5)
        assert got is not None, "no Evicted record"
        kind, tag, payload = got
        if kind == Evicted.KIND:
            record = Evicted.decode(payload)
            assert tag == 0 and record.status == DEVICE_UNAVAILABLE
            return bytes(record.tail).decode()
    raise AssertionError("no Evicted record among the job's completions")


def wait_released(server, name: str) -> dict:
    deadline = time.monotonic() + 10
    while True:
        (c,) = [c for c in server.status().clients if c.program == name]
        if c.memory_used == 0 or time.monotonic() > deadline:
            return c
        time.sleep(0.02)


def test_a_replayed_trace_drives_every_transition_and_the_server_acts_on_them(traced_server):
    server = traced_server
    assert states(server) == [(0.0, "init", "healthy")]          # the first sample, before anyone attached
    old, mid, new = job(server, "old", 64), job(server, "mid", 16), job(server, "new", 8)
    serve = job(server, "serve", 32, protocol.Priority.HIGH)

    replay_until(server, 39)
    assert states(server)[-1] == (20.0, "healthy", "unhealthy")
    refused = PyClient(server.config.socket_path, program="late")
    assert refused.status == protocol.HandshakeStatus.QUOTA_UNAVAILABLE and "device unhealthy" in refused.message
    refused.close()

    # t=40: power over its limit for 20 s -> overlimit; the newest best-effort job is evicted
    # (heat and power: newest first), best-effort jobs refused for backoff_s = 20 s.
    replay_until(server, 40)
    health = server.status().health
    assert (health["state"], states(server)[-1]) == ("overlimit", (40.0, "unhealthy", "overlimit"))
    assert health["backoff_until_s"] - health["transitions"][-1]["at"] == pytest.approx(20.0)
    assert "power_percent_of_limit" in health["reason"]
    reason = evicted_record(new)
    assert reason.startswith("SysProbe: device over its limit: power_percent_of_limit")
    assert new.segment.evicted
    listed = wait_released(server, "new")
    assert (listed.state, listed.evicted, listed.memory_used) == ("evicted", reason, 0)
    name, fields, why = new.call("MemAlloc", bytes=MIB)
    assert name == "Error" and fields["status"] == DEVICE_UNAVAILABLE and reason in why.decode()
    during = PyClient(server.config.socket_path, program="late")
    assert during.status == protocol.HandshakeStatus.QUOTA_UNAVAILABLE
    assert during.message.startswith("SysProbe: device overlimit")
    during.close()
    hp = PyClient(server.config.socket_path, priority=protocol.Priority.HIGH, program="serve2")
    assert hp.status == protocol.HandshakeStatus.OK                  # never refused by SysProbe
    hp.close()

    # t=45: still over -> one more (evict_interval_s = 5), the next newest.
    replay_until(server, 45)
    assert evicted_record(mid).startswith("SysProbe: device over its limit")
    assert server.status().evictions == {"overlimit": 2}

    # t=60: the back-off is over and the readings are within: healthy, best-effort jobs admitted again.
    replay_until(server, 60)
    assert states(server)[-1] == (60.0, "overlimit", "healthy")
    assert server.status().health["backoff_until_s"] is None
    again = job(server, "again", 4)

    # t=110: the second recent entry doubles the back-off (40 s); the newest job goes first.
    replay_until(server, 110)
    health = server.status().health
    assert states(server)[-2:] == [(90.0, "healthy", "unhealthy"), (110.0, "unhealthy", "overlimit")]
    assert health["backoff_until_s"] - health["transitions"][-1]["at"] == pytest.approx(40.0)
    evicted_record(again)
    replay_until(server, 115)
    evicted_record(old)
    replay_until(server, 120)                # nothing best-effort is left to evict: nothing happens
    assert server.status().evictions == {"overlimit": 4}
    assert [c.program for c in server.status().clients if c.state != "evicted"] == ["serve"]

    # t=190: the third entry: 80 s capped at backoff_max_s = 60; power stays over past its end,
    # so overlimit lasts until 261, then unhealthy, then healthy at 272.
    replay_until(server, 190)
    health = server.status().health
    assert health["backoff_until_s"] - health["transitions"][-1]["at"] == pytest.approx(60.0)
    replay_until(server, 300)
    assert states(server)[-5:] == [(150.0, "overlimit", "healthy"), (170.0, "healthy", "unhealthy"),
                                   (190.0, "unhealthy", "overlimit"), (261.0, "overlimit", "unhealthy"),
                                   (272.0, "unhealthy", "healthy")]
    # t=490: the earlier entries are older than overlimit_history_s: the back-off is backoff_s again.
    replay_until(server, 490)
    health = server.status().health
    assert health["backoff_until_s"] - health["transitions"][-1]["at"] == pytest.approx(20.0)
    replay_until(server, 510)
    assert server.status().health["state"] == "healthy"
    assert len(server.status().health["transitions"]) == 10          # the last ten are kept in the record
    assert server.status().health["evictions"] == 4

    # The high-priority job was never touched.
    assert serve.call("Ping", value=7)[1]["value"] == 7
    (hp_status,) = [c for c in server.status().clients if c.program == "serve"]
    assert (hp_status.state, hp_status.memory_used) == ("running", 32 * MIB)
    for c in (old, mid, new, again, serve):
        c.close()


def test_largest_memory_goes_first_when_memory_is_over_its_limit(tmp_path):
    config = ServerConfig(socket_path=tmp_path / "m.sock", health_config=trace_config(),
                          metrics_trace=DATA / "memory_overlimit.jsonl", metrics_trace_realtime=False)
    server = TallyServer(config, NullBackend())
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        jobs = [job(server, "tiny", 4), job(server, "small", 8), job(server, "large", 96), job(server, "medium", 32)]
        tiny, small, large, medium = jobs
        replay_until(server, 45)
        assert server.status().health["state"] == "overlimit"
        assert "memory_used_percent" in evicted_record(large)
        replay_until(server, 50)
        assert "memory_used_percent" in evicted_record(medium)
        replay_until(server, 55)
        assert "memory_used_percent" in evicted_record(small)
        replay_until(server, 70)            # under the limit from t=56: the smallest job stays
        (kept,) = [c for c in server.status().clients if c.state != "evicted"]
        assert kept.program == "tiny" and server.status().health["state"] == "healthy"
        for c in jobs:
            c.close()
    finally:
        server.stop()
        thread.join(10)


def test_sighup_reloads_the_health_config_and_a_bad_file_keeps_the_old_one(tmp_path, caplog):
    path = tmp_path / "health.toml"
    path.write_text("[timing]\nsample_interval_s = 2\nwindow_s = 5\noverlimit_after_s = 10\n")
    config = ServerConfig(socket_path=tmp_path / "h.sock", health_config=load_health_config(path),
                          health_config_path=path)
    server = TallyServer(config, NullBackend())
    try:
        assert server.levers.sampler.period_s == 2.0
        path.write_text("[timing]\nsample_interval_s = 0.5\n[limits]\nmemory_used_percent = 99\n")
        assert server.health.reload()
        assert server.health.probe.config.limits.memory_used_percent == 99.0
        assert server.levers.sampler.period_s == 0.5
        assert server.status().health["config"] == str(path)
        path.write_text("[limits]\nmemory_used_percent = 150\n")
        assert not server.health.reload()
        assert "SysProbe keeps the config it had" in caplog.text and "out of range" in caplog.text
        assert server.health.probe.config.limits.memory_used_percent == 99.0
    finally:
        server._shutdown_now()


def test_without_sysprobe_there_is_no_health_record(tmp_path):
    server = TallyServer(ServerConfig(socket_path=tmp_path / "n.sock", health=False), NullBackend())
    try:
        assert server.status().health is None and server.health is None
        assert server.levers.sampler is None              # nothing reads samples
    finally:
        server._shutdown_now()


def test_on_the_emulators_accounting_the_defaults_leave_utilization_alone(tmp_path):
    # A CPU emulator busy all the time is not a sick GPU: the default config does not
    # warn on utilization where tally's own accounting measures the device.
    server = TallyServer(ServerConfig(socket_path=tmp_path / "d.sock"), NullBackend())
    try:
        assert server.status().health["state"] == "healthy"
        config = server.health.probe.config
        assert config.thresholds.gpu_util_percent == 100.0 and config.limits.memory_used_percent == 98.0
        assert "utilization warning is off" in server.status().health["config"]
    finally:
        server._shutdown_now()


def serve(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--backend", "null", "--socket",
                           str(tmp_path / "cli.sock"), *flags], capture_output=True, text=True, timeout=60)


def test_bad_health_flags_are_refused_before_the_server_starts(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nmemory_used_percent = 90\n[thresholds]\nmemory_used_percent = 95\n")
    r = serve(tmp_path, "--health-config", str(bad))
    assert r.returncode == 2 and "[limits] memory_used_percent = 90 is below [thresholds]" in r.stderr
    r = serve(tmp_path, "--health-config", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = serve(tmp_path, "--no-health", "--health-config", str(bad))
    assert r.returncode == 2 and "contradict" in r.stderr
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "--backend", "null", "--socket",
                        str(tmp_path / "cli.sock")], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "TALLY_HEALTH_CONFIG": str(bad)})        # the DaemonSet's way
    assert r.returncode == 2 and f"health config {bad}: [limits] memory_used_percent = 90" in r.stderr
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"t": 2}\n{"t": 1}\n')
    r = serve(tmp_path, "--metrics-trace", str(trace))
    assert r.returncode == 2 and "--metrics-trace" in r.stderr and "goes back" in r.stderr
    assert not (tmp_path / "cli.sock").exists()


def test_sighup_reloads_a_running_servers_health_config(tmp_path):
    path = tmp_path / "health.toml"
    path.write_text("[limits]\ntemperature_c = 95\n")
    server = ServerProcess(tmp_path / "hup.sock", backend="null", extra_args=("--health-config", str(path)))
    try:
        path.write_text("[limits]\ntemperature_c = 97\n")
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while f"health config reloaded from {path}" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        path.write_text("not = [toml")
        server.proc.send_signal(signal.SIGHUP)
        while "not valid TOML" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        status = query_status(server.socket_path)
        assert status["server"]["health"]["state"] == "healthy" and status["server"]["health"]["config"] == str(path)
        table = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "status", "--socket",
                                str(server.socket_path)], capture_output=True, text=True, timeout=60).stdout
        assert "health   healthy since " in table and "init -> healthy" in table
    finally:
        assert server.stop() == 0
