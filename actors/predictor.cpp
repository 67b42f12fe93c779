#include "actors/predictor.hpp"

#include "learning/predictor.hpp"
#include "messages/codec.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>

namespace eg::actors {
namespace {

/// Contention is a property of the machine, not of a platform: every
/// predictor of this process shares one sampler, and a sample younger than
/// half a second is handed out again instead of reading /proc once more.
/// With 1,024 platforms in a process, per-predictor sampling read /proc
/// 4,096 times a second (bench scale).
learning::contention shared_sample() {
  using clock = std::chrono::steady_clock;
  static std::mutex mutex;
  static learning::contention_sampler sampler;
  static learning::contention last;
  static clock::time_point taken{};
  std::lock_guard<std::mutex> lock(mutex);
  auto now = clock::now();
  if (taken == clock::time_point{} || now - taken >= std::chrono::milliseconds(500)) {
    last = sampler.sample();
    taken = now;
  }
  return last;
}

struct predictor_state {
  static inline const char* name = "predictor";
  predictor_args args;
  learning::slowdown_model model;
  learning::contention now;  // the latest contention sample
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
      spdlog::warn("[{}] predictor samples not restored: {}", args.platform, e.what());
    }
  }
  st.args = std::move(args);
  shared_sample();  // starts the shared sampler's clock with the first predictor
  self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
  return {
    [self](observe_atom, double seconds, uint64_t samples) {
      auto& st = self->state;
      if (samples == 0 || seconds <= 0)
        return;
      st.model.observe(st.now, seconds / static_cast<double>(samples));
      // Persist every 10 observations: a restarted node starts warm.
      if (++st.unsaved >= 10) {
        st.unsaved = 0;
        self->send(st.args.store, store_atom::value,
                   std::string{storage::name(storage::family::predictor)},
                   storage::key(st.args.platform, 0), st.model.serialize());
      }
    },
    [self](tick_atom) {
      auto& st = self->state;
      st.now = shared_sample();
      self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
    },
    [self](predict_atom) -> bytes {
      auto& st = self->state;
      messages::prediction p;
      p.platform = st.args.platform;
      p.observations = st.model.size();
      p.core = st.now.core;
      p.net = st.now.net;
      p.disk = st.now.disk;
      p.wait = st.now.wait;
      if (p.observations > 0) {
        p.throughput = st.model.throughput(st.now);
        p.seconds_per_point = st.model.seconds_per_point(st.now);
        p.t0 = st.model.t0();
      }
      return messages::encode(
        {{st.args.cluster_id, messages::protocol_version, st.args.platform}, p});
    },
  };
}

} // namespace

predictor_actor spawn_predictor(caf::actor_system& sys, predictor_args args) {
  return sys.spawn(predictor, std::move(args));
}

} // namespace eg::actors
