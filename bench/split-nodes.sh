#!/usr/bin/env bash
# Split stages on node processes under real CPU limits: conv8 on
# Fashion-MNIST, trained whole on one node and split across 2 and 3 nodes
# started by `edgegossip launch`, each node's process held to its cores by
# `cpu_limit` (a cgroup's quota, or cpulimit) instead of an emulated
# slowdown. A fast node gets FAST cores, a slow one FAST / SLOWER (4x
# slower by default, as `bench split`'s unequal setups); the whole model
# runs on a fast node, the first stage too unless --order2/--order3 say. Split
# backpropagation and the decoupled mode (`stashed` by default) on the same
# seeds; prints every run and, per setup, the medians of the seeds with the
# worst seed beside them: training time, the ratio to split backpropagation
# and to the whole model, test accuracy and its difference from split
# backpropagation.
#
#   bench/split-nodes.sh [--binary B] [--repeat N] [--epochs E] [--mode M]
#                        [--fast CORES] [--slower X] [--train-samples N]
#                        [--layers2 "A B"] [--layers3 "A B C"] [--in-flight N]
#                        [--schedule arrival|1f1b]
#                        [--order2 "fast slow"] [--order3 "fast slow slow"]
#                        [--work DIR]
#
# The cuts are bench split's cuts by speed for slowdowns 1 4 and 1 4 4
# (after conv5; after conv4 and conv5): conv8's 8 layers as 5 3 and 4 1 3;
# --layers2 and --layers3 give each stage's layers instead; --order2 and
# --order3 which stage runs on the fast node and which on slow ones, stage
# by stage ("slow fast slow": the slow machines take the first and last
# layers, as `bench split --cut-by-speed` may place them). --in-flight is
# split.in_flight, the batches in the pipeline at once (default 4); --schedule
# split.schedule, the order each stage serves them in (default arrival). --work keeps
# every run's cluster file, log and metrics in DIR (default: a temporary
# directory, removed at the end). Exits 77 with a message where no CPU
# limit can be set (cgroups need root or a delegated tree; otherwise
# Debian's cpulimit).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$here/build/edgegossip" repeat=3 epochs=3 mode=stashed fast=1 slower=4 samples=0
layers2="5 3" layers3="4 1 3" work="" in_flight=4 schedule=arrival
order2="fast slow" order3="fast slow slow"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) bin="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --fast) fast="$2"; shift 2 ;;
    --slower) slower="$2"; shift 2 ;;
    --train-samples) samples="$2"; shift 2 ;;
    --layers2) layers2="$2"; shift 2 ;;
    --layers3) layers3="$2"; shift 2 ;;
    --in-flight) in_flight="$2"; shift 2 ;;
    --schedule) schedule="$2"; shift 2 ;;
    --order2) order2="$2"; shift 2 ;;
    --order3) order3="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    *) echo "bench/split-nodes.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench/split-nodes.sh: no binary at $bin (build first)" >&2; exit 2; }
case "$in_flight" in ''|*[!0-9]*|0) echo "bench/split-nodes.sh: --in-flight takes a positive number of batches" >&2; exit 2 ;; esac
case "$schedule" in arrival|1f1b) ;; *) echo "bench/split-nodes.sh: --schedule takes arrival or 1f1b" >&2; exit 2 ;; esac
read -r l2a l2b <<<"$layers2"
read -r l3a l3b l3c <<<"$layers3"
for n in "$l2a" "$l2b" "$l3a" "$l3b" "$l3c"; do
  case "$n" in ''|*[!0-9]*|0) echo "bench/split-nodes.sh: --layers2 takes 2 and --layers3 3 positive layer counts" >&2; exit 2 ;; esac
done
if [ -n "$work" ]; then
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
source "$here/bench/three-nodes.sh"  # median
slow="$(awk -v f="$fast" -v x="$slower" 'BEGIN {printf "%g", f / x}')"
read -r o2a o2b <<<"$order2"
read -r o3a o3b o3c <<<"$order3"
for o in "$o2a" "$o2b" "$o3a" "$o3b" "$o3c"; do
  case "$o" in fast|slow) ;; *) echo "bench/split-nodes.sh: --order2 takes 2 and --order3 3 words, each fast or slow" >&2; exit 2 ;; esac
done
# cores WORD: the CPU limit of a fast or a slow node.
cores() { if [ "$1" = fast ]; then echo "$fast"; else echo "$slow"; fi; }
port=$((47500 + RANDOM % 400))

# config OUT SEED MODE STAGES...: a cluster file; each stage "NODE:LAYERS:CORES".
config() {
  local out="$1" seed="$2" m="$3"; shift 3
  {
    printf '[cluster]\nid = "split-nodes"\nseed = %s\n' "$seed"
    printf '[data]\ntrain_samples = %s\n' "$samples"
    printf '[train]\nepochs = %s\nlr = 0.01\nmomentum = 0.9\nbatch = 64\n' "$epochs"
    printf '[split]\nmode = "%s"\nmodel = "conv8"\nin_flight = %s\nschedule = "%s"\n' "$m" "$in_flight" "$schedule"
    printf '[storage]\ndir = "%s"\n[output]\ndir = "%s"\n' "$out.data" "$out.runs"
    local seen="" k=0 s node layers cores
    for s in "$@"; do
      IFS=: read -r node layers cores <<<"$s"
      case " $seen " in *" $node "*) continue ;; esac
      seen="$seen $node"
      printf '[[nodes]]\nname = "%s"\nhost = "127.0.0.1"\nport = %s\ncpu_limit = %s\n' \
        "$node" $((port + 10 * k)) "$cores"
      k=$((k + 1))
    done
    for s in "$@"; do
      IFS=: read -r node layers cores <<<"$s"
      printf '[[stages]]\nnode = "%s"\nlayers = %s\n' "$node" "$layers"
    done
  } >"$out"
}

# run NAME SEED MODE STAGES...: sets run_s and run_a to the training seconds
# and test accuracy of the run's last epoch (split-metrics.csv); exits 77
# when no CPU limit can be set.
run() {
  local name="$1" seed="$2" m="$3"; shift 3
  local cfg="$work/$name-$m-$seed.toml" log="$work/$name-$m-$seed.log"
  rm -rf "$cfg.data" "$cfg.runs"  # a kept --work from an earlier run: no checkpoint resumed
  config "$cfg" "$seed" "$m" "$@"
  if ! "$bin" launch --config "$cfg" >"$log" 2>&1; then
    if grep -q "cannot limit the CPU" "$log"; then
      echo "bench/split-nodes.sh: skipped: a node cannot limit its CPU here:" >&2
      grep -m1 "cannot limit the CPU" "$log" >&2
      exit 77
    fi
    echo "bench/split-nodes.sh: the run $name/$m/seed $seed failed; its log:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  local csv
  csv="$(ls "$cfg.runs"/*/split-metrics.csv)"
  read -r run_s run_a < <(awk -F, 'NR > 1 {s = $2; a = $5} END {printf "%s %s\n", s, a}' "$csv")
}

setups=(
  "whole|a:8:$fast"
  "2 stages ($o2a, $o2b)|a:$l2a:$(cores "$o2a") b:$l2b:$(cores "$o2b")"
  "3 stages ($o3a, $o3b, $o3c)|a:$l3a:$(cores "$o3a") b:$l3b:$(cores "$o3b") c:$l3c:$(cores "$o3c")"
)
echo "bench split-nodes: conv8, $epochs epochs, ${samples/#0/all} training images, $repeat seed(s); fast nodes $fast core(s), slow ones $slow (cpu_limit), the whole model on a fast one; stages on nodes: $order2, $order3; layers a stage: $l2a $l2b, $l3a $l3b $l3c; $in_flight batches in flight, schedule $schedule; mode $mode against split backpropagation"
declare -A secs acc
for ((seed = 1; seed <= repeat; ++seed)); do
  for entry in "${setups[@]}"; do
    name="${entry%%|*}" stages="${entry#*|}"
    modes=(backprop "$mode")
    [ "$name" = whole ] && modes=(backprop)
    for m in "${modes[@]}"; do
      # shellcheck disable=SC2086
      run "$(echo "$name" | tr -c 'a-z0-9\n' '-')" "$seed" "$m" $stages
      secs["$name|$m|$seed"]="$run_s" acc["$name|$m|$seed"]="$run_a"
      printf '  seed %d  %-24s %-9s %7.1f s  accuracy %s\n' "$seed" "$name" "$m" "$run_s" "$run_a"
    done
  done
done

# med KEY-PREFIX ARRAY: the median over the seeds.
med() { local -n arr="$2"; for ((seed = 1; seed <= repeat; ++seed)); do echo "${arr[$1|$seed]}"; done | median; }
worst() { local -n arr="$2"; for ((seed = 1; seed <= repeat; ++seed)); do echo "${arr[$1|$seed]}"; done | sort -g | head -1; }
whole="$(med "whole|backprop" secs)"
echo
echo "| setup | mode | training time | vs split backprop | vs whole | test accuracy [worst seed] | pts vs split backprop |"
echo "| --- | --- | ---: | ---: | ---: | --- | ---: |"
for entry in "${setups[@]}"; do
  name="${entry%%|*}"
  bp="$(med "$name|backprop" secs)" bpa="$(med "$name|backprop" acc)"
  modes=(backprop "$mode")
  [ "$name" = whole ] && modes=(backprop)
  for m in "${modes[@]}"; do
    s="$(med "$name|$m" secs)" a="$(med "$name|$m" acc)" w="$(worst "$name|$m" acc)"
    awk -v n="$name" -v m="$m" -v s="$s" -v bp="$bp" -v wh="$whole" -v a="$a" -v w="$w" -v bpa="$bpa" \
      'BEGIN {printf "| %s | %s | %.1f s | %.2fx | %.2fx | %.4f [%.4f] | %+.2f |\n", n, m, s, bp / s, wh / s, a, w, (a - bpa) * 100}'
  done
done
echo "(ratios: the other's time over this one's; medians of $repeat seed(s))"
