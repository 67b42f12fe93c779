#pragma once
// Who a platform may send to at iteration k: the communication graph of
// gossip training, apart from how a message is mixed in. No torch, no CAF.
//
// Platforms are named; `members` is the cluster's platform list in
// cluster-file order (the same on every node), which gives each platform its
// index i. The topologies:
//
//   uniform      k peers (strategy.out_peers, 1 by default) drawn uniformly
//                at random among the live ones, afresh every iteration:
//                randomized gossip (Boyd, Ghosh, Prabhakar, Shah,
//                "Randomized Gossip Algorithms", IEEE Trans. Inf. Theory
//                2006), as in EdgeGossip (Han et al., IEEE TPDS 2021) with
//                k = 1. Random out-peers every round; undirected in
//                expectation.
//   exponential  the "1-peer exponential graph" of Stochastic Gradient Push
//                (Assran, Loizou, Ballas, Rabbat, ICML 2019): i sends to
//                (i + 2^(k mod m)) mod n. Directed and time-varying, as in
//                Sparse-Push (Aketi, Singh, Rabaey, "Sparse-Push: Communication- &
//                Energy-Efficient Decentralized Distributed Learning over
//                Directed & Time-Varying Graphs with non-IID Datasets",
//                arXiv 2021), so mixing must be column-stochastic
//                (push-sum: Kempe, Dobra, Gehrke, FOCS 2003;
//                subgradient-push: Nedic, Olshevsky, "Distributed
//                Optimization over Time-Varying Directed Graphs", IEEE TAC
//                2015).
//   ring         i sends to (i + 1) mod n: directed and static.
//   full         every live peer at every iteration (fully connected).
//
// A platform that goes down leaves the graph: the directed graphs are built
// over the live members only (in cluster-file order, n and i counted among
// them), so the ring closes over the gap and the exponential graph stays
// strongly connected within each period. Push-sum does not need the same
// graph on every platform at every instant (each sender splits its own
// mass), so views of who is live that differ for a moment do no harm.

#include "config/registry.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace eg::learning {

/// Who a platform may send to at iteration k.
class topology {
public:
  virtual ~topology() = default;
  virtual std::string name() const = 0;
  /// The peers platform `self` sends to at its iteration `k`, chosen among
  /// `live` (peers currently reachable, never containing self); may be
  /// empty. `rng` for randomized topologies.
  virtual std::vector<std::string> targets(uint64_t k, const std::string& self,
                                           const std::vector<std::string>& live,
                                           std::mt19937_64& rng) const = 0;
  /// Whether the graph is directed and time-varying (push-sum needs
  /// column-stochastic mixing, not symmetric).
  virtual bool directed() const = 0;
  /// The peers that send to `self` at iteration k, among `live`, as every
  /// platform with the same view of `live` computes its targets; nullopt
  /// when the graph does not say (randomized topologies).
  virtual std::optional<std::vector<std::string>> sources(uint64_t k, const std::string& self,
                                                          const std::vector<std::string>& live) const;
};

/// `out_peers` distinct peers uniformly at random among `live` (all of them
/// when fewer are live, none if `live` is empty). One peer is the draw
/// `live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)]`,
/// the mixer's before this seam, so a seeded run picks the same peers.
/// Undirected in expectation.
class uniform_random : public topology {
public:
  /// Throws std::invalid_argument for out_peers = 0.
  explicit uniform_random(size_t out_peers = 1);
  std::string name() const override;
  std::vector<std::string> targets(uint64_t k, const std::string& self,
                                   const std::vector<std::string>& live,
                                   std::mt19937_64& rng) const override;
  bool directed() const override;
  size_t out_peers() const { return out_peers_; }

private:
  size_t out_peers_;
};

/// Every live peer at every iteration.
class fully_connected : public topology {
public:
  std::string name() const override;
  std::vector<std::string> targets(uint64_t k, const std::string& self,
                                   const std::vector<std::string>& live,
                                   std::mt19937_64& rng) const override;
  bool directed() const override;
  std::optional<std::vector<std::string>> sources(uint64_t k, const std::string& self,
                                                  const std::vector<std::string>& live) const override;
};

/// A directed graph over a fixed member list in which every member has one
/// out-neighbour per iteration, given by its index among the live members
/// (the members, in their order, that are `self` or in `live`): a member
/// that is down leaves the graph. `self` not a member, or alone, sends to
/// no one. Throws std::invalid_argument on duplicate members.
class member_graph : public topology {
public:
  explicit member_graph(std::vector<std::string> members);
  std::vector<std::string> targets(uint64_t k, const std::string& self,
                                   const std::vector<std::string>& live,
                                   std::mt19937_64& rng) const override;
  bool directed() const override;
  std::optional<std::vector<std::string>> sources(uint64_t k, const std::string& self,
                                                  const std::vector<std::string>& live) const override;
  const std::vector<std::string>& members() const { return members_; }

protected:
  /// The index the member at index `i` of `n` >= 2 (live) members sends to
  /// at iteration k.
  virtual size_t target_index(uint64_t k, size_t i, size_t n) const = 0;

private:
  /// The live members (self and `live`) in member order, and self's index
  /// among them (nullopt when self is not a member).
  std::pair<std::vector<const std::string*>, std::optional<size_t>>
  up(const std::string& self, const std::vector<std::string>& live) const;

  std::vector<std::string> members_;
};

/// The 1-peer exponential graph (Assran et al., Stochastic Gradient Push,
/// ICML 2019): with n live members and self at index i, at iteration k it sends
/// to index (i + 2^(k mod m)) mod n, where m = period(n) is the number of
/// j >= 0 with 2^j < n (n=2: 1, n=4: 2, n=5: 3). Each iteration's graph is a
/// permutation (out- and in-degree 1); the union over m iterations is
/// strongly connected.
class exponential : public member_graph {
public:
  using member_graph::member_graph;
  std::string name() const override;
  /// m: the number of distinct powers of two below n (1 when n <= 2).
  static size_t period(size_t n);

protected:
  size_t target_index(uint64_t k, size_t i, size_t n) const override;
};

/// The directed ring: index i sends to (i + 1) mod n at every iteration.
class ring : public member_graph {
public:
  using member_graph::member_graph;
  std::string name() const override;

protected:
  size_t target_index(uint64_t k, size_t i, size_t n) const override;
};

/// The wait of tau-overlap SGP (Assran et al., ICML 2019):
/// before its step k + 1 a platform waits until it has the message each of
/// its in-neighbours sent at iteration k + 1 - tau, so no platform runs more
/// than tau iterations ahead of those that feed it and every push-sum weight
/// comes back within a bounded number of iterations. Without it, platforms
/// of unequal speed (8 threads on 2 cores are enough) split their weight
/// every iteration while the slow ones send rarely: most of the mass ends up
/// on a few platforms, and the others' steps are washed out at the next
/// merge (8 platforms, 12 epochs: dense SGP 0.80 without the wait, 0.883
/// with tau = 1; docs/ALGORITHMS.md, "Push-sum SGD").
///
/// A source that stays silent for the wait's time limit (gone, paused, or
/// with fewer iterations this epoch) is not waited for again until the
/// next epoch; the topology drops a peer that goes down.
class overlap_gate {
public:
  /// tau >= 1 (0 turns the wait off: `needed` is then always empty).
  explicit overlap_gate(uint64_t tau) : tau_(tau) {}
  uint64_t tau() const { return tau_; }
  /// A message `from` that the sender sent at its iteration `iteration`.
  void heard(const std::string& from, uint64_t iteration);
  /// The iteration whose messages step k + 1 needs (nullopt: none, k + 1
  /// <= tau, or the wait is off).
  std::optional<uint64_t> needed_iteration(uint64_t k) const;
  /// Of `sources`, those whose message of iteration `iteration` has not
  /// arrived and that are still waited for.
  std::vector<std::string> missing(uint64_t iteration, const std::vector<std::string>& sources) const;
  /// Stops waiting for these until `new_epoch`.
  void give_up(const std::vector<std::string>& sources);
  void new_epoch() { given_up_.clear(); }

private:
  uint64_t tau_;
  std::map<std::string, uint64_t> newest_;  // sender -> newest iteration heard
  std::set<std::string> given_up_;
};

using topology_factory =
  std::function<std::unique_ptr<topology>(std::vector<std::string> members, size_t out_peers)>;
/// The topologies, by name (config::topologies() holds their summaries).
config::registry<topology_factory>& topology_rules();

/// Registers a topology: a static object of this type beside its code.
struct topology_registration {
  topology_registration(const std::string& name, std::string summary, topology_factory make);
};

/// "uniform" (with `out_peers`), "exponential", "ring" or "full" over
/// `members` (cluster-file order; unused by "uniform" and "full"), or
/// another registered one. Throws std::invalid_argument naming an unknown
/// name and the known ones.
std::unique_ptr<topology> make_topology(const std::string& name, std::vector<std::string> members,
                                        size_t out_peers = 1);

/// The names make_topology knows, in alphabetical order.
std::vector<std::string> topology_names();

} // namespace eg::learning
