import argparse
import subprocess
import sys

import pytest

from tally import paths
from tally.cli.run_main import job_environment, mps_share_problem, parse_quota, parse_sm_percent, quota_too_large


@pytest.mark.parametrize("text,expected", [
    ("1073741824B", "1073741824"), ("8G", str(8 << 30)), ("512M", str(512 << 20)), ("1.5GiB", str(3 << 29)),
    ("50%", "50%"), ("12.5%", "12.5%"),
])
def test_quota_forms(text, expected):
    assert parse_quota(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "0", "150%", "0%", "-5G"])
def test_bad_quota_is_a_clear_error(text):
    with pytest.raises(argparse.ArgumentTypeError, match="memory quota"):
        parse_quota(text)


def test_a_bare_number_is_refused_naming_the_units():
    # "40" once meant 40 bytes, silently: the job then failed as if the device were full.
    with pytest.raises(argparse.ArgumentTypeError) as e:
        parse_quota("40")
    assert "has no unit" in str(e.value) and "40B" in str(e.value) and "40G" in str(e.value)


def test_a_quota_above_the_device_is_refused():
    status = {"server": {"memory_total": 16 << 30}}
    assert quota_too_large(str(8 << 30), status) is None
    assert quota_too_large("50%", status) is None
    message = quota_too_large(str(100 << 30), status)
    assert "100.00 GiB is more than the device has (16.00 GiB)" in message


def test_environment_puts_our_library_first():
    env = job_environment({"LD_LIBRARY_PATH": "/usr/lib", "LD_PRELOAD": "libfoo.so", "PATH": "/bin"},
                          "/tmp/s.sock", "high", "50%")
    assert env["LD_LIBRARY_PATH"].split(":") == [str(paths.LIB_DIR), "/usr/lib"]
    assert env["LD_PRELOAD"].split(":") == [str(paths.CLIENT_LIBRARY), "libfoo.so"]
    assert env["TALLY_SERVER"] == "/tmp/s.sock"
    assert env["TALLY_PRIORITY"] == "high"
    assert env["TALLY_MEMORY_QUOTA"] == "50%"
    assert env["PATH"] == "/bin"


def test_the_sm_share_goes_to_the_job_and_a_stale_one_does_not():
    env = job_environment({"TALLY_SM_PERCENT": "80"}, "/tmp/s.sock", "best-effort", None, 25.0)
    assert env["TALLY_SM_PERCENT"] == "25"
    env = job_environment({"TALLY_SM_PERCENT": "80", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"}, "/tmp/s.sock",
                          "best-effort", None)
    assert "TALLY_SM_PERCENT" not in env and env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"


@pytest.mark.parametrize("text, value", [("25", 25.0), ("12.5", 12.5), ("1", 1.0), ("100", 100.0)])
def test_sm_share_forms(text, value):
    assert parse_sm_percent(text) == value


@pytest.mark.parametrize("text", ["0", "0.5", "101", "-5", "25%", "nan", "inf", ""])
def test_a_bad_sm_share_is_a_clear_error(text):
    with pytest.raises(argparse.ArgumentTypeError, match="not a percentage of the device's SMs from 1 to 100"):
        parse_sm_percent(text)


def test_the_jobs_mps_share_is_checked_before_the_job_starts():
    assert mps_share_problem({}) is None
    assert mps_share_problem({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30"}) is None
    problem = mps_share_problem({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "300"})
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='300'" in problem and "--sm-percent" in problem


def test_without_a_server_tally_run_says_how_to_start_one(tmp_path):
    sock = tmp_path / "none.sock"
    r = subprocess.run([sys.executable, "-m", "tally.cli.run_main", "--server", str(sock), "--", "true"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "no tally-server answers" in r.stderr
    assert f"tally-server --socket {sock}" in r.stderr


def test_status_without_a_server_exits_nonzero(tmp_path):
    sock = tmp_path / "none.sock"
    r = subprocess.run([sys.executable, "-m", "tally.cli.server_main", "status", "--socket", str(sock)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "no tally-server answers" in r.stderr
