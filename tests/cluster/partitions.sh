#!/usr/bin/env bash
# Network partitions between node processes on hosts of their own: each
# node in a network namespace with its own address, the namespaces on a
# Linux bridge; a cut is a host's link taken down (or a group of hosts
# moved to a bridge of their own, for a split in two sides that still reach
# each other), for longer than cluster.peer_timeout, then restored.
#
#   tests/cluster/partitions.sh EDGEGOSSIP [CASE...]   (default: every case)
#
# Cases (GoSGD, synchronous, LeNet-5 on Fashion-MNIST):
#   1. three nodes, node b cut off, back before the run ends;
#   2. three nodes, the balancer's own node a cut off, back before the end;
#   3. four nodes split two against two (c, d against a, b: a tie, which the
#      side holding the balancer's node a wins), healed before the end;
#   4. three nodes, node b cut off until after the run ended;
#   5. three nodes, the balancer's node a cut off, then back reaching node c
#      8 s before node b (which kept the run): a's balancer asks before it
#      resumes, stays paused, closes no epoch, and gives way to b's; no
#      platform trains an epoch the run has passed.
# In every case: exactly one run directory, with every epoch in its
# cluster.csv once; no balancer on a minority side; a node back within 10 s
# of its link's return trains again; every process exits within 10 s of the
# run's end (case 4: the cut node within 35 s of its link's return, as
# nothing tells it the run ended).
#
# Needs root and iproute2 (network namespaces, veth, bridge); exits 77
# (skipped) where they cannot be made. Exit 0: every check passed; a failed
# case prints its nodes' logs.
set -uo pipefail

bin=${1:?usage: partitions.sh EDGEGOSSIP [CASE...]}
shift
cases=" ${*:-1 2 3 4 5} "
want() { [[ "$cases" == *" $1 "* ]]; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tag="eg$$"
net="10.$(( 20 + $$ % 200 )).$(( $$ / 200 % 250 ))"
work=$(mktemp -d)
failures=0

name=partitions
# shellcheck source=tests/cluster/netns.sh
. "$(dirname "$0")/netns.sh"
make_hosts

# cluster FILE NODES: the cluster file of NODES (3 or 4) nodes a, b, c, d.
cluster() {
  local file=$1 nodes=$2 k=0
  cat > "$file" <<EOF
[cluster]
id = "partitions"
balancer = "a"
peer_timeout = 3.0

[data]
partition = "iid"
train_samples = 30000
test_samples = 1000

[train]
model = "lenet5"
epochs = 16

[strategy]
name = "gosgd"
schedule = "sync"
exchange_probability = 0.05

[storage]
dir = "$work/store"

[output]
dir = "$work/runs"
EOF
  for n in a b c d; do
    k=$((k + 1))
    [ "$k" -le "$nodes" ] || break
    cat >> "$file" <<EOF

[[nodes]]
name = "$n"
host = "$net.$k"
port = $((47200 + k))
  [[nodes.platforms]]
  name = "${n}0"
  threads = 1
  # (Slow enough that the run outlasts a 12 s cut with half the platforms
  # left: on 2 cores they trained an epoch in 0.7 s and ended the run first.)
  slowdown = 2.0
EOF
  done
}

# Seconds since 1970 of a log line's time "[HH:MM:SS.mmm]" (today).
line_time() { date -d "$(date +%F) $(sed -E 's/^\[([0-9:.]+)\].*/\1/' <<<"$1")" +%s.%N; }
now() { date +%s.%N; }
later() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a - b <= 0) }'; }  # $1 <= $2
within() { awk -v a="$1" -v b="$2" -v s="$3" 'BEGIN { exit !(a - b <= s) }'; }  # a - b <= s

declare -A exit_code exit_at
# start NODES: every node in its namespace; logs in $work/NAME.log.
start() {
  # Nothing left of the case before (a node that did not end is a failure
  # already counted).
  pkill -9 -f "$work/cluster.toml" 2>/dev/null
  sleep 0.5
  for i in 1 2 3 4; do
    ip link set "${tag}v$i" master "${tag}b0" up
  done
  rm -rf "$work/store" "$work/runs" "$work"/*.log "$work"/*.exit
  local k=0
  for n in a b c d; do
    k=$((k + 1))
    [ "$k" -le "$1" ] || break
    ( ip netns exec "${tag}n$k" "$bin" node --config "$work/cluster.toml" --node "$n" \
        > "$work/$n.log" 2>&1
      echo "$? $(now)" > "$work/$n.exit" ) &
  done
}
# finish NODES SECONDS: waits for every node to exit.
finish() {
  local k=0
  for _ in $(seq 1 "$2"); do
    local all=1
    for n in a b c d; do
      k=$(( $(printf '%d' "'$n") - 96 ))
      [ "$k" -le "$1" ] || break
      [ -f "$work/$n.exit" ] || all=0
    done
    [ "$all" -eq 1 ] && break
    sleep 1
  done
  for n in a b c d; do
    k=$(( $(printf '%d' "'$n") - 96 ))
    [ "$k" -le "$1" ] || break
    if [ -f "$work/$n.exit" ]; then
      read -r exit_code[$n] exit_at[$n] < "$work/$n.exit"
    else
      exit_code[$n]=none exit_at[$n]=
      fail "node $n still running $2 s after the run"
    fi
  done
}

# Prints the logs of the case that just ran when one of its checks failed.
case_failures=0
case_end() {
  if [ "$failures" -gt "$case_failures" ]; then
    for f in "$work"/*.log; do echo "--- $f"; tail -40 "$f" | cut -c1-240; done
  fi
  case_failures=$failures
}

# One run directory whose cluster.csv has every epoch once; prints its path.
one_run() {
  local runs
  runs=$(ls -d "$work"/runs/*/ 2>/dev/null | wc -l)
  if [ "$runs" -ne 1 ]; then
    fail "$runs run directories: $(ls "$work/runs" 2>/dev/null | tr '\n' ' ')"
    return
  fi
  local csv
  csv=$(ls "$work"/runs/*/cluster.csv)
  local epochs
  epochs=$(tail -n +2 "$csv" | cut -d, -f1 | tr '\n' ' ')
  if [ "$epochs" = "$(seq 0 15 | tr '\n' ' ')" ] || [ "$epochs" = "$(seq 1 16 | tr '\n' ' ')" ]; then
    pass "one run directory, epochs 1-16 each once"
  else
    fail "the run's epochs are: $epochs"
  fi
}

# The run's end: the run directory line of the balancer that wrote it.
run_end() { line_time "$(grep -h "run directory:" "$work"/*.log | head -1)"; }

exits_within() {  # exits_within SECONDS NODES...
  local s=$1 end
  shift
  end=$(run_end)
  for n in "$@"; do
    if [ -n "${exit_at[$n]}" ] && within "${exit_at[$n]}" "$end" "$s"; then
      pass "node $n exited $(awk -v a="${exit_at[$n]}" -v b="$end" 'BEGIN { printf "%.1f", a - b }') s after the run's end (code ${exit_code[$n]})"
    else
      fail "node $n did not exit within $s s of the run's end"
    fi
  done
}

back_within() {  # back_within PLATFORM RESTORED_AT
  local line
  line=$(grep -h "balancer: platform $1 is back\|balancer: platform $1 joined from node .*; training from" "$work"/*.log | tail -1)
  if [ -z "$line" ]; then
    fail "$1 did not rejoin the run"
  elif within "$(line_time "$line")" "$2" 10; then
    pass "$1 rejoined $(awk -v a="$(line_time "$line")" -v b="$2" 'BEGIN { printf "%.1f", a - b }') s after its link came back"
  else
    fail "$1 rejoined more than 10 s after its link came back"
  fi
}

says() {  # says NODE TEXT: the node's log has TEXT
  if grep -q "$2" "$work/$1.log"; then pass "node $1: $2"; else fail "node $1 never says: $2"; fi
}
never() {  # never NODE TEXT
  if grep -q "$2" "$work/$1.log"; then fail "node $1 says: $(grep -m1 "$2" "$work/$1.log" | cut -c1-160)"; else pass "node $1 never: $2"; fi
}

cut_link() { ip link set "${tag}v$1" down; }
restore_link() { ip link set "${tag}v$1" up; }
# Waits until the balancer's log shows epoch N evaluated (at most 120 s).
wait_epoch() {
  for _ in $(seq 1 240); do
    grep -qh "info epoch $1/16:" "$work"/*.log 2>/dev/null && return 0
    sleep 0.5
  done
  fail "epoch $1 was never evaluated"
  return 1
}

if want 1; then
echo "== 1. three nodes: b cut off for 12 s (peer timeout 3 s), back before the end"
cluster "$work/cluster.toml" 3
start 3
wait_epoch 2
cut_link 2
sleep 12
restore_link 2
restored=$(now)
finish 3 150
one_run
says b "not a majority: not starting a balancer here"
never b "starting one here"
never c "starting one here"
back_within b0 "$restored"
exits_within 10 a b c

case_end
fi
if want 2; then
echo "== 2. three nodes: the balancer's node a cut off for 12 s, back before the end"
cluster "$work/cluster.toml" 3
start 3
wait_epoch 2
cut_link 1
sleep 12
restore_link 1
restored=$(now)
finish 3 150
one_run
says a "not a majority: the balancer here pauses its platforms"
says b "no balancer in the cluster: starting one here"
says b "continuing run"
says a "stopping ours"
back_within a0 "$restored"
exits_within 10 a b c

case_end
fi
if want 3; then
echo "== 3. four nodes split two against two for 12 s (the side of node a wins the tie)"
cluster "$work/cluster.toml" 4
start 4
wait_epoch 2
ip link set "${tag}v3" master "${tag}b1"
ip link set "${tag}v4" master "${tag}b1"
sleep 12
ip link set "${tag}v3" master "${tag}b0"
ip link set "${tag}v4" master "${tag}b0"
restored=$(now)
finish 4 150
one_run
says c "reaches 2 of the cluster's 4 nodes, not a majority"
never c "starting one here"
never d "starting one here"
back_within c0 "$restored"
back_within d0 "$restored"
exits_within 10 a b c d

case_end
fi
if want 4; then
echo "== 4. three nodes: b cut off until after the run ended"
cluster "$work/cluster.toml" 3
start 3
wait_epoch 2
cut_link 2
for _ in $(seq 1 240); do grep -qh "run directory:" "$work"/a.log && break; sleep 0.5; done
sleep 5
restore_link 2
restored=$(now)
finish 3 90
one_run
exits_within 10 a c
if [ -n "${exit_at[b]}" ] && within "${exit_at[b]}" "$restored" 35; then
  pass "node b ended $(awk -v a="${exit_at[b]}" -v b="$restored" 'BEGIN { printf "%.1f", a - b }') s after its link came back (code ${exit_code[b]})"
else
  fail "node b did not end within 35 s of its link's return"
fi
says b "no node outside its side of the cluster"
case_end

fi
if want 5; then
echo "== 5. three nodes: the balancer's node a cut off for 12 s, back reaching c 8 s before b"
cluster "$work/cluster.toml" 3
start 3
wait_epoch 2
cut_at=$(now)
cut_link 1
sleep 12
# a and b cannot reach each other yet (each drops the other's address); a
# and c can.
ip -n "${tag}n1" route add blackhole "$net.2/32"
ip -n "${tag}n2" route add blackhole "$net.1/32"
restore_link 1
sleep 8
ip -n "${tag}n1" route del blackhole "$net.2/32"
ip -n "${tag}n2" route del blackhole "$net.1/32"
restored=$(now)
finish 3 150
one_run
says a "not a majority: the balancer here pauses its platforms"
says a "but node c follows the balancer on node b: the balancer here stays paused"
never a "no other balancer kept the run"
says a "stopping ours"
never a "platform c0 is back"
back_within a0 "$restored"
# A paused balancer closes no epoch: no epoch line of a's after its pause.
pause_at=$(grep -n "not a majority: the balancer here pauses" "$work/a.log" | head -1 | cut -d: -f1)
if [ -n "$pause_at" ] && tail -n +"$pause_at" "$work/a.log" | grep -q "info epoch [0-9]*/16:"; then
  fail "a's balancer closed an epoch after it paused: $(tail -n +"$pause_at" "$work/a.log" | grep -m1 "info epoch [0-9]*/16:" | cut -c1-160)"
else
  pass "a's balancer closed no epoch after it paused"
fi
# No platform trains an epoch the run has passed: once the cut began, a0
# and c0 finish only epochs beyond the last one b's balancer had evaluated
# a second before (the last report of an epoch closes it within
# milliseconds, so the balancer's line may come first).
for p in a0 c0; do
  stale=""
  while IFS= read -r line; do
    at=$(line_time "$line")
    later "$cut_at" "$at" || continue
    e=$(sed -E 's/.*\['"$p"'\] epoch ([0-9]+) done.*/\1/' <<<"$line")
    kept=$(awk '
      match($0, /^\[[0-9:.]+\]/) && /info epoch [0-9]+\/16:/ {
        split(substr($0, 2, RLENGTH - 2), h, ":");
        s = h[1] * 3600 + h[2] * 60 + h[3];
        if (s <= t) { sub(/.*info epoch /, ""); sub(/\/.*/, ""); n = $0 }
      }
      END { print n + 0 }' t="$(date -d @"$at" +%H:%M:%S.%N | awk -F: '{ print $1 * 3600 + $2 * 60 + $3 - 1 }')" "$work/b.log")
    [ "$e" -le "$kept" ] && stale="$stale epoch $e (b's balancer at $kept)"
  done < <(grep -h "\[$p\] epoch [0-9]* done" "$work"/*.log)
  if [ -n "$stale" ]; then fail "$p trained epochs the run had passed:$stale"; else pass "$p trained no epoch the run had passed"; fi
done
exits_within 10 a b c
case_end

fi
if [ "$failures" -gt 0 ]; then
  echo "partitions: $failures check(s) failed (logs of each failed case above)"
  exit 1
fi
echo "partitions: every check passed"
