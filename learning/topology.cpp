#include "learning/topology.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

namespace eg::learning {

// --- uniform -----------------------------------------------------------------

std::string uniform_random::name() const { return "uniform"; }

std::vector<std::string> uniform_random::targets(uint64_t, const std::string&,
                                                 const std::vector<std::string>& live,
                                                 std::mt19937_64& rng) const {
  if (live.empty())
    return {};
  std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
  return {live[pick(rng)]};
}

bool uniform_random::directed() const { return false; }

// --- member_graph ------------------------------------------------------------

member_graph::member_graph(std::vector<std::string> members) : members_(std::move(members)) {
  std::unordered_set<std::string> seen;
  for (const auto& m : members_)
    if (!seen.insert(m).second)
      throw std::invalid_argument("topology: platform '" + m + "' is a member twice");
}

std::optional<size_t> member_graph::index_of(const std::string& name) const {
  auto it = std::find(members_.begin(), members_.end(), name);
  if (it == members_.end())
    return std::nullopt;
  return static_cast<size_t>(it - members_.begin());
}

std::vector<std::string> member_graph::targets(uint64_t k, const std::string& self,
                                               const std::vector<std::string>& live,
                                               std::mt19937_64&) const {
  const auto i = index_of(self);
  if (!i || members_.size() < 2)
    return {};
  const auto& to = members_[target_index(k, *i)];
  // No re-routing: a target that is down means no message this iteration.
  if (std::find(live.begin(), live.end(), to) == live.end())
    return {};
  return {to};
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

size_t exponential::target_index(uint64_t k, size_t i) const {
  const size_t n = members().size();
  const size_t hop = size_t{1} << (k % period(n));  // < n, so i + hop < 2n
  return (i + hop) % n;
}

// --- ring --------------------------------------------------------------------

std::string ring::name() const { return "ring"; }

size_t ring::target_index(uint64_t, size_t i) const { return (i + 1) % members().size(); }

// --- factory -----------------------------------------------------------------

std::vector<std::string> topology_names() { return {"uniform", "exponential", "ring"}; }

std::unique_ptr<topology> make_topology(const std::string& name, std::vector<std::string> members) {
  if (name == "uniform")
    return std::make_unique<uniform_random>();
  if (name == "exponential")
    return std::make_unique<exponential>(std::move(members));
  if (name == "ring")
    return std::make_unique<ring>(std::move(members));
  std::string known;
  for (const auto& n : topology_names())
    known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown topology '" + name + "' (known: " + known + ")");
}

} // namespace eg::learning
