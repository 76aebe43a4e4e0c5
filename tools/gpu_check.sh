#!/usr/bin/env bash
# The GPU kit's one command on a fresh GPU machine with no network: install tally
# from the working tree and the carried wheels, then run every step of
# `tally-bench gpu-check` (its plan, with each step's budget, prints first).
# Prepare here with tools/gpu_wheels.sh; then, from the device tool:
#   run(command="bash tools/gpu_check.sh", carry=[".gpu-wheels"], timeout_s=540)
# Arguments go to tally-bench gpu-check (a rerun: --quick --steps colocate,preemption).
# What comes back ($OUT, else bench/results/gpu-check/): install.log, the results file
# gpu-<date>-<device>.md, gpu-check.json and gpu-check-files.tar.gz, rewritten after each step.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PYTHONUNBUFFERED=1
python="${PYTHON:-python3}"
wheels="${TALLY_GPU_WHEELS:-$root/.gpu-wheels}"
out="${OUT:-$root/bench/results/gpu-check}"
mkdir -p "$out"
start=$(date +%s)

# The toolkit of the nvcc on the PATH when CUDA_HOME is unset and /usr/local/cuda has no cuda.h
# (CMake reads CUDA_HOME for tally's headers; the tests, for nvcc and ptxas).
if [ -z "${CUDA_HOME:-}" ]; then
  if [ -f /usr/local/cuda/include/cuda.h ]; then
    export CUDA_HOME=/usr/local/cuda
  elif command -v nvcc >/dev/null; then
    CUDA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
    export CUDA_HOME
  fi
fi
echo "gpu_check: CUDA_HOME=${CUDA_HOME:-unset}; $(nvidia-smi -L 2>&1 | head -1)"

# No network: pip sees the carried wheels and what the image has installed, nothing else.
# --no-build-isolation builds with the installed build requirements, so those go in first.
log="$out/install.log"
build_requires=$("$python" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
echo "gpu_check: installing tally (build requirements: $build_requires)"
# shellcheck disable=SC2086  # the requirements are separate words
if ! { "$python" -m pip install --no-index --find-links "$wheels" $build_requires &&
       "$python" -m pip install --no-index --no-build-isolation --find-links "$wheels" "$root"; } >"$log" 2>&1; then
  tail -40 "$log"
  echo "gpu_check: the install failed (whole log: install.log); no step ran" >&2
  exit 1
fi
# The kit's own tool (a step that overruns gets its servers' threads dumped); optional.
"$python" -m pip install --no-index --find-links "$wheels" py-spy >>"$log" 2>&1 ||
  echo "gpu_check: py-spy did not install: an overrunning step will have no thread dumps"
spent=$(( $(date +%s) - start ))
echo "gpu_check: installed in ${spent} s"

# The console script, not `python -m`: from the repository root, -m would import the
# source tree's tally (without its built C++) instead of the installed one.
bench="$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/tally-bench"
exec "$bench" gpu-check --out /tmp/tally-gpu-check --bundle "$out" --results-dir "$out" \
  --spent-s "$spent" --install-log "$log" "$@"
