#include "actors/platform/platform_state.hpp"
#include "actors/census.hpp"
#include "common/error.hpp"

#include "algorithms/gossip/gossip.hpp"
#include "algorithms/workers.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "storage/store.hpp"
#include "train/trainer.hpp"

#include "config/defaults.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <utility>

namespace eg::actors {
namespace {

using namespace platform_parts;

/// The model, its worker, and a checkpoint restored when there is one.
void build(platform_state& st, platform_args& args) {
  const auto shape = learning::shape_of(*args.train_set);
  auto model = learning::make_classifier(args.train.model, args.seed, shape);
  learning::sgd_options opt{args.train.lr, args.train.momentum, args.train.batch};
  opt.augment = args.augment;
  opt.augment_seed = args.seed * 7919 + std::hash<std::string>{}(args.platform.name);
  const auto device = learning::training_device(args.platform.device);
  st.model = std::make_unique<learning::platform_model>(
    std::make_unique<learning::local_trainer>(model, args.train_set, args.shard, opt, device));
  learning::worker_settings ws;
  ws.platform = args.platform.name;
  ws.members = args.members;
  ws.platforms = args.cluster_platforms;
  ws.strategy = args.strategy;
  ws.edgegossip = args.edgegossip;
  ws.batch = args.train.batch;
  ws.seed = args.seed;
  ws.aggregated = args.aggregated;
  st.worker = learning::make_worker(ws, *st.model);
  st.at.platform = args.platform.name;
  st.worker->start();
  st.guard.emplace(platform_runaway_options(), args.train_set->num_classes());
  if (!args.restore)
    return;
  try {
    learning::load_model(*model, args.restore->model);
    learning::load_optimizer(st.trainer().optimizer(), args.restore->optimizer);
    st.worker->restored(args.restore->gossip_weight);
    st.at.total_iterations = args.restore->iteration;
    st.epochs_done = static_cast<uint32_t>(args.restore->epoch);
    st.last_report = args.last_report;
    spdlog::debug("[{}] restored from its checkpoint after epoch {}", args.platform.name,
                  args.restore->epoch);
  } catch (const std::exception& e) {
    spdlog::error("[{}] its checkpoint does not fit this model ({}): starting afresh",
                  args.platform.name, eg::describe(e));
    auto fresh = learning::make_classifier(args.train.model, args.seed, shape);
    learning::load_model(*model, learning::save_model(*fresh));
    st.model->replace_trainer(
      std::make_unique<learning::local_trainer>(model, args.train_set, args.shard, opt, device));
  }
}

/// A plan from the balancer: the epoch it plans begins (or, trained
/// already, its report goes again).
void receive_plan(self_ptr self, const plan& p) {
  auto& st = self->state;
  if (st.finished)
    return;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (st.paused && st.paused_by && sender && sender.address() != st.paused_by) {
    // Paused by a balancer that has since given way (its node was on a
    // minority side), planned now by the one the cluster kept.
    spdlog::info("[{}] a plan from another balancer than the one that paused it: resuming",
                 st.args.platform.name);
    resume(self);
  }
  if (st.running && p.epoch > st.at.epoch && st.balancer && sender != st.balancer) {
    // A plan from another balancer than the one this epoch's came from, for
    // a later epoch: the run this platform's node was cut off with gave
    // way to the one the majority kept, which has passed this epoch. It is
    // left unfinished (its report would go nowhere, its samples to no
    // epoch), and the plan is taken now.
    spdlog::info("[{}] a plan for epoch {} from another balancer while epoch {} runs: the run "
                 "has passed that epoch, leaving it unfinished",
                 st.args.platform.name, p.epoch + 1, st.at.epoch + 1);
    st.running = false;
    st.next_plan.reset();
    take_plan(self, p, std::move(sender));
    return;
  }
  if (st.running && p.epoch != st.at.epoch) {
    // The running epoch keeps its number (its report must say what was
    // trained); this plan waits for its end.
    spdlog::info("[{}] a plan for epoch {} while epoch {} runs: taken once that one is reported",
                 st.args.platform.name, p.epoch + 1, st.at.epoch + 1);
    st.next_plan.emplace(p, std::move(sender));
    return;
  }
  take_plan(self, p, std::move(sender));
}

/// A platform joining a run starts from the cluster's averaged model,
/// unless it trained already.
void adopt(self_ptr self, const std::string& averaged) {
  auto& st = self->state;
  if (st.at.total_iterations > 0 || st.finished)
    return;  // its own model (trained here, or a checkpoint's) stays
  try {
    st.model->before_write();
    learning::load_model(st.trainer().model(), averaged);
    st.worker->adopted();
    spdlog::info("[{}] starts from the cluster's averaged model", st.args.platform.name);
  } catch (const std::exception& e) {
    spdlog::warn("[{}] kept its initial model: the cluster's averaged model does not load "
                 "({})",
                 st.args.platform.name, eg::describe(e));
  }
}

/// The current parameters and weight, a copy (the parameters change with
/// the next step).
held_weights model_copy(self_ptr self) {
  auto& st = self->state;
  return messages::copy_held(learning::weights_message(
    st.at, st.worker->weight(), learning::to_views(st.model->names(), st.model->params()),
    nullptr));
}

/// The run is over: the final checkpoint, then the node hears it.
void end_run(self_ptr self, const std::string& run) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  st.running = false;
  const auto& loans = st.trainer().loans();
  spdlog::debug("[{}] gossip: {} messages sent from the parameters, which were copied {} "
                "times (a message still queued at the next step or merge)",
                st.args.platform.name, loans.lent(), loans.copies());
  // The node flushes the store once every platform is done: the final
  // checkpoint is in the store by then.
  checkpoint(self, [self, run](bool) {
    self->send(self->state.args.node, done_atom::value, messages::role::platform,
               self->state.args.platform.name, run);
  });
}

/// Pause, resume, checkpoint, stop.
caf::result<bool> take_control(self_ptr self, const control& c) {
  auto& st = self->state;
  switch (c.verb) {
    case messages::verb::pause:
      pause(self);
      return true;
    case messages::verb::resume:
      resume(self);
      return true;
    case messages::verb::refuse:
      // The balancer will not take this platform (its data or settings are
      // not the cluster's): it trains nothing, and its node stops, saying why.
      st.running = false;
      spdlog::error("[{}] the balancer refused this platform: {}", st.args.platform.name,
                    c.argument);
      self->send(st.args.node, control_atom::value,
                 control{messages::verb::refuse,
                         "the cluster refused platform " + st.args.platform.name + ": "
                           + c.argument});
      return true;
    case messages::verb::stop:
      st.running = false;
      [[fallthrough]];
    case messages::verb::checkpoint: {
      auto rp = self->make_response_promise<bool>();
      checkpoint(self, [rp](bool ok) mutable { rp.deliver(ok); });
      return rp;
    }
    default:
      return make_error(ec::bad_request, std::string{"a platform does not take "}
                                           + messages::to_string(c.verb));
  }
}

platform_actor::behavior_type platform(self_ptr self, platform_args args) {
  auto& st = self->state;
  build(st, args);
  st.args = std::move(args);
  return {
    [self](plan_atom, const plan& p) { receive_plan(self, p); },
    [self](adopt_atom, const std::string& averaged) { adopt(self, averaged); },
    [self](norm_atom, const std::string& text) {
      auto& st = self->state;
      try {
        use_normalisation(self, data::parse_normalisation(text));
      } catch (const std::exception& e) {
        ++st.refused;
        spdlog::warn("[{}] refused the cluster's normalisation: {}", st.args.platform.name,
                     eg::describe(e));
      }
    },
    [self](step_atom) { step(self); },
    [self](merge_atom, const held_weights& message) {
      auto& st = self->state;
      try {
        st.worker->merge(message);
      } catch (const learning::refused_message& e) {
        ++st.refused;
        spdlog::warn("[{}] refused weights: {}", st.args.platform.name, e.what());
      }
      if (st.waiting && st.running && !st.paused && st.worker->awaited(st.at.total_iterations).empty())
        queue_step(self);
    },
    [self](unsent_atom, const std::string& to, const held_weights& message) {
      auto& st = self->state;
      try {
        st.worker->unsent(to, message);
      } catch (const std::exception& e) {
        spdlog::warn("[{}] a message to {} that was not sent could not be taken back: {}",
                     st.args.platform.name, to, e.what());
      }
    },
    [self](overlap_atom, uint64_t k) {
      auto& st = self->state;
      if (!st.waiting || st.at.total_iterations != k)
        return;  // the message came in time
      auto late = st.worker->give_up(k);
      if (!st.worker->awaited(k).empty()) {
        // Still awaited (a parameter-server worker's first server): on waiting.
        self->delayed_send(self, defaults::overlap_wait, overlap_atom::value, k);
        return;
      }
      spdlog::debug("[{}] step {}: no message from {} peer(s) within the overlap wait; not "
                    "waited for again this epoch",
                    st.args.platform.name, k + 1, late);
      if (st.running && !st.paused)
        queue_step(self);
    },
    [self](cut_atom, uint32_t epoch) {
      auto& st = self->state;
      if (!st.running || st.at.epoch != epoch)
        return;
      spdlog::info("[{}] epoch {} cut at its deadline after {} of {} points",
                   st.args.platform.name, epoch + 1, st.samples, st.planned);
      finish_epoch(self);
    },
    [self](peers_atom, std::vector<std::string>& live) { self->state.worker->peers(live); },
    [self](server_atom, caf::actor server, std::string& lane) {
      auto& st = self->state;
      const bool moved = server != st.server;
      st.server = std::move(server);
      carry_out(self, st.worker->server_changed(static_cast<bool>(st.server), moved, lane, st.now()));
      if (st.waiting && st.running && !st.paused && st.worker->awaited(st.at.total_iterations).empty())
        queue_step(self);  // the server the first step waited for
    },
    [self](pull_atom, const std::string& from, held_global_model& model) {
      auto& st = self->state;
      carry_out(self, st.worker->lane_model(from, std::move(model), st.now()));
    },
    [self](pull_atom, uint64_t generation) {
      auto& st = self->state;
      carry_out(self, st.worker->lane_wait_over(generation, st.now()));
    },
    [self](rescale_atom, double factor) {
      auto& st = self->state;
      if (!(factor > 0) || !std::isfinite(factor) || !st.worker->rescale(factor))
        spdlog::warn("[{}] ignored a rescale by {}", st.args.platform.name, factor);
    },
    [self](weights_atom) -> held_weights { return model_copy(self); },
    [self](weights_atom, const std::string& balancer_lane) -> caf::result<held_weights> {
      auto& st = self->state;
      if (balancer_lane.empty() || !st.args.mixer)
        return model_copy(self);
      return self->delegate(st.args.mixer, weights_atom::value, balancer_lane, model_copy(self));
    },
    [self](done_atom, const std::string& run) { end_run(self, run); },
    [self](control_atom, const control& c) { return take_control(self, c); },
  };
}

} // namespace

platform_args platform_args::of(const config::cluster_config& cluster,
                                const config::platform_config& platform,
                                const std::string& node) {
  platform_args pa;
  pa.node_name = node;
  pa.platform = platform;
  pa.train = cluster.train;
  pa.augment = cluster.data.augment;
  pa.strategy = cluster.strategy;
  pa.edgegossip = cluster.edgegossip;
  pa.seed = cluster.seed;
  for (auto& p : cluster.platforms())
    pa.members.push_back(p.name);
  pa.cluster_platforms = static_cast<int64_t>(pa.members.size());
  return pa;
}

platform_actor spawn_platform(caf::actor_system& sys, platform_args args) {
  auto what = "platform " + args.platform.name;
  return census::counted(sys.spawn(platform, std::move(args)), what);
}

} // namespace eg::actors
