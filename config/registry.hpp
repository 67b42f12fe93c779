#pragma once
// Registries of what a cluster file may name: the training strategies, the
// gossip topologies and the models. Each entry is registered by the file
// that implements it, with a static registration object beside its code
// (algorithms/gossip/gossip.cpp, algorithms/gossip/topology.cpp,
// algorithms/ps/commit_schedule.cpp, models/*.cpp), so that a new strategy,
// topology or model is that file and nothing else: config validates the
// name against these registries, and the code that builds one looks it up
// in its own registry, filled by the same registration.
//
// Registration happens during static initialisation (the libraries that
// register are linked whole, CMakeLists.txt); afterwards the registries are
// only read, from any thread. A test may add an entry of its own before it
// starts an actor system.

#include "common/error.hpp"

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace eg::config {

/// Names and what each stands for (T), in alphabetical order.
template <class T>
class registry {
public:
  /// `what` names an entry in messages: "strategy", "topology", "model".
  explicit registry(std::string what) : what_(std::move(what)) {}

  /// Adds `name`; throws std::logic_error when it is empty or already there
  /// (two registrations of one name are a build defect, not a user's error).
  void add(const std::string& name, T entry) {
    if (name.empty())
      throw std::logic_error("a " + what_ + " registered without a name");
    if (!entries_.emplace(name, std::move(entry)).second)
      throw std::logic_error(what_ + " '" + name + "' is registered twice");
  }
  /// The entry of `name`, or nullptr.
  const T* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  /// The entry of `name`; throws std::invalid_argument naming the known ones.
  const T& at(const std::string& name) const {
    if (auto* e = find(name)) return *e;
    throw unknown_name("unknown " + what_ + " '" + name + "' (known: " + known() + ")");
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }
  /// The names, comma-separated (for messages).
  std::string known() const {
    std::string out;
    for (const auto& [name, entry] : entries_) out += (out.empty() ? "" : ", ") + name;
    return out;
  }
  const std::string& what() const { return what_; }

private:
  std::string what_;
  std::map<std::string, T> entries_;
};

/// The family of a training strategy: which worker trains a platform
/// (algorithms/workers.cpp) and which messages it exchanges.
enum class strategy_family : uint8_t {
  gossip,            ///< GoSGD's exchange of weights and gossip weights
  push_sum,          ///< push-sum over a directed topology (SGP, Sparse-Push, SCSP)
  parameter_server,  ///< workers commit to a parameter server (bsp, ssp, async, adacomm, adsp)
};

/// What config and the actors need to know of a strategy, beside its name.
struct strategy_traits {
  strategy_family family = strategy_family::gossip;
  /// It runs without the epoch barrier, whatever strategy.schedule says.
  bool asynchronous = false;
  /// EdgeGossip's predictor, balancer and accuracy-aware trainer are on.
  bool balanced = false;
  /// One line on what it is (`edgegossip list`, errors).
  std::string summary;
  /// Its messages carry a few coordinates, not whole models (Sparse-Push,
  /// SCSP): under EdgeGossip the overlap wait defaults to none
  /// (strategy_config::overlap_tau).
  bool sparse = false;
};

/// The registries (function-local statics: safe to fill from any static
/// initialiser).
registry<strategy_traits>& strategies();
registry<std::string>& topologies();  ///< name -> one line on who sends to whom
registry<std::string>& models();      ///< name -> one line on the model (train.model)

} // namespace eg::config
