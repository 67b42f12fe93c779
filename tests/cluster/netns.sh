# Sourced by tests/cluster/partitions.sh and tests/cluster/hosts.sh: hosts of their own for
# node processes. Four network namespaces ${tag}n1..4, each with the address
# $net.N on eth0, a veth pair ${tag}vN to the Linux bridge ${tag}b0 (and a
# second bridge ${tag}b1, up and empty, for moving hosts to another side).
# The sourcing script sets `name` (its name in messages), `tag`, `net` and
# `work` (its scratch directory, removed at exit with every process whose
# command line names it); `failures` counts fail's.

skip() { echo "$name: skipped: $*"; exit 77; }
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

cleanup() {
  pkill -f "$work/" 2>/dev/null
  sleep 0.5
  pkill -9 -f "$work/" 2>/dev/null
  for i in 1 2 3 4; do ip netns del "${tag}n$i" 2>/dev/null; ip link del "${tag}v$i" 2>/dev/null; done
  ip link del "${tag}b0" 2>/dev/null
  ip link del "${tag}b1" 2>/dev/null
  rm -rf "$work"
}

trap cleanup EXIT

# make_hosts: the bridges and the four hosts; skips (exit 77, with a
# message) where they cannot be made.
make_hosts() {
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "no ip (iproute2)"
  ip link add "${tag}b0" type bridge 2>/dev/null || skip "cannot make a bridge here"
  ip link add "${tag}b1" type bridge || skip "cannot make a second bridge"
  ip link set "${tag}b0" up && ip link set "${tag}b1" up
  for i in 1 2 3 4; do
    ip netns add "${tag}n$i" || skip "cannot make network namespaces here"
    ip link add "${tag}v$i" type veth peer name eth0 netns "${tag}n$i" || skip "cannot make veth pairs"
    ip link set "${tag}v$i" master "${tag}b0" up
    ip -n "${tag}n$i" addr add "$net.$i/24" dev eth0
    ip -n "${tag}n$i" link set eth0 up
    ip -n "${tag}n$i" link set lo up
  done
}
