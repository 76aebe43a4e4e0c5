"""tally-k8s's node commands: one tally-server per GPU, and installing the client library."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tally import paths
from tally.cli.server_main import query_status


def test_servers_starts_one_per_gpu_and_stops_on_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tally.cli.k8s_main", "servers", "--servers-dir", str(tmp_path),
                             "--gpus", "2", "--", "--backend", "null"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        sockets = [tmp_path / f"gpu{n}" / "server.sock" for n in (0, 1)]
        deadline = time.monotonic() + 60
        while not all(s.exists() for s in sockets):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
            time.sleep(0.1)
        assert [query_status(s)["server"]["device"] for s in sockets] == [0, 1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_servers_read_the_health_configmap_and_reload_it_on_sighup(tmp_path):
    # The DaemonSet names the mounted ConfigMap in TALLY_HEALTH_CONFIG; SIGHUP to tally-k8s reaches every server.
    config = tmp_path / "health.toml"
    config.write_text("[limits]\ntemperature_c = 95\n")
    servers = tmp_path / "servers"
    proc = subprocess.Popen([sys.executable, "-m", "tally.cli.k8s_main", "servers", "--servers-dir", str(servers),
                             "--gpus", "2", "--", "--backend", "null"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "TALLY_HEALTH_CONFIG": str(config)})
    try:
        sockets = [servers / f"gpu{n}" / "server.sock" for n in (0, 1)]
        deadline = time.monotonic() + 60
        while not all(s.exists() for s in sockets):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
            time.sleep(0.1)
        assert [query_status(s)["server"]["health"]["config"] for s in sockets] == [str(config)] * 2
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout.read().count(f"health config reloaded from {config}") == 2
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_dying_server_stops_the_rest_with_a_message(tmp_path):
    # GPU 1's server cannot listen (a folder where its socket must be): the container must exit and be restarted
    (tmp_path / "gpu1" / "server.sock").mkdir(parents=True)
    r = subprocess.run([sys.executable, "-m", "tally.cli.k8s_main", "servers", "--servers-dir", str(tmp_path),
                        "--gpus", "2", "--", "--backend", "null"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "the tally-server of GPU 1 exited (2); stopping the others so the container restarts" in r.stderr


def test_servers_folder_that_cannot_be_made(tmp_path):
    (tmp_path / "gpu0").write_text("not a folder")
    r = subprocess.run([sys.executable, "-m", "tally.cli.k8s_main", "servers", "--servers-dir", str(tmp_path),
                        "--gpus", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"cannot create {tmp_path / 'gpu0'}" in r.stderr


def test_bad_gpu_count(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tally.cli.k8s_main", "servers", "--servers-dir", str(tmp_path),
                        "--gpus", "many"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "--gpus 'many': give a count >= 1 or auto" in r.stderr


def test_install_client_copies_the_library(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tally.cli.k8s_main", "install-client", "--to", str(tmp_path / "lib")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "lib" / "libcuda.so.1").read_bytes() == paths.CLIENT_LIBRARY.read_bytes()
