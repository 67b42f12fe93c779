#pragma once
// What a node knows of the cluster, as plain classes the node actor uses:
// the directory of components (its own and those its peers announced in
// their hellos) and the succession of the balancer (who hosts it when its
// node is lost, and which of two stays).

#include "messages/codec.hpp"

#include <caf/actor.hpp>

#include <set>
#include <string>
#include <vector>

namespace eg::actors {

/// One component of a node and its handle.
struct directory_entry {
  messages::component what;
  caf::actor handle;
};

/// Every component known, local and remote, in the order they were learnt.
class directory {
public:
  void add(messages::component what, caf::actor handle);
  /// Replaces everything known of `node` with the components of its hello
  /// and their handles (same order, same length).
  void replace_node(const std::string& node, const std::vector<messages::component>& what,
                    const std::vector<caf::actor>& handles);
  /// Forgets every component of `node`.
  void remove_node(const std::string& node);
  /// Forgets the component of role `r` hosted by `node`.
  void remove(messages::role r, const std::string& node);
  /// Sets the count a component of role `r` hosted by `node` announces
  /// (a balancer's: the epochs of the run it evaluated).
  void set_samples(messages::role r, const std::string& node, uint64_t samples);

  /// The handle of the component of role `r` named `name` (null if none).
  caf::actor find(messages::role r, const std::string& name) const;
  /// Every component of role `r`.
  std::vector<directory_entry> of_role(messages::role r) const;
  /// Every component hosted by `node`.
  std::vector<directory_entry> hosted_by(const std::string& node) const;
  /// The node hosting a balancer that we know of ("" if none).
  std::string balancer_home() const;
  const std::vector<directory_entry>& entries() const { return entries_; }

private:
  std::vector<directory_entry> entries_;
};

/// The nodes in the order they take over the balancer: cluster.balancer
/// first, then the others in cluster-file order.
class succession {
public:
  succession() = default;
  succession(const std::vector<std::string>& file_order, const std::string& balancer_node);

  const std::vector<std::string>& order() const { return order_; }
  /// Position of `node` in the order (order().size() when absent).
  size_t rank(const std::string& node) const;

  /// What node `me` does when no balancer is known: `retry` while peers are
  /// still being dialled (who is there is not known yet), `elect` (start
  /// one) when every node before it in the order was seen to go down
  /// (`lost`), else `wait` (a node before it that is up, or not seen yet
  /// and perhaps starting, has its turn first).
  enum class verdict { wait, retry, elect };
  verdict when_none(const std::string& me, bool dialling, const std::set<std::string>& lost) const;

  /// Whether `me`, reaching the nodes `reachable` (its live peers), is on
  /// the side of a cut network that may host the balancer or the parameter
  /// server: it reaches, itself included, `needed` nodes of the order (0:
  /// more than half of them; exactly half when its side holds the first
  /// node of the order, the cluster's balancer node, which wins a tie). At
  /// most one side of any cut can say yes, so a run never splits in two.
  bool majority(const std::string& me, const std::set<std::string>& reachable,
                int64_t needed = 0) const;

  /// Two balancers (a successor, and the node that came back): whether the
  /// one on `me` gives way to the one on `other`.
  bool gives_way(const std::string& me, const std::string& other) const {
    return rank(other) < rank(me);
  }
  /// The same for two balancers of one run that each evaluated some epochs
  /// of it (two sides of a cut met again): the one that went further stays,
  /// so that the epochs the majority trained are not thrown away for an
  /// older state; with as many epochs, the order decides.
  bool gives_way(const std::string& me, uint64_t my_epochs, const std::string& other,
                 uint64_t other_epochs) const {
    return other_epochs != my_epochs ? other_epochs > my_epochs : gives_way(me, other);
  }

private:
  std::vector<std::string> order_;
};

/// Whether node `me` dials node `other`: of two nodes, the one earlier in
/// the cluster file dials the later one (and again after it went down), so
/// that two nodes never dial each other at once (two connections between
/// the same pair race in CAF's BASP handshake, which keeps one of them).
bool dials(const std::vector<std::string>& file_order, const std::string& me,
           const std::string& other);

} // namespace eg::actors
