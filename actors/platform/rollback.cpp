// A gossip platform whose model ran away (a training loss that is not a
// finite number, or whose average is far above a uniform guess's: a
// learning rate too high for its data, a bad batch) goes back to its newest
// checkpoint of the run, slower, instead of training and sending a model of
// NaNs. Its peers refuse such a model (gossip.cpp), so nothing spreads;
// without the rollback the platform itself would stay lost for the rest of
// the run.

#include "actors/platform/platform_state.hpp"

#include "common/error.hpp"
#include "config/defaults.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

namespace eg::actors::platform_parts {

bool model_finite(platform_state& st) {
  return !learning::first_non_finite(st.model->params());
}

double rollback_slowdown(const platform_state& st) {
  return std::pow(st.args.train.rollback_lr_factor, static_cast<double>(st.rollbacks));
}

namespace {

struct saved_state {
  uint64_t epoch = 0;
  std::string model, optimizer;
};

/// Loads `back` (the initial model when there is none), multiplies the
/// learning rate by train.rollback_lr_factor and gives the worker its step.
void rolled_back(self_ptr self, const learning::step_done& pending, const std::string& why,
                 const std::optional<saved_state>& back) {
  auto& st = self->state;
  const auto& name = st.args.platform.name;
  st.epoch_lr *= st.args.train.rollback_lr_factor;  // (rollbacks counted it already)
  std::string where;
  try {
    st.model->before_write();
    auto& optimizer = st.trainer().optimizer();
    // Momentum that ran away with the model goes with it.
    optimizer.state().clear();
    if (back) {
      learning::load_model(st.trainer().model(), back->model);
      learning::load_optimizer(optimizer, back->optimizer);
      where = "its checkpoint after epoch " + std::to_string(back->epoch);
    } else {
      auto fresh = learning::make_classifier(st.args.train.model, st.args.seed,
                                             learning::shape_of(*st.args.train_set));
      learning::load_model(st.trainer().model(), learning::save_model(*fresh));
      where = "where it began (no checkpoint of this run yet)";
    }
  } catch (const std::exception& e) {
    spdlog::error("[{}] could not go back to its checkpoint ({}); it leaves the run",
                  name, eg::describe(e));
    self->quit();
    return;
  }
  st.trainer().set_lr(st.epoch_lr);  // a loaded optimizer brings its own
  st.worker->adopted();  // the parameters changed under it; its weight stays
  st.rolling_back = false;
  st.guard->restart();
  spdlog::warn("[{}] its model ran away ({}): back to {}, learning rate x {} "
               "= {:.3g} (rollback {} of at most {}, train.max_rollbacks)",
               name, why, where, st.args.train.rollback_lr_factor, st.epoch_lr, st.rollbacks,
               st.args.train.max_rollbacks);
  carry_out(self, st.worker->stepped(pending, st.at));
}

} // namespace

learning::runaway_options platform_runaway_options() {
  learning::runaway_options o;
  o.loss_rise = std::numeric_limits<double>::infinity();  // off (a merge moves the loss)
  o.stuck_after = 0;                                       // off (dead units: split's concern)
  o.loss_chance = 10;
  return o;
}

void roll_back(self_ptr self, learning::step_done pending, const std::string& why) {
  auto& st = self->state;
  const auto name = st.args.platform.name;
  if (st.rollbacks >= st.args.train.max_rollbacks) {
    // The balancer sees the platform down, as one whose node died (under
    // EdgeGossip the survivors take over its shard once the failed share
    // passes edgegossip.f_threshold).
    spdlog::error("[{}] its model ran away again ({}) after {} rollbacks "
                  "(train.max_rollbacks): it leaves the run",
                  name, why, st.rollbacks);
    st.running = false;
    self->quit();
    return;
  }
  ++st.rollbacks;
  st.rolling_back = true;
  // A restart's checkpoint of an earlier epoch of this run counts as this
  // run's (it was saved before the platform was built).
  std::optional<std::pair<uint64_t, uint64_t>> resumed;
  if (st.args.restore)
    resumed.emplace(st.args.restore->epoch, st.args.restore->iteration);
  self
    ->request(st.args.store, defaults::checkpoint_timeout, restore_atom::value, name)
    .then(
      [self, pending, why, resumed](bool found, uint64_t epoch, uint64_t iteration, double,
                                     double saved_unix, std::string& model,
                                     std::string& optimizer) {
        auto& st = self->state;
        std::optional<saved_state> back;
        const bool this_run = saved_unix + 1.0 >= st.created_unix ||
                              (resumed && resumed->first == epoch && resumed->second == iteration);
        if (found && this_run && epoch <= st.epochs_done)
          back = saved_state{epoch, std::move(model), std::move(optimizer)};
        rolled_back(self, pending, why, back);
      },
      [self, pending, why](caf::error& err) {
        spdlog::warn("[{}] its store did not give its checkpoint back ({}): it starts again "
                     "from where it began",
                     self->state.args.platform.name, caf::to_string(err));
        rolled_back(self, pending, why, std::nullopt);
      });
}

} // namespace eg::actors::platform_parts
