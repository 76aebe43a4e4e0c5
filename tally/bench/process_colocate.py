"""The co-location benchmark on a real backend, start to finish: the shared
harness (tally.bench.colocate.run_colocate) driven by the ProcessRunner, with
what the processes did added to the report under "runs" (per run: policy,
server scheduler counters, the jobs' own result checks, best-effort
iterations/s, process ids), "hp_calibration_service_ms", "device" (as the
server names it) and "workdir" (the runs' logs and reports; removed at the
end unless kept)."""
from __future__ import annotations

import platform
from pathlib import Path

from tally.bench.colocate import ColocateResult, run_colocate
from tally.bench.process_runner import ProcessColocateConfig, ProcessRunner


def run_process_colocate(config: ProcessColocateConfig, workdir: Path | None = None,
                         keep_workdir: bool = False) -> ColocateResult:
    with ProcessRunner(config, workdir=workdir, keep_workdir=keep_workdir) as runner:
        result = run_colocate(config, runner)
        result.report["hp_calibration_service_ms"] = runner.calibration_service_ms
        result.report["runs"] = runner.describe_runs()
        result.report["device"] = runner.device_name
        result.report["host"] = {"machine": platform.machine(), "python": platform.python_version()}
        result.report["workdir"] = str(runner.workdir)
        result.report["workdir_kept"] = keep_workdir
        result.report["socket_dir"] = str(runner.socket_dir)
    return result
