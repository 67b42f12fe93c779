#include "actors/platform/predictor.hpp"
#include "actors/census.hpp"
#include "common/error.hpp"

#include "algorithms/edgegossip/predictor.hpp"
#include "storage/store.hpp"

#include "config/defaults.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

namespace eg::actors {
namespace {

/// Contention is a property of the machine, not of a platform: every
/// predictor of this process shares one monitor, which samples when its
/// newest sample is half a second old, so 1,024 platforms in a process read
/// /proc twice a second, not 4,096 times (bench scale).
learning::contention_monitor& machine() {
  static learning::contention_monitor m;
  return m;
}

struct predictor_state {
  static inline const char* name = "predictor";
  predictor_args args;
  learning::slowdown_model model;
  learning::link_model link;  // not saved: one epoch teaches it again
  uint64_t unsaved = 0;
};

using self_ptr = predictor_actor::stateful_pointer<predictor_state>;

predictor_actor::behavior_type predictor(self_ptr self, predictor_args args) {
  auto& st = self->state;
  if (!args.restore.empty()) {
    try {
      st.model.restore(args.restore);
      spdlog::info("[{}] predictor restored {} samples", args.platform, st.model.size());
    } catch (const std::exception& e) {
      spdlog::warn("[{}] predictor samples not restored: {}", args.platform, eg::describe(e));
    }
  }
  st.args = std::move(args);
  machine().refresh();  // starts the shared sampler's clock with the first predictor
  self->delayed_send(self, defaults::contention_sampling, tick_atom::value);
  return {
    [self](observe_atom, double seconds, uint64_t samples) {
      auto& st = self->state;
      if (samples == 0 || !(seconds > 0) || !std::isfinite(seconds))
        return;  // nothing measured (or a clock gone wrong): nothing to learn
      // The contention those seconds of training ran under.
      machine().refresh();
      st.model.observe(machine().last(seconds), seconds / static_cast<double>(samples));
      // Persist every 10 observations: a restarted node starts warm.
      if (++st.unsaved >= 10) {
        st.unsaved = 0;
        self->send(st.args.store, store_atom::value,
                   std::string{storage::name(storage::family::predictor)},
                   storage::key(st.args.platform, 0), st.model.serialize());
      }
    },
    [self](observe_atom, double send_seconds, uint64_t bytes_sent, double receive_seconds,
           uint64_t bytes_received) {
      self->state.link.observe(send_seconds, bytes_sent, receive_seconds, bytes_received);
    },
    [self](tick_atom) {
      machine().refresh();
      self->delayed_send(self, defaults::contention_sampling, tick_atom::value);
    },
    [self](predict_atom) -> prediction {
      auto& st = self->state;
      machine().refresh();
      auto now = machine().last(learning::contention_monitor::prediction_window);
      // U_wait exists only while this process's threads run: between
      // epochs the platform is idle (slowdown_model::training_wait).
      if (st.model.size() > 0)
        now.wait = st.model.training_wait();
      messages::prediction p;
      p.platform = st.args.platform;
      p.observations = st.model.size();
      p.core = now.core;
      p.net = now.net;
      p.disk = now.disk;
      p.wait = now.wait;
      if (p.observations > 0) {
        p.throughput = st.model.throughput(now);
        p.seconds_per_point = st.model.seconds_per_point(now);
        p.t0 = st.model.t0();
      }
      p.send_seconds_per_byte = st.link.send_seconds_per_byte();
      p.receive_seconds_per_byte = st.link.receive_seconds_per_byte();
      return p;
    },
  };
}

} // namespace

predictor_actor spawn_predictor(caf::actor_system& sys, predictor_args args) {
  auto what = "predictor of " + args.platform;
  return census::counted(sys.spawn(predictor, std::move(args)), what);
}

} // namespace eg::actors
