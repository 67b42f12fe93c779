#include "algorithms/gossip/topology.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

namespace eg::learning {

// --- uniform -----------------------------------------------------------------

uniform_random::uniform_random(size_t out_peers) : out_peers_(out_peers) {
  if (out_peers == 0)
    throw argument_error("topology: out_peers must be at least 1");
}

std::string uniform_random::name() const { return "uniform"; }

std::vector<std::string> uniform_random::targets(uint64_t, const std::string&,
                                                 const std::vector<std::string>& live,
                                                 std::mt19937_64& rng) const {
  if (live.empty())
    return {};
  if (out_peers_ == 1) {
    std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
    return {live[pick(rng)]};
  }
  if (out_peers_ >= live.size())
    return live;
  // A partial Fisher-Yates shuffle: the first k of a uniform permutation.
  auto pool = live;
  for (size_t j = 0; j < out_peers_; ++j) {
    std::uniform_int_distribution<size_t> pick(j, pool.size() - 1);
    std::swap(pool[j], pool[pick(rng)]);
  }
  pool.resize(out_peers_);
  return pool;
}

bool uniform_random::directed() const { return false; }

// --- full --------------------------------------------------------------------

std::string fully_connected::name() const { return "full"; }

std::vector<std::string> fully_connected::targets(uint64_t, const std::string&,
                                                  const std::vector<std::string>& live,
                                                  std::mt19937_64&) const {
  return live;
}

bool fully_connected::directed() const { return false; }

std::optional<std::vector<std::string>> fully_connected::sources(
  uint64_t, const std::string&, const std::vector<std::string>& live) const {
  return live;
}

std::optional<std::vector<std::string>> topology::sources(uint64_t, const std::string&,
                                                          const std::vector<std::string>&) const {
  return std::nullopt;
}

// --- member_graph ------------------------------------------------------------

member_graph::member_graph(std::vector<std::string> members) : members_(std::move(members)) {
  std::unordered_set<std::string> seen;
  for (const auto& m : members_)
    if (!seen.insert(m).second)
      throw argument_error("topology: platform '" + m + "' is a member twice");
}

std::pair<std::vector<const std::string*>, std::optional<size_t>>
member_graph::up(const std::string& self, const std::vector<std::string>& live) const {
  // The graph over the live members: self and the live peers, in member order.
  std::vector<const std::string*> up;
  std::optional<size_t> i;
  for (const auto& m : members_) {
    if (m == self)
      i = up.size();
    else if (std::find(live.begin(), live.end(), m) == live.end())
      continue;
    up.push_back(&m);
  }
  return {std::move(up), i};
}

std::vector<std::string> member_graph::targets(uint64_t k, const std::string& self,
                                               const std::vector<std::string>& live,
                                               std::mt19937_64&) const {
  auto [up, i] = this->up(self, live);
  if (!i || up.size() < 2)
    return {};
  return {*up[target_index(k, *i, up.size())]};
}

std::optional<std::vector<std::string>> member_graph::sources(
  uint64_t k, const std::string& self, const std::vector<std::string>& live) const {
  auto [up, i] = this->up(self, live);
  std::vector<std::string> from;
  if (!i || up.size() < 2)
    return from;
  for (size_t j = 0; j < up.size(); ++j)
    if (j != *i && target_index(k, j, up.size()) == *i)
      from.push_back(*up[j]);
  return from;
}

bool member_graph::directed() const { return true; }

// --- exponential -------------------------------------------------------------

std::string exponential::name() const { return "exponential"; }

size_t exponential::period(size_t n) {
  size_t m = 0;
  while (m < 64 && (size_t{1} << m) < n)
    ++m;
  return std::max<size_t>(m, 1);
}

size_t exponential::target_index(uint64_t k, size_t i, size_t n) const {
  const size_t hop = size_t{1} << (k % period(n));  // < n, so i + hop < 2n
  return (i + hop) % n;
}

// --- ring --------------------------------------------------------------------

std::string ring::name() const { return "ring"; }

size_t ring::target_index(uint64_t, size_t i, size_t n) const { return (i + 1) % n; }

// --- overlap_gate ------------------------------------------------------------

void overlap_gate::heard(const std::string& from, uint64_t iteration) {
  auto& n = newest_[from];
  n = std::max(n, iteration);
}

std::optional<uint64_t> overlap_gate::needed_iteration(uint64_t k) const {
  if (tau_ == 0 || k + 1 <= tau_)
    return std::nullopt;
  return k + 1 - tau_;
}

std::vector<std::string> overlap_gate::missing(uint64_t iteration,
                                               const std::vector<std::string>& sources) const {
  std::vector<std::string> out;
  for (const auto& s : sources) {
    if (given_up_.count(s))
      continue;
    auto n = newest_.find(s);
    if (n == newest_.end() || n->second < iteration)
      out.push_back(s);
  }
  return out;
}

void overlap_gate::give_up(const std::vector<std::string>& sources) {
  given_up_.insert(sources.begin(), sources.end());
}

// --- factory -----------------------------------------------------------------

config::registry<topology_factory>& topology_rules() {
  static config::registry<topology_factory> r{"topology"};
  return r;
}

topology_registration::topology_registration(const std::string& name, std::string summary,
                                             topology_factory make) {
  config::topologies().add(name, std::move(summary));
  topology_rules().add(name, std::move(make));
}

std::vector<std::string> topology_names() { return topology_rules().names(); }

std::unique_ptr<topology> make_topology(const std::string& name, std::vector<std::string> members,
                                        size_t out_peers) {
  return topology_rules().at(name)(std::move(members), out_peers);
}

namespace {

const topology_registration uniform_topology{
  "uniform", "out_peers peers drawn uniformly at random among the live ones, every iteration",
  [](std::vector<std::string>, size_t out_peers) {
    return std::make_unique<uniform_random>(out_peers);
  }};
const topology_registration full_topology{
  "full", "every live peer", [](std::vector<std::string>, size_t) {
    return std::make_unique<fully_connected>();
  }};
const topology_registration exponential_topology{
  "exponential", "SGP's directed, time-varying 1-peer exponential graph",
  [](std::vector<std::string> members, size_t) {
    return std::make_unique<exponential>(std::move(members));
  }};
const topology_registration ring_topology{
  "ring", "a directed ring in cluster-file order", [](std::vector<std::string> members, size_t) {
    return std::make_unique<ring>(std::move(members));
  }};

} // namespace

} // namespace eg::learning
