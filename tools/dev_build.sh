#!/usr/bin/env bash
# Incremental in-place build for development: same CMake project as setup.py, but a
# persistent build directory and outputs straight into the source package, so an
# editable install (pip install -e .) picks up the result. Usage: tools/dev_build.sh [Debug|Release]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
config="${1:-Release}"
build="$root/build/dev-$config"
mkdir -p "$build"
# Several developers may build at once: one at a time per checkout.
exec 9>"$root/build/.lock"
flock 9
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="$config" -DTALLY_PACKAGE_DIR="$root/tally" -DTALLY_DEV_BUILD=ON \
    -DPython_EXECUTABLE="$(command -v python3)" -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
