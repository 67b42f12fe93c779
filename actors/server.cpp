#include "actors/server.hpp"
#include "actors/census.hpp"
#include "common/error.hpp"

#include "config/defaults.hpp"
#include "algorithms/gossip/gossip.hpp"
#include "models/model.hpp"
#include "algorithms/ps/parameter_server.hpp"
#include "models/serialize.hpp"
#include "messages/lane.hpp"
#include "messages/rendezvous.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <variant>

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;

/// The server's private message: time for a checkpoint.
using server_impl = server_actor::extend<caf::reacts_to<tick_atom>>;

/// The answer to a commit whose update came in the typed message: the
/// model goes with it.
using answer_promise = caf::typed_response_promise<held_global_model, int64_t, double>;
/// The answer to a commit whose update came on the weights lane: the
/// model's version; the model goes to the worker on the lane.
using lane_promise = caf::typed_response_promise<uint64_t, int64_t, double>;

/// A worker waiting for its answer (BSP's round, SSP's bound).
struct waiting_worker {
  std::variant<answer_promise, lane_promise> promise;
};

/// The control half of a lane commit, waiting for its update.
struct lane_commit {
  lane_promise promise;
  double loss = 0;
  double overhead = 0;
  bool resting = false;
};

/// Commits whose halves travel apart, keyed by worker and commit number.
using commit_halves = messages::rendezvous<std::pair<std::string, uint64_t>, lane_commit, held_commit>;

struct server_state {
  static inline const char* name = "server";
  server_args args;
  std::shared_ptr<learning::classifier> model;  // the checkpoints' serialiser
  std::vector<std::string> names;  // parameter names, wire order
  std::unique_ptr<learning::global_model> global;
  std::unique_ptr<learning::commit_schedule> schedule;
  std::map<std::string, waiting_worker> waiting;
  std::map<caf::actor_addr, std::string> monitored;  // worker handles seen
  /// Lane commits: the typed half and the update, paired.
  commit_halves halves{std::chrono::duration<double>(defaults::lane_commit_wait).count()};
  /// The weights lane endpoint of each worker's node ("" or absent: the
  /// worker is reached through CAF).
  std::map<std::string, messages::lane_endpoint> lanes;
  clock::time_point start = clock::now();
  uint64_t refused = 0;
  std::vector<store_actor> stores;  // every node's (from the node)
  std::optional<uint64_t> saved_version;  // of the last checkpoint sent
  bool store_error_said = false;
  bool periods_said = false;

  double now() const { return std::chrono::duration<double>(clock::now() - start).count(); }

  /// The global model as a message (a copy: it changes with the next commit).
  held_global_model model_message() const {
    held_global_model h;
    h.sender = std::string{server_name};
    h.value.version = global->version();
    h.value.tensors = learning::to_views(names, global->params());
    return messages::copy_held(h);
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

/// Answers every released worker: the one whose commit is being handled
/// (`own`, with its promise) or one that has been waiting. Workers on
/// another node's lane get the model there (encoded once for all of them)
/// and its version in the answer.
void answer(self_ptr self, const std::vector<learning::release>& released,
            const std::string& own, std::optional<waiting_worker> own_promise) {
  auto& st = self->state;
  if (released.empty())
    return;
  auto model = st.model_message();
  const auto version = model.value.version;
  messages::shared_gathered on_lane;  // the model, encoded for the lane
  for (auto& r : released) {
    std::optional<waiting_worker> to;
    if (r.worker == own && own_promise) {
      to = std::move(own_promise);
      own_promise.reset();
    } else if (auto i = st.waiting.find(r.worker); i != st.waiting.end()) {
      to = std::move(i->second);
      st.waiting.erase(i);
    }
    if (!to)
      continue;
    if (auto* p = std::get_if<answer_promise>(&to->promise)) {
      p->deliver(model, r.next.steps, r.next.seconds);
      continue;
    }
    auto& p = std::get<lane_promise>(to->promise);
    auto endpoint = st.lanes.find(r.worker);
    if (!st.args.lane || endpoint == st.lanes.end()) {
      p.deliver(make_error(ec::unreachable, "server: no weights lane to the node of " + r.worker));
      continue;
    }
    if (!on_lane) {
      messages::envelope e;
      e.hdr = {st.args.cluster_id, messages::protocol_version, std::string{server_name}};
      e.payload = model.value;
      on_lane = std::make_shared<const messages::gathered>(
        messages::encode_gathered(e, model.hold));
    }
    // The model first, then its version: the worker takes the two together.
    st.args.lane->send(endpoint->second, r.worker, on_lane);
    p.deliver(version, r.next.steps, r.next.seconds);
  }
}

/// Applies worker `w`'s update and lets the schedule decide whom it
/// releases; answers them (`promise`: the committing worker's own).
void apply(self_ptr self, const std::string& w, const held_commit& update, double loss,
           double overhead, bool resting, waiting_worker promise) {
  auto& st = self->state;
  auto refuse = [&](const std::string& why) {
    ++st.refused;
    spdlog::warn("server: refused the commit of {}: {}", w, why);
    auto err = make_error(ec::bad_request, "server: commit of " + w + " refused: " + why);
    std::visit([&](auto& p) { p.deliver(err); }, promise.promise);
  };
  if (std::find(st.args.workers.begin(), st.args.workers.end(), w) == st.args.workers.end())
    return refuse("'" + w + "' is no platform of the cluster");
  try {
    st.global->apply(learning::from_views(update.value.tensors, st.names, st.global->params()));
  } catch (const std::exception& e) {
    return refuse(e.what());
  }
  auto released = st.schedule->commit(w, st.now(), loss, overhead, resting);
  if (!st.periods_said && st.schedule->step_seconds() > 0) {
    st.periods_said = true;
    spdlog::info("server: check period {:.2f} s, least commit interval {:.2f} s (measured: "
                 "the median worker's step takes {:.1f} ms)",
                 st.schedule->check_period(), st.schedule->min_interval(),
                 1e3 * st.schedule->step_seconds());
  }
  bool mine = false;
  for (auto& r : released)
    mine = mine || r.worker == w;
  if (!mine) {
    st.waiting.insert_or_assign(w, std::move(promise));
    answer(self, released, {}, std::nullopt);
  } else {
    answer(self, released, w, std::move(promise));
  }
}

/// Watches the worker that sent the message being handled (its loss
/// releases whoever waits for it).
void monitor_sender(self_ptr self, const std::string& w) {
  auto& st = self->state;
  if (auto sender = self->current_sender()) {
    auto addr = caf::actor_cast<caf::actor_addr>(sender);
    if (!st.monitored.count(addr)) {
      st.monitored[addr] = w;
      self->monitor(caf::actor_cast<caf::actor>(sender));
    }
  }
}

/// Answers lane commits whose update never came (ec::lost: the worker
/// commits it again with its next) and drops updates nobody committed.
void expire_halves(self_ptr self) {
  auto& st = self->state;
  auto gone = st.halves.expire(st.now());
  for (auto& [key, c] : gone.firsts) {
    spdlog::warn("server: the update of {}'s commit {} did not arrive on the weights lane in {:.0f} "
                 "s: nothing of it applied",
                 key.first, key.second, st.halves.wait());
    c.promise.deliver(make_error(ec::lost, "server: your update did not arrive on the weights "
                                           "lane; nothing of it was applied"));
  }
  if (gone.seconds > 0)
    spdlog::warn("server: dropped {} update(s) from the weights lane that no commit claimed",
                 gone.seconds);
}

server_impl::behavior_type server(self_ptr self, server_args args) {
  auto& st = self->state;
  st.model = learning::make_classifier(args.model, args.seed, args.shape);
  st.names = learning::parameter_names(*st.model);
  uint64_t version = 0;
  if (args.restore) {
    try {
      learning::load_model(*st.model, args.restore->model);
      version = args.restore->iteration;
      spdlog::info("server: continues from its checkpoint of version {}", version);
    } catch (const std::exception& e) {
      // The seed's model again: commits go on from there.
      st.model = learning::make_classifier(args.model, args.seed, args.shape);
      spdlog::error("server: its checkpoint of version {} does not load ({}): starting from "
                    "the initial model",
                    args.restore->iteration, eg::describe(e));
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
    answer(self, st.schedule->leave(name), {}, std::nullopt);
  });
  return {
    [self](commit_atom, const held_commit& update, double loss, double overhead,
           bool resting) -> caf::result<held_global_model, int64_t, double> {
      monitor_sender(self, update.sender);
      auto rp = self->make_response_promise<held_global_model, int64_t, double>();
      apply(self, update.sender, update, loss, overhead, resting, {rp});
      return rp;
    },
    [self](commit_atom, const std::string& w, uint64_t number, double loss, double overhead,
           bool resting) -> caf::result<uint64_t, int64_t, double> {
      auto& st = self->state;
      monitor_sender(self, w);
      auto rp = self->make_response_promise<uint64_t, int64_t, double>();
      expire_halves(self);
      auto both = st.halves.first({w, number}, lane_commit{rp, loss, overhead, resting}, st.now());
      if (both)
        apply(self, w, both->second, loss, overhead, resting, {rp});
      return rp;
    },
    [self](commit_atom, held_commit& update) {
      auto& st = self->state;
      const auto w = update.sender;
      const auto number = update.value.number;
      auto both = st.halves.second({w, number}, std::move(update), st.now());
      if (both)
        apply(self, w, both->second, both->first.loss, both->first.overhead, both->first.resting,
              {both->first.promise});
    },
    [self](peers_atom, const std::vector<std::string>& live, const std::vector<std::string>& lanes,
           std::vector<store_actor>& stores) {
      auto& st = self->state;
      const bool first = st.stores.empty();
      st.stores = std::move(stores);
      if (first)
        save(self);
      st.lanes.clear();
      for (size_t i = 0; i < live.size() && i < lanes.size(); ++i) {
        if (lanes[i].empty())
          continue;
        try {
          st.lanes[live[i]] = messages::parse_endpoint(lanes[i]);
        } catch (const messages::lane_error& e) {
          spdlog::warn("server: worker {} is answered through CAF: {}", live[i], e.what());
        }
      }
      std::set<std::string> up(live.begin(), live.end());
      for (auto& w : st.args.workers) {
        auto v = st.schedule->workers().find(w);
        const bool counted = v != st.schedule->workers().end() && !v->second.resting;
        if (!up.count(w) && counted) {
          st.waiting.erase(w);
          answer(self, st.schedule->leave(w), {}, std::nullopt);
        }
      }
    },
    [self](weights_atom) -> held_global_model { return self->state.model_message(); },
    [self](tick_atom) {
      save(self);
      expire_halves(self);
      self->delayed_send(self, defaults::server_checkpoint_interval, tick_atom::value);
    },
  };
}

} // namespace

learning::commit_settings commit_settings_of(const config::strategy_config& s) {
  learning::commit_settings c;
  const auto* model = learning::sync_models().find(s.name);
  if (!model)
    throw argument_error("strategy '" + s.name + "' has no parameter server");
  c.model = *model;
  c.commit_steps = s.commit_steps;
  c.staleness = static_cast<uint64_t>(s.staleness);
  c.check_period = s.check_period;
  c.min_interval = s.min_interval;
  c.target_loss = s.target_loss;
  return c;
}

server_actor spawn_server(caf::actor_system& sys, server_args args) {
  return census::counted(caf::actor_cast<server_actor>(sys.spawn(server, std::move(args))),
                         "parameter server");
}

} // namespace eg::actors
