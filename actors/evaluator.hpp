#pragma once
// The evaluator: averages the platforms' models (learning::average_by_class)
// and evaluates the average on the test set, as an actor of its own, so that
// the balancer answers reports and the console while it runs.

#include "actors/interfaces.hpp"
#include "learning/model_shape.hpp"

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
  /// May be null (a node without test data): the evaluation then gives
  /// NaN loss and accuracy.
  std::shared_ptr<const learning::dataset> test_set;
  /// The averaged model is written here after each evaluation (for the run
  /// directory's model.pt); may be null.
  std::shared_ptr<std::string> latest;
};

/// Spawns an evaluator: an actor of its own, so a scheduler thread other
/// than the balancer's does the work.
evaluator_actor spawn_evaluator(caf::actor_system& sys, evaluator_args args);

} // namespace eg::actors
