#!/usr/bin/env bash
# Node processes on hosts that are not 127.0.0.1, over slow links: three
# hosts in network namespaces of their own on a Linux bridge, each with its
# own address and a token bucket on its link (tc tbf, 40 Mbit/s; with netem,
# where the kernel has it, 5 ms of delay and 0.1 % loss too), train a run to
# the end. From a fourth host (its link limited alike), the inspection
# console attaches to node a,
# Prometheus' text is fetched from every node's metrics port, and a fourth
# node joins the running cluster with `edgegossip node --join` (no cluster
# file there) and trains in it to the end.
#
#   tests/cluster/hosts.sh EDGEGOSSIP
#
# Checks: every node exits 0; one run directory with every epoch once in
# its cluster.csv; each node's weights lane listens on its host at its
# port + 1; every link was limited; the console from the fourth host shows
# the three nodes and their platforms, and later the joined one's; each
# node's /metrics names it and counts what its platform trained; the
# joined node's platform trained epochs of the run and every node learnt it.
#
# Needs root, iproute2 (ip, tc) and curl; exits 77 (skipped, with a
# message) where they cannot be had. Exit 0: every check passed; otherwise
# the nodes' logs are printed.
set -uo pipefail

bin=${1:?usage: hosts.sh EDGEGOSSIP}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tag="eh$$"
net="10.$(( 20 + ($$ + 7) % 200 )).$(( $$ / 200 % 250 ))"
work=$(mktemp -d)
failures=0
epochs=12

name=hosts
# shellcheck source=tests/cluster/netns.sh
. "$(dirname "$0")/netns.sh"
command -v tc >/dev/null || skip "no tc (iproute2)"
command -v curl >/dev/null || skip "no curl"
make_hosts

# Each node host's link: netem's delay and loss where the kernel has netem,
# under a token bucket.
netem=1
for i in 1 2 3 4; do
  ns="${tag}n$i"
  if [ "$netem" -eq 1 ] &&
     ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay 5ms loss 0.1% 2>/dev/null; then
    ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate 40mbit burst 256kb \
      latency 400ms || skip "cannot add a token bucket under netem"
  else
    if [ "$netem" -eq 1 ]; then
      echo "hosts: no netem in this kernel: links limited by a token bucket only (no delay, no loss)"
      netem=0
    fi
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate 40mbit burst 256kb latency 400ms ||
      skip "cannot add a token bucket (tc tbf)"
  fi
done

cat > "$work/cluster.toml" <<EOF
[cluster]
id = "hosts"
balancer = "a"
secret = "hosts-test-secret"

[data]
partition = "iid"
train_samples = 30000
test_samples = 1000

[train]
model = "lenet5"
epochs = $epochs

[strategy]
name = "gosgd"
schedule = "sync"
exchange_probability = 0.05

[storage]
dir = "$work/store"

[output]
dir = "$work/runs"
EOF
k=0
for n in a b c; do
  k=$((k + 1))
  cat >> "$work/cluster.toml" <<EOF

[[nodes]]
name = "$n"
host = "$net.$k"
port = 47301
metrics_port = 9101
  [[nodes.platforms]]
  name = "${n}0"
  threads = 1
EOF
done

k=0
for n in a b c; do
  k=$((k + 1))
  ( ip netns exec "${tag}n$k" "$bin" node --config "$work/cluster.toml" --node "$n" \
      > "$work/$n.log" 2>&1
    echo "$?" > "$work/$n.exit" ) &
done

# The console and the scrapes from the fourth host, once the first epoch is
# over (the run lasts several more).
for _ in $(seq 1 240); do grep -q "epoch 1/$epochs:" "$work/a.log" 2>/dev/null && break; sleep 0.5; done
console=$(ip netns exec "${tag}n4" "$bin" console "$net.1:47301" --config "$work/cluster.toml" \
            --once 2>&1)
code=$?
if [ "$code" -eq 0 ] && grep -q "a0" <<<"$console" && grep -q "b0" <<<"$console" &&
   grep -q "c0" <<<"$console"; then
  pass "the console on host 4 attached to node a ($net.1) and shows platforms a0, b0, c0"
else
  fail "the console on host 4 (exit $code): $console"
fi
k=0
for n in a b c; do
  k=$((k + 1))
  page=$(ip netns exec "${tag}n4" curl -sf --max-time 5 "http://$net.$k:9101/metrics")
  if grep -q "^edgegossip_node_info{.*node=\"$n\"" <<<"$page" &&
     grep -q "^edgegossip_samples_trained_total{platform=\"${n}0\"}" <<<"$page"; then
    pass "node $n's metrics fetched from host 4 ($net.$k:9101)"
  else
    fail "node $n's metrics from host 4: $(head -c 400 <<<"$page")"
  fi
done

# A fourth node joins from host 4 through node b (not the balancer's), with
# no cluster file: its address ($net.4) and port (47301, as b's) are found.
( ip netns exec "${tag}n4" "$bin" node --join "$net.2:47301" --name d \
    --secret hosts-test-secret --cluster hosts --set "storage.dir=\"$work/store\"" > "$work/d.log" 2>&1
  echo "$?" > "$work/d.exit" ) &
for _ in $(seq 1 240); do grep -q "platform d0 joined from node d" "$work/a.log" 2>/dev/null && break; sleep 0.5; done
console=$(ip netns exec "${tag}n4" "$bin" console "$net.1:47301" --config "$work/cluster.toml" \
            --once 2>&1)
if grep -q "d0" <<<"$console"; then
  pass "node d joined from host 4 ($net.4); the console shows its platform d0"
else
  fail "the console after node d joined: $console"
fi

for _ in $(seq 1 400); do
  [ -f "$work/a.exit" ] && [ -f "$work/b.exit" ] && [ -f "$work/c.exit" ] && [ -f "$work/d.exit" ] &&
    break
  sleep 1
done
if [ "$(cat "$work/d.exit" 2>/dev/null)" = 0 ] && grep -q "\[d0\] epoch [0-9]* done" "$work/d.log"; then
  pass "node d (joined) trained $(grep -c "\[d0\] epoch [0-9]* done" "$work/d.log") epochs and exited 0"
else
  fail "node d (joined): exit $(cat "$work/d.exit" 2>/dev/null || echo "none: still running")"
fi
if grep -q "not a peer" "$work/d.log"; then
  fail "node d's gossip was refused: $(grep -m1 "not a peer" "$work/d.log")"
fi
for n in b c; do
  if grep -q "node d joined the cluster ($net.4:47301" "$work/$n.log"; then
    pass "node $n learnt that node d joined, at $net.4:47301"
  else
    fail "node $n did not learn of node d"
  fi
done
k=0
for n in a b c; do
  k=$((k + 1))
  if [ "$(cat "$work/$n.exit" 2>/dev/null)" = 0 ]; then
    pass "node $n exited 0"
  else
    fail "node $n: exit $(cat "$work/$n.exit" 2>/dev/null || echo "none: still running")"
  fi
  if grep -q "weights lane listening on $net.$k:47302" "$work/$n.log"; then
    pass "node $n's weights lane listened on $net.$k:47302 (its port + 1)"
  else
    fail "node $n's weights lane is not on $net.$k:47302"
  fi
  if ip netns exec "${tag}n$k" tc -s qdisc show dev eth0 | grep -q "qdisc tbf"; then
    pass "host $k's link was limited: $(ip netns exec "${tag}n$k" tc qdisc show dev eth0 | tr '\n' ' ')"
  else
    fail "host $k's link has no token bucket"
  fi
done
runs=$(ls -d "$work"/runs/*/ 2>/dev/null | wc -l)
if [ "$runs" -eq 1 ]; then
  got=$(tail -n +2 "$work"/runs/*/cluster.csv | wc -l)
  if [ "$got" -eq "$epochs" ]; then
    pass "one run directory, $epochs epochs in its cluster.csv"
  else
    fail "the run's cluster.csv has $got epochs, not $epochs"
  fi
else
  fail "$runs run directories"
fi

if [ "$failures" -gt 0 ]; then
  for f in "$work"/*.log; do echo "--- $f"; tail -40 "$f" | cut -c1-240; done
  echo "hosts: $failures check(s) failed"
  exit 1
fi
echo "hosts: every check passed"
