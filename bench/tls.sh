#!/usr/bin/env bash
# TLS against plain TCP: the three-node example (LeNet-5, GoSGD, one platform
# per node on 127.0.0.1) run alternately with and without [cluster.tls],
# REPEAT times each; prints every run's median epoch wall time and the
# ratio of the medians (TLS / plain).
#
#   bench/tls.sh [BINARY] [EPOCHS] [REPEAT]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$here/build/edgegossip}"
epochs="${2:-4}"
repeat="${3:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$here/scripts/make-test-ca.sh" "$work/certs" a b c >/dev/null
source "$here/bench/three-nodes.sh"

# One run; prints its median epoch wall time (cluster.csv's wall_seconds).
run() {
  local kind="$1" n="$2" cfg="$work/$1-$2.toml"
  three_node_config "$cfg" "$work" "$kind-$n" "$epochs" 472 "$([ "$kind" = tls ] && echo "$work/certs")"
  "$bin" launch --config "$cfg" >"$work/$kind-$n.log" 2>&1
  wall_median "$(ls "$work/runs-$kind-$n"/*/cluster.csv)"
}

plain=() tls=()
for ((n = 0; n < repeat; ++n)); do
  p="$(run plain "$n")"; t="$(run tls "$n")"
  plain+=("$p"); tls+=("$t")
  echo "run $n: median epoch $p s plain TCP, $t s TLS"
done
mp="$(printf '%s\n' "${plain[@]}" | median)"
mt="$(printf '%s\n' "${tls[@]}" | median)"
echo "median of $repeat runs ($epochs epochs each): plain TCP $mp s, TLS $mt s, TLS / plain $(awk -v t="$mt" -v p="$mp" 'BEGIN {printf "%.3f", t / p}')"
