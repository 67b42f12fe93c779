#pragma once
// The evaluator averages the platforms' models (learning::average_by_class)
// on the balancer's node, as an actor of its own, so that the balancer
// answers reports and the console while it runs. Each node with test data
// has a tester, which tests the averaged model on that data: the samples
// never leave their node, only the model and three counts travel.

#include "actors/interfaces.hpp"
#include "models/model_shape.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <string>

namespace eg::data {
class dataset;
}
namespace eg::learning {
using data::dataset;
}

namespace eg::actors {

struct evaluator_args {
  std::string model;  ///< train.model
  uint64_t seed = 1;
  learning::model_shape shape;  ///< the data's: what the model is built for
  /// The averaged model is written here after each average (for the run
  /// directory's model.pt); may be null.
  std::shared_ptr<std::string> latest;
};

/// Spawns an evaluator: an actor of its own, so a scheduler thread other
/// than the balancer's does the work.
evaluator_actor spawn_evaluator(caf::actor_system& sys, evaluator_args args);

struct tester_args {
  std::string model;  ///< train.model
  uint64_t seed = 1;
  learning::model_shape shape;
  /// This node's test data (not empty), and its size.
  std::shared_ptr<const learning::dataset> test_set;
  uint64_t samples = 0;
};

/// Spawns a node's tester. A model that does not fit (other names or
/// shapes) is an error answered to the balancer, which leaves the node out.
tester_actor spawn_tester(caf::actor_system& sys, tester_args args);

} // namespace eg::actors
