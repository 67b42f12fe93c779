#include "actors/server.hpp"

#include "config/defaults.hpp"
#include "learning/gossip.hpp"
#include "learning/model.hpp"
#include "learning/parameter_server.hpp"
#include "learning/serialize.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <utility>

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;

/// The server's private message: time for a checkpoint.
using server_impl = server_actor::extend<caf::reacts_to<tick_atom>>;

/// An answer the schedule holds back (BSP's round, SSP's bound).
using answer_promise = caf::typed_response_promise<held_weights, int64_t, double>;

struct server_state {
  static inline const char* name = "server";
  server_args args;
  std::shared_ptr<learning::classifier> model;  // the checkpoints' serialiser
  std::vector<std::string> names;  // parameter names, wire order
  std::unique_ptr<learning::global_model> global;
  std::unique_ptr<learning::commit_schedule> schedule;
  std::map<std::string, answer_promise> waiting;
  std::map<caf::actor_addr, std::string> monitored;  // worker handles seen
  clock::time_point start = clock::now();
  uint64_t refused = 0;
  std::vector<store_actor> stores;  // every node's (from the node)
  std::optional<uint64_t> saved_version;  // of the last checkpoint sent
  bool store_error_said = false;
  bool periods_said = false;

  double now() const { return std::chrono::duration<double>(clock::now() - start).count(); }

  /// The global model as a message (a copy: it changes with the next commit).
  held_weights model_message() const {
    held_weights h;
    h.sender = "server";
    h.value.gossip_weight = 1;
    h.value.iteration = global->version();
    h.value.tensors = learning::to_views(names, global->params());
    return messages::copy_weights(h);
  }
};

using self_ptr = server_impl::stateful_pointer<server_state>;

/// Checkpoints the global model to every node's store, unless it did not
/// change since the last (the first is saved at once: a successor never
/// takes a checkpoint of an earlier run for this one's).
void save(self_ptr self) {
  auto& st = self->state;
  if (st.stores.empty() || st.saved_version == st.global->version())
    return;
  {
    torch::NoGradGuard no_grad;
    auto params = learning::parameters(*st.model);
    for (size_t i = 0; i < params.size(); ++i)
      params[i].copy_(st.global->params()[i]);
  }
  const auto bytes = learning::save_model(*st.model);
  const auto version = st.global->version();
  const auto unix_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count());
  st.saved_version = version;
  for (auto& store : st.stores)
    self
      ->request(store, defaults::checkpoint_timeout, checkpoint_atom::value,
                std::string{storage::server_checkpoint}, unix_ms, version, 1.0, bytes,
                std::string{})
      .then([](bool) {},
            [self](caf::error& err) {
              if (!std::exchange(self->state.store_error_said, true))
                spdlog::warn("server: a store did not take its checkpoint: {}",
                             self->system().render(err));
            });
}

/// Answers every released worker: its own request (`own`, if it is among
/// them) or the promise it has been waiting on.
void answer(self_ptr self, const std::vector<learning::release>& released,
            const std::string& own, answer_promise* own_promise) {
  auto& st = self->state;
  if (released.empty())
    return;
  auto model = st.model_message();
  for (auto& r : released) {
    if (r.worker == own && own_promise) {
      own_promise->deliver(model, r.next.steps, r.next.seconds);
      continue;
    }
    auto i = st.waiting.find(r.worker);
    if (i == st.waiting.end())
      continue;
    i->second.deliver(model, r.next.steps, r.next.seconds);
    st.waiting.erase(i);
  }
}

server_impl::behavior_type server(self_ptr self, server_args args) {
  auto& st = self->state;
  st.model = learning::make_classifier(args.model, args.seed);
  st.names = learning::parameter_names(*st.model);
  uint64_t version = 0;
  if (args.restore) {
    try {
      learning::load_model(*st.model, args.restore->model);
      version = args.restore->iteration;
      spdlog::info("server: continues from its checkpoint of version {}", version);
    } catch (const std::exception& e) {
      // The seed's model again: commits go on from there.
      st.model = learning::make_classifier(args.model, args.seed);
      spdlog::error("server: its checkpoint of version {} does not load ({}): starting from "
                    "the initial model",
                    args.restore->iteration, e.what());
    }
    args.restore.reset();
  }
  std::vector<torch::Tensor> initial;
  for (auto& p : learning::parameters(*st.model))
    initial.push_back(p.detach().clone());
  st.global = std::make_unique<learning::global_model>(
    initial, static_cast<int64_t>(std::max<size_t>(args.workers.size(), 1)));
  if (version > 0)
    st.global->restore(initial, version);
  self->delayed_send(self, defaults::server_checkpoint_interval, tick_atom::value);
  st.schedule = std::make_unique<learning::commit_schedule>(args.schedule, args.workers);
  st.args = std::move(args);
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    auto i = st.monitored.find(dm.source);
    if (i == st.monitored.end())
      return;
    auto name = i->second;
    st.monitored.erase(i);
    st.waiting.erase(name);
    spdlog::info("server: worker {} is down; it holds no one back", name);
    answer(self, st.schedule->leave(name), {}, nullptr);
  });
  return {
    [self](commit_atom, const held_weights& update, double loss, double overhead,
           bool resting) -> caf::result<held_weights, int64_t, double> {
      auto& st = self->state;
      const auto& w = update.sender;
      if (std::find(st.args.workers.begin(), st.args.workers.end(), w) == st.args.workers.end())
        return make_error(ec::bad_request, "server: '" + w + "' is no platform of the cluster");
      try {
        st.global->apply(learning::from_views(update.value.tensors, st.names, st.global->params()));
      } catch (const std::exception& e) {
        ++st.refused;
        spdlog::warn("server: refused the commit of {}: {}", w, e.what());
        return make_error(ec::bad_request, "server: commit of " + w + " refused: " + e.what());
      }
      if (auto sender = self->current_sender()) {
        auto addr = caf::actor_cast<caf::actor_addr>(sender);
        if (!st.monitored.count(addr)) {
          st.monitored[addr] = w;
          self->monitor(caf::actor_cast<caf::actor>(sender));
        }
      }
      auto released = st.schedule->commit(w, st.now(), loss, overhead, resting);
      if (!st.periods_said && st.schedule->step_seconds() > 0) {
        st.periods_said = true;
        spdlog::info("server: check period {:.2f} s, least commit interval {:.2f} s (measured: "
                     "the median worker's step takes {:.1f} ms)",
                     st.schedule->check_period(), st.schedule->min_interval(),
                     1e3 * st.schedule->step_seconds());
      }
      auto rp = self->make_response_promise<held_weights, int64_t, double>();
      bool mine = false;
      for (auto& r : released)
        mine = mine || r.worker == w;
      if (!mine)
        st.waiting[w] = rp;
      answer(self, released, w, &rp);
      return rp;
    },
    [self](peers_atom, const std::vector<std::string>& live, std::vector<store_actor>& stores) {
      auto& st = self->state;
      const bool first = st.stores.empty();
      st.stores = std::move(stores);
      if (first)
        save(self);
      std::set<std::string> up(live.begin(), live.end());
      for (auto& w : st.args.workers) {
        auto v = st.schedule->workers().find(w);
        const bool counted = v != st.schedule->workers().end() && !v->second.resting;
        if (!up.count(w) && counted) {
          st.waiting.erase(w);
          answer(self, st.schedule->leave(w), {}, nullptr);
        }
      }
    },
    [self](weights_atom) -> held_weights { return self->state.model_message(); },
    [self](tick_atom) {
      save(self);
      self->delayed_send(self, defaults::server_checkpoint_interval, tick_atom::value);
    },
  };
}

} // namespace

learning::commit_settings commit_settings_of(const config::strategy_config& s) {
  learning::commit_settings c;
  switch (s.name) {
    case config::strategy_name::bsp: c.model = learning::sync_model::bsp; break;
    case config::strategy_name::ssp: c.model = learning::sync_model::ssp; break;
    case config::strategy_name::async: c.model = learning::sync_model::async; break;
    case config::strategy_name::adacomm: c.model = learning::sync_model::adacomm; break;
    case config::strategy_name::adsp: c.model = learning::sync_model::adsp; break;
    default:
      throw std::invalid_argument(std::string{"strategy '"} + config::to_string(s.name)
                                  + "' has no parameter server");
  }
  c.commit_steps = s.commit_steps;
  c.staleness = static_cast<uint64_t>(s.staleness);
  c.check_period = s.check_period;
  c.min_interval = s.min_interval;
  c.target_loss = s.target_loss;
  return c;
}

server_actor spawn_server(caf::actor_system& sys, server_args args) {
  return caf::actor_cast<server_actor>(sys.spawn(server, std::move(args)));
}

} // namespace eg::actors
