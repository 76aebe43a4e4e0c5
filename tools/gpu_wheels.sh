#!/usr/bin/env bash
# Downloads the wheels the GPU kit carries to a GPU machine that has no network
# (tally/bench/gpu_check/wheels.txt, [carry]) for CPython 3.12 on manylinux x86-64,
# into .gpu-wheels/ (git-ignored), and says whether they fit what a device call carries.
#   tools/gpu_wheels.sh              # the carried wheels
#   tools/gpu_wheels.sh --rehearsal  # also the GPU image's packages ([image]) into .gpu-wheels-image/,
#                                    # for tally-bench gpu-check --rehearse's offline install
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
list="$root/tally/bench/gpu_check/wheels.txt"
carry_limit_mib=64          # the working tree and the carried paths, together, of one device call

section() {   # the requirement lines under [$1]
  awk -v want="[$1]" '{ sub(/#.*/, ""); gsub(/[ \t]+/, "") } /^\[/ { on = ($0 == want); next } on && NF' "$list"
}

download() {  # $1: folder; the rest: requirements
  local dir="$1"; shift
  mkdir -p "$dir"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" "$@"
}

mapfile -t carry < <(section carry)
download "$root/.gpu-wheels" "${carry[@]}"
if [ "${1:-}" = "--rehearsal" ]; then
  mapfile -t image < <(section image)
  download "$root/.gpu-wheels-image" "${image[@]}"
fi

wheels_kib=$(du -sk "$root/.gpu-wheels" | cut -f1)
tree_kib=$(cd "$root" && git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total_mib=$(( (wheels_kib + tree_kib + 1023) / 1024 ))
echo "carried wheels: ${#carry[@]} in .gpu-wheels/, $(( (wheels_kib + 1023) / 1024 )) MiB; working tree $(( (tree_kib + 1023) / 1024 )) MiB; together ${total_mib} MiB of ${carry_limit_mib} MiB"
ls -1 "$root/.gpu-wheels"
if [ "$total_mib" -gt "$carry_limit_mib" ]; then
  echo "too much to carry: drop wheels the GPU image already has from [carry]" >&2
  exit 1
fi
