#pragma once
// Who a platform may send to at iteration k: the communication graph of
// gossip training, apart from how a message is mixed in. No torch, no CAF.
//
// Platforms are named; `members` is the cluster's platform list in
// cluster-file order (the same on every node), which gives each platform its
// index i. The topologies:
//
//   uniform      one peer uniformly at random among the live ones, every
//                iteration: randomized gossip (Boyd, Ghosh, Prabhakar, Shah,
//                "Randomized Gossip Algorithms", IEEE Trans. Inf. Theory
//                2006), as in EdgeGossip (Han et al., IEEE TPDS 2021).
//                Undirected in expectation; today's behaviour.
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
//
// The directed graphs do not re-route: when the one member a platform is to
// send to is not live, it sends to no one that iteration (an empty target
// list). Sending elsewhere instead would change the graph, so the mixing
// weights would no longer be the ones push-sum is built for.

#include <cstddef>
#include <cstdint>
#include <memory>
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
};

/// One peer uniformly at random among `live` (none if `live` is empty):
/// `live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)]`,
/// exactly the draw the mixer made before this seam, so a seeded run picks
/// the same peers. Undirected in expectation.
class uniform_random : public topology {
public:
  std::string name() const override;
  std::vector<std::string> targets(uint64_t k, const std::string& self,
                                   const std::vector<std::string>& live,
                                   std::mt19937_64& rng) const override;
  bool directed() const override;
};

/// A directed graph over a fixed member list in which every member has one
/// out-neighbour per iteration, given by its index. The target is dropped
/// (no re-routing) when it is not live; `self` not a member, or a cluster of
/// one, sends to no one. Throws std::invalid_argument on duplicate members.
class member_graph : public topology {
public:
  explicit member_graph(std::vector<std::string> members);
  std::vector<std::string> targets(uint64_t k, const std::string& self,
                                   const std::vector<std::string>& live,
                                   std::mt19937_64& rng) const override;
  bool directed() const override;
  const std::vector<std::string>& members() const { return members_; }

protected:
  /// The index the member at index `i` (of n >= 2) sends to at iteration k.
  virtual size_t target_index(uint64_t k, size_t i) const = 0;

private:
  std::optional<size_t> index_of(const std::string& name) const;
  std::vector<std::string> members_;
};

/// The 1-peer exponential graph (Assran et al., Stochastic Gradient Push,
/// ICML 2019): with n members and self at index i, at iteration k it sends
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
  size_t target_index(uint64_t k, size_t i) const override;
};

/// The directed ring: index i sends to (i + 1) mod n at every iteration.
class ring : public member_graph {
public:
  using member_graph::member_graph;
  std::string name() const override;

protected:
  size_t target_index(uint64_t k, size_t i) const override;
};

/// "uniform", "exponential" or "ring" over `members` (cluster-file order;
/// unused by "uniform"). Throws std::invalid_argument naming an unknown name
/// and the known ones.
std::unique_ptr<topology> make_topology(const std::string& name, std::vector<std::string> members);

/// The names make_topology knows, in the order above.
std::vector<std::string> topology_names();

} // namespace eg::learning
