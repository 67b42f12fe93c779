#include "bench/wan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace eg::bench {

namespace {

/// Runs `command` quietly; true when it exited 0.
bool ok(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

std::string number(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

} // namespace

wan_hosts::wan_hosts(std::string tag, std::string net, std::vector<double> rates, double delay_ms)
    : tag_(std::move(tag)), net_(std::move(net)), rates_(std::move(rates)), delay_ms_(delay_ms) {
  if (geteuid() != 0)
    throw wan_unavailable("network namespaces and tc need root");
  if (!ok("ip -V"))
    throw wan_unavailable("no ip (iproute2)");
  if (!ok("tc -V"))
    throw wan_unavailable("no tc (iproute2)");
  remove();  // what a run that was killed left
  auto need = [&](const std::string& command, const std::string& what) {
    if (!ok(command)) {
      remove();
      throw wan_unavailable("cannot " + what + " here (" + command + ")");
    }
  };
  need("ip link add " + tag_ + "b type bridge", "make a bridge");
  need("ip link set " + tag_ + "b up", "bring a bridge up");
  for (size_t i = 0; i < rates_.size(); ++i) {
    need("ip netns add " + ns(i), "make network namespaces");
    need("ip link add " + veth(i) + " type veth peer name eth0 netns " + ns(i),
         "make veth pairs");
    need("ip link set " + veth(i) + " master " + tag_ + "b up", "attach a veth to the bridge");
    need("ip -n " + ns(i) + " addr add " + address(i) + "/24 dev eth0", "give a host an address");
    need("ip -n " + ns(i) + " link set eth0 up", "bring a host's link up");
    need("ip -n " + ns(i) + " link set lo up", "bring a host's loopback up");
  }
  try {
    for (size_t i = 0; i < rates_.size(); ++i)
      limit(i, rates_[i], false);
  } catch (const wan_unavailable&) {
    remove();
    throw;
  }
}

wan_hosts::~wan_hosts() { remove(); }

std::string wan_hosts::ns(size_t i) const { return tag_ + "n" + std::to_string(i + 1); }
std::string wan_hosts::veth(size_t i) const { return tag_ + "v" + std::to_string(i + 1); }
std::string wan_hosts::address(size_t i) const { return net_ + "." + std::to_string(i + 1); }

std::vector<std::string> wan_hosts::prefix(size_t i) const {
  return {"ip", "netns", "exec", ns(i)};
}

void wan_hosts::set_rate(size_t i, double mbit) {
  limit(i, mbit, true);
  rates_.at(i) = mbit;
}

void wan_hosts::limit(size_t i, double mbit, bool change) {
  if (!(mbit > 0))
    throw std::invalid_argument("wan: a link's rate must be positive");
  // Each host's uplink: its eth0, where its sockets' priorities still
  // hold (a packet that crosses into the bridge loses its skb priority, so
  // a queue on the bridge's end of the veth could not put heartbeats before
  // bulk frames, and a host behind a 2 Mbit/s downlink was cut off in one
  // run of three). What a host receives is limited by its senders' uplinks.
  const std::string pre = "ip netns exec " + ns(i) + " ";
  const std::string dev = "eth0";
  // A bucket deep enough for the rate at the kernel's timer (a tenth of a
  // second's worth, at least 16 kB); a queue of half a second.
  const double bytes_per_second = mbit * 1e6 / 8;
  const auto burst = static_cast<long long>(std::max(16000.0, bytes_per_second / 10));
  const auto packets = static_cast<long long>(std::max(20.0, bytes_per_second / 2 / 1500));
  const std::string qdisc = pre + "tc qdisc replace dev " + dev + " ";
  if (delay_ms_ > 0 && (!change || delayed_)) {
    if (ok(qdisc + "root netem delay " + number(delay_ms_) + "ms rate " + number(mbit)
           + "mbit limit 10000")) {
      delayed_ = true;
      return;
    }
  }
  if (!ok(qdisc + "root handle 1: tbf rate " + number(mbit) + "mbit burst "
          + std::to_string(burst) + " latency 500ms"))
    throw wan_unavailable("cannot limit a link with tc's tbf here");
  // Inside the bucket, the three-band priority queue by the packets' TOS
  // that a host's own default queue (pfifo_fast) is: the weights lane
  // marks its sockets as bulk, so heartbeats, plans and reports on the
  // node connections go first. With tbf's one FIFO, dense gossip on a
  // 2 Mbit/s link held heartbeats back past cluster.peer_timeout, and
  // runs of the profile lost nodes when c's link fell. The queue holds
  // half a second (the device's queue length, in packets).
  if (!ok(pre + "ip link set dev " + dev + " txqueuelen " + std::to_string(packets))
      || !ok(qdisc + "parent 1:1 handle 10: pfifo_fast"))
    throw wan_unavailable("cannot put a priority queue behind a link's token bucket here");
}

void wan_hosts::remove() {
  for (size_t i = 0; i < std::max<size_t>(rates_.size(), 8); ++i) {
    ok("ip netns del " + ns(i));
    ok("ip link del " + veth(i));
  }
  ok("ip link del " + tag_ + "b");
}

} // namespace eg::bench
