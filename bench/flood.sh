#!/usr/bin/env bash
# A stranger's flood: the three-node example (LeNet-5, GoSGD, one platform
# per node on 127.0.0.1), over TLS (cluster.tls) or on its default settings
# (plain TCP, no secret), run alternately without and with a flood at node
# a's port and weights lane (about 1,000 connections of random bytes, CAF
# headers and lane hellos announcing huge lengths, truncated frames, from the
# 4th epoch on). Prints, for each pair of runs, node a's peak resident
# memory and the median epoch wall time of the last 4 epochs (after the
# flood; the same epochs in the run without it), and the medians over the
# pairs.
#
#   bench/flood.sh [BINARY] [EPOCHS] [REPEAT] [tls|plain]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$here/build/edgegossip}"
epochs="${2:-24}"
repeat="${3:-3}"
security="${4:-tls}"
case "$security" in tls | plain) ;; *) echo "bench/flood.sh: tls or plain, not '$security'" >&2; exit 2 ;; esac
work="$(mktemp -d)"
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT
"$here/scripts/make-test-ca.sh" "$work/certs" a b c >/dev/null
source "$here/bench/three-nodes.sh"

flood() {  # flood PORT LANE_PORT: shell builtins only, so that it takes little CPU
  local i port junk=""
  for ((i = 0; i < 256; ++i)); do junk+=$(printf '\\%03o' $(( (RANDOM % 223) + 33 ))); done
  junk=$(printf "$junk")
  for ((i = 0; i < 1000; ++i)); do
    port=$(( i % 2 ? $2 : $1 ))
    {
      exec 3<>"/dev/tcp/127.0.0.1/$port" || continue
      if (( i % 3 == 0 && i % 2 )); then
        printf 'EGLH\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff' >&3  # huge lengths
      elif (( i % 3 == 0 )); then  # CAF's BASP header announcing 4 GB
        printf '\001\000\000\000\377\377\377\377\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' >&3
      fi
      printf '%s' "${junk:$(( RANDOM % 128 ))}" >&3
      exec 3>&-
    } 2>/dev/null || true
    sleep 0.01
  done
}

# run KIND N: prints "peak_rss_mb median_wall_of_late_epochs"
run() {
  local kind="$1" n="$2" cfg="$work/$1-$2.toml" peak=0 rss pid
  three_node_config "$cfg" "$work" "$kind-$n" "$epochs" 473 \
    "$([ "$security" = tls ] && echo "$work/certs")"
  for node in b c; do "$bin" node --config "$cfg" --node "$node" >"$work/$kind-$n-$node.log" 2>&1 & done
  "$bin" node --config "$cfg" --node a >"$work/$kind-$n-a.log" 2>&1 &
  pid=$!
  local flooded=0
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status" 2>/dev/null || echo 0)
    (( rss > peak )) && peak=$rss
    if [ "$kind" = flood ] && (( ! flooded )) && grep -q "epoch 3/" "$work/$kind-$n-a.log"; then
      flooded=1
      lane=$(sed -n 's/.*weights lane listening on [0-9.]*:\([0-9]*\).*/\1/p' "$work/$kind-$n-a.log")
      flood 47301 "$lane" &
    fi
    sleep 0.5
  done
  wait
  # The last 4 epochs (after the flood), in either run.
  echo "$peak $(wall_median "$(ls "$work/runs-$kind-$n"/*/cluster.csv)" $((epochs - 4)))"
}

quiet_rss=() flood_rss=() quiet_late=() flood_late=()
for ((n = 0; n < repeat; ++n)); do
  read -r qr ql < <(run quiet "$n")
  read -r fr fl < <(run flood "$n")
  quiet_rss+=("$qr"); flood_rss+=("$fr"); quiet_late+=("$ql"); flood_late+=("$fl")
  echo "pair $n: node a peak resident $qr MB without the flood, $fr MB with it;" \
       "last 4 epochs median $ql s without, $fl s after the flood"
done
m() { printf '%s\n' "$@" | median; }
qr="$(m "${quiet_rss[@]}")" fr="$(m "${flood_rss[@]}")"
ql="$(m "${quiet_late[@]}")" fl="$(m "${flood_late[@]}")"
echo "medians of $repeat pairs: peak resident $qr MB without, $fr MB with the flood" \
     "($(printf "%+d" $((fr - qr))) MB); late epochs $ql s without, $fl s after the flood" \
     "(ratio $(awk -v a="$fl" -v b="$ql" 'BEGIN {printf "%.3f", a / b}'))"
