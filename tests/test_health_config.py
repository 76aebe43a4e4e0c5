"""SysProbe's health config: the deployed ConfigMap's TOML loads and matches the
documented defaults; every kind of bad file is refused with a message naming
the file and the key."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tally.cluster.health_config import (DEFAULT_FATAL_XIDS, HealthConfig, HealthConfigError, Limits, Thresholds,
                                         Timing, load_health_config, parse_health_config)

DEPLOY = Path(__file__).parent.parent / "deploy" / "health-config.yaml"


def configmap_toml() -> str:
    manifest = yaml.safe_load(DEPLOY.read_text())
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("ConfigMap", "tally-health")
    return manifest["data"]["health.toml"]


def test_the_configmap_in_deploy_loads_and_its_values_are_the_defaults(tmp_path):
    path = tmp_path / "health.toml"          # as the DaemonSet mounts it
    path.write_text(configmap_toml())
    config = load_health_config(path)
    assert config.thresholds == Thresholds(gpu_util_percent=98, memory_used_percent=95, temperature_c=85,
                                           power_percent_of_limit=98, sm_clock_min_mhz=900)
    t = config.timing
    assert (t.sample_interval_s, t.window_s, t.overlimit_after_s, t.backoff_s) == (1, 30, 120, 60)
    # what the ConfigMap leaves out comes from the defaults, and the defaults are the deployed values
    assert (config.limits, config.xid.fatal) == (Limits(), DEFAULT_FATAL_XIDS)
    assert config == HealthConfig(source=str(path))
    assert isinstance(t.window_s, float) and isinstance(t.overlimit_history_max, int)


def test_the_back_off_formula_and_its_two_caps():
    config = parse_health_config("[timing]\nbackoff_s = 10\nbackoff_factor = 3\nbackoff_max_s = 500\n"
                                 "overlimit_history_max = 3\n")
    assert [config.backoff_for(n) for n in range(1, 6)] == [10, 30, 90, 90, 90]   # 3 entries count at most
    config = parse_health_config("[timing]\nbackoff_s = 10\nbackoff_factor = 3\nbackoff_max_s = 50\n")
    assert [config.backoff_for(n) for n in range(1, 4)] == [10, 30, 50]           # capped at backoff_max_s


@pytest.mark.parametrize("text, message", [
    ("[threshold]\ntemperature_c = 80\n", r"unknown table \[threshold\] \(tables: \[thresholds\], \[limits\]"),
    ("[thresholds]\ntemperature = 80\n", r"unknown key \[thresholds\] temperature \(keys of \[thresholds\]: "
                                         r"gpu_util_percent"),
    ("[thresholds]\ntemperature_c = \"hot\"\n", r"\[thresholds\] temperature_c = 'hot': expected a number"),
    ("[timing]\nwindow_s = true\n", r"\[timing\] window_s = True: expected a number"),
    ("[timing]\noverlimit_history_max = 2.5\n", r"\[timing\] overlimit_history_max = 2.5: expected an integer"),
    ("[thresholds]\ngpu_util_percent = 120\n", r"\[thresholds\] gpu_util_percent = 120 is out of range: it must "
                                               r"be > 0 and <= 100"),
    ("[timing]\nsample_interval_s = 0\n", r"\[timing\] sample_interval_s = 0 is out of range: it must be > 0"),
    ("[timing]\nbackoff_factor = 0.5\n", r"\[timing\] backoff_factor = 0.5 is out of range: it must be >= 1"),
    ("[timing]\nwindow_s = nan\n", r"\[timing\] window_s = nan: expected a finite number"),
    ("[limits]\ntemperature_c = 80\n", r"\[limits\] temperature_c = 80 is below \[thresholds\] temperature_c = 85"),
    ("[timing]\nwindow_s = 60\noverlimit_after_s = 30\n",
     r"\[timing\] overlimit_after_s = 30 is shorter than window_s = 60"),
    ("[timing]\nbackoff_max_s = 10\n", r"\[timing\] backoff_max_s = 10 is below backoff_s = 60"),
    ("[xid]\nfatal = [48, \"79\"]\n", r"\[xid\] fatal = \[48, '79'\]: expected a list of XID numbers"),
    ("thresholds = 5\n", r"`thresholds` must be a table"),
    ("[thresholds\n", r"not valid TOML"),
])
def test_a_bad_config_is_refused_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(HealthConfigError, match=f"^health config {path}: {message}"):
        load_health_config(path)


def test_a_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(HealthConfigError, match="no such file .*leave the flag out for the defaults"):
        load_health_config(tmp_path / "absent.toml")


def test_keys_left_out_keep_their_defaults_and_fatal_xids_are_a_set():
    config = parse_health_config("[limits]\ntemperature_c = 95\n[xid]\nfatal = [79, 48, 79]\n")
    assert config.limits == Limits(temperature_c=95.0)
    assert config.timing == Timing() and config.thresholds == Thresholds()
    assert config.xid.fatal == (48, 79)
