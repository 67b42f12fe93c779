#include "actors/server.hpp"

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

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;

/// An answer the schedule holds back (BSP's round, SSP's bound).
using answer_promise = caf::typed_response_promise<held_weights, int64_t, double>;

struct server_state {
  static inline const char* name = "server";
  server_args args;
  std::vector<std::string> names;  // parameter names, wire order
  std::unique_ptr<learning::global_model> global;
  std::unique_ptr<learning::commit_schedule> schedule;
  std::map<std::string, answer_promise> waiting;
  std::map<caf::actor_addr, std::string> monitored;  // worker handles seen
  clock::time_point start = clock::now();
  uint64_t refused = 0;

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

using self_ptr = server_actor::stateful_pointer<server_state>;

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

server_actor::behavior_type server(self_ptr self, server_args args) {
  auto& st = self->state;
  auto model = learning::make_classifier(args.model, args.seed);
  st.names = learning::parameter_names(*model);
  std::vector<torch::Tensor> initial;
  for (auto& p : learning::parameters(*model))
    initial.push_back(p.detach().clone());
  st.global = std::make_unique<learning::global_model>(
    initial, static_cast<int64_t>(std::max<size_t>(args.workers.size(), 1)));
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
      auto rp = self->make_response_promise<held_weights, int64_t, double>();
      bool mine = false;
      for (auto& r : released)
        mine = mine || r.worker == w;
      if (!mine)
        st.waiting[w] = rp;
      answer(self, released, w, &rp);
      return rp;
    },
    [self](peers_atom, const std::vector<std::string>& live) {
      auto& st = self->state;
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
  return sys.spawn(server, std::move(args));
}

} // namespace eg::actors
