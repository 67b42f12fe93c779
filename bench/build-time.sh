#!/usr/bin/env bash
# bench/build-time.sh: how long the project takes to build on this machine,
# from a clean configure, in a build directory of its own (the sources are
# not touched but for the two files it touches and puts back).
#
#   bench/build-time.sh [--baseline-too] [--binary-only] [--jobs N] [--dir DIR]
#
# For the build as configured (EDGEGOSSIP_FAST_LINKER=ON, the default: the
# mold or lld linker where one is installed) it prints:
#   - the configure;
#   - the binary alone (`./setup.sh run` builds this);
#   - everything else (the test programs, `./setup.sh test`);
#   - a rebuild of everything after touching one .cpp in algorithms/;
#   - a rebuild of everything after touching one widely included header
#     (messages/codec.hpp);
#   - the ten slowest steps (ninja's log: a step's wall time, with as many
#     jobs as the machine has cores).
# --baseline-too measures the same with EDGEGOSSIP_FAST_LINKER=OFF first (GNU
# ld: the build as it was) and prints each figure's ratio, both measured in
# this run. ccache, where installed, is kept out (CCACHE_DISABLE=1): each
# build compiles every step.
# --binary-only stops after the binary (and its two rebuilds), for a quick
# figure. Each configuration takes a full build: on 2 cores about 10 to 25
# minutes.
set -euo pipefail
export CCACHE_DISABLE=1
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
baseline=0
binary_only=0
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline-too) baseline=1 ;;
    --binary-only) binary_only=1 ;;
    --jobs) jobs=$2; shift ;;
    --dir) dir=$2; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "build-time.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
  esac
  shift
done
command -v ninja >/dev/null || { echo "build-time.sh: needs ninja (./setup.sh build installs it)" >&2; exit 2; }
owned=0
if [ -z "$dir" ]; then
  dir=$(mktemp -d /tmp/edgegossip-build-time.XXXXXX)
  owned=1
fi

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Touches FILE so that the build sees it changed, and puts its time back
# at the end of the script.
touched=()
restore() {
  for f in "${touched[@]}"; do
    [ -f "$f.build-time" ] && touch -r "$f.build-time" "$f" && rm -f "$f.build-time"
  done
}
trap 'restore; [ "$owned" -eq 1 ] && rm -rf "$dir"' EXIT
touch_source() {
  local f="$src/$1"
  if [ ! -f "$f.build-time" ]; then
    touch -r "$f" "$f.build-time"
    touched+=("$f")
  fi
  touch "$f"
}

declare -A figure
# measure NAME FAST: builds in $dir/NAME with EDGEGOSSIP_FAST_LINKER=FAST;
# figures under NAME/...
measure() {
  local name=$1 fast=$2 b="$dir/$1" t steps
  rm -rf "$b"
  echo "== $name (EDGEGOSSIP_FAST_LINKER=$fast, $jobs jobs)"
  t=$(now)
  cmake -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDGEGOSSIP_FAST_LINKER="$fast" \
    > "$b.configure.log" 2>&1 || { cat "$b.configure.log"; exit 1; }
  figure[$name/configure]=$(since "$t")
  grep -E "edgegossip: linker" "$b.configure.log" || echo "linker: the compiler's default (GNU ld)"
  echo "configure: ${figure[$name/configure]} s"
  t=$(now)
  ninja -C "$b" -j "$jobs" edgegossip > "$b.binary.log" 2>&1 || { tail -40 "$b.binary.log"; exit 1; }
  figure[$name/binary]=$(since "$t")
  steps=$(grep -c '^\[' "$b.binary.log" || true)
  echo "the binary from nothing: ${figure[$name/binary]} s ($steps steps)"
  local target=all
  if [ "$binary_only" -eq 1 ]; then
    target=edgegossip
  else
    t=$(now)
    ninja -C "$b" -j "$jobs" > "$b.all.log" 2>&1 || { tail -40 "$b.all.log"; exit 1; }
    figure[$name/rest]=$(since "$t")
    steps=$(grep -c '^\[' "$b.all.log" || true)
    echo "then everything else (the test programs): ${figure[$name/rest]} s ($steps steps)"
  fi
  touch_source algorithms/gossip/gossip.cpp
  t=$(now)
  ninja -C "$b" -j "$jobs" $target > "$b.cpp.log" 2>&1 || { tail -40 "$b.cpp.log"; exit 1; }
  figure[$name/cpp]=$(since "$t")
  steps=$(grep -c '^\[' "$b.cpp.log" || true)
  echo "after touching algorithms/gossip/gossip.cpp ($target): ${figure[$name/cpp]} s ($steps steps)"
  touch_source messages/codec.hpp
  t=$(now)
  ninja -C "$b" -j "$jobs" $target > "$b.header.log" 2>&1 || { tail -40 "$b.header.log"; exit 1; }
  figure[$name/header]=$(since "$t")
  steps=$(grep -c '^\[' "$b.header.log" || true)
  echo "after touching messages/codec.hpp ($target): ${figure[$name/header]} s ($steps steps)"
  echo "the ten slowest steps of the first builds (s, wall, $jobs jobs at once):"
  # .ninja_log: start ms, end ms, mtime, output, hash; the rebuilds' steps
  # come later in the file with the same outputs, so only the first of each.
  awk 'NR > 1 && !seen[$4]++ { printf "%8.1f  %s\n", ($2 - $1) / 1000, $4 }' "$b/.ninja_log" \
    | sort -rn | head -10
  echo
}

if [ "$baseline" -eq 1 ]; then
  measure baseline OFF
fi
measure fast ON

if [ "$baseline" -eq 1 ]; then
  echo "== ratios (baseline / fast, both measured in this run; above 1: faster now)"
  for k in configure binary rest cpp header; do
    [ -n "${figure[baseline/$k]:-}" ] || continue
    awk -v k="$k" -v a="${figure[baseline/$k]}" -v b="${figure[fast/$k]}" \
      'BEGIN { printf "%-10s %8.1f s -> %8.1f s  %.2fx\n", k, a, b, (b > 0 ? a / b : 0) }'
  done
fi
