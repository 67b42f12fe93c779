#include "actors/mixer.hpp"

#include "messages/codec.hpp"
#include "messages/lane.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <map>
#include <random>

namespace eg::actors {
namespace {

using bind_atom = caf::atom_constant<caf::atom("bind")>;

struct peer {
  std::string name;
  mixer_actor handle;
  messages::lane_endpoint lane;  ///< port 0: reached through CAF
};

struct traffic {
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

struct mixer_state {
  static inline const char* name = "mixer";
  mixer_args args;
  platform_actor platform;
  std::vector<peer> peers;
  std::mt19937_64 rng;
  // Counters since the last stats request.
  uint64_t bytes_sent = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_dropped = 0;  // nobody to send to
  uint64_t messages_refused = 0;
  std::map<std::string, traffic> received;
};

using bound_mixer = mixer_actor::extend<caf::reacts_to<bind_atom, caf::actor>>;
using self_ptr = bound_mixer::stateful_pointer<mixer_state>;

/// A received gossip message: checked at the door, counted, passed on.
void take(self_ptr self, shared_bytes payload) {
  auto& st = self->state;
  try {
    if (!payload)
      throw messages::codec_error("empty message");
    auto env = messages::decode(payload->data(), payload->size(), st.args.cluster_id);
    if (!std::holds_alternative<messages::weights>(env.payload))
      throw messages::codec_error("gossip message does not hold weights");
    auto& t = st.received[env.hdr.sender];
    ++t.messages;
    t.bytes += payload->size();
    if (st.platform)
      self->send(st.platform, merge_atom::value, std::move(payload));
  } catch (const messages::codec_error& e) {
    ++st.messages_refused;
    spdlog::warn("[{}] refused a gossip message: {}", st.args.platform, e.what());
  }
}

bound_mixer::behavior_type mixer(self_ptr self, mixer_args args) {
  self->state.rng.seed(args.seed);
  self->state.args = std::move(args);
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& ps = self->state.peers;
    for (auto i = ps.begin(); i != ps.end(); ++i)
      if (i->handle.address() == dm.source) {
        spdlog::info("[{}] peer {} is down ({}); gossiping without it",
                     self->state.args.platform, i->name, caf::to_string(dm.reason));
        ps.erase(i);
        return;
      }
  });
  return {
    [self](bind_atom, caf::actor platform) {
      self->state.platform = caf::actor_cast<platform_actor>(platform);
    },
    [self](send_atom, int64_t index, shared_gathered& payload) {
      auto& st = self->state;
      if (st.peers.empty() || !payload) {
        ++st.messages_dropped;
        return;
      }
      size_t i;
      if (index >= 0) {
        i = static_cast<size_t>(index) % st.peers.size();
      } else {
        std::uniform_int_distribution<size_t> pick(0, st.peers.size() - 1);
        i = pick(st.rng);
      }
      auto& to = st.peers[i];
      const auto size = payload->size();
      if (st.args.lane && to.lane.port != 0 && to.handle.node() != self->node()) {
        // Written from the sender's parameters as they lie.
        if (!st.args.lane->send(to.lane, to.name, std::move(payload))) {
          ++st.messages_dropped;  // the lane's queue is full
          return;
        }
      } else {
        // A peer in this process gets one contiguous copy, shared with its
        // mixer and platform; a node without a lane gets it through the
        // middleman, one more copy. The sender's parameters are free again
        // once it is made.
        auto flat = payload->flatten();
        payload.reset();
        if (to.handle.node() == self->node())
          self->send(to.handle, gossip_atom::value,
                     std::make_shared<const messages::buffer>(std::move(flat)));
        else
          self->send(to.handle, gossip_atom::value, bytes(flat.data(), flat.data() + flat.size()));
      }
      st.bytes_sent += size;
      ++st.messages_sent;
    },
    [self](gossip_atom, const bytes& payload) {
      messages::buffer copy(payload.size());
      std::copy(payload.begin(), payload.end(), copy.data());
      take(self, std::make_shared<const messages::buffer>(std::move(copy)));
    },
    [self](gossip_atom, shared_bytes& payload) { take(self, std::move(payload)); },
    [self](peers_atom, const std::vector<std::string>& names,
           const std::vector<caf::actor>& handles, const std::vector<std::string>& lanes) {
      auto& st = self->state;
      std::vector<peer> next;
      for (size_t i = 0; i < names.size() && i < handles.size(); ++i) {
        if (names[i] == st.args.platform || !handles[i])
          continue;
        auto h = caf::actor_cast<mixer_actor>(handles[i]);
        bool known = false;
        for (auto& p : st.peers)
          known = known || p.handle == h;
        if (!known)
          self->monitor(h);
        peer p{names[i], h, {}};
        if (i < lanes.size() && !lanes[i].empty()) {
          try {
            p.lane = messages::parse_endpoint(lanes[i]);
          } catch (const messages::lane_error& e) {
            spdlog::warn("[{}] peer {} is reached through the middleman: {}", st.args.platform,
                         names[i], e.what());
          }
        }
        next.push_back(std::move(p));
      }
      st.peers = std::move(next);
    },
    [self](stats_atom) -> bytes {
      auto& st = self->state;
      messages::epoch_report r;
      r.platform = st.args.platform;
      r.bytes_sent = st.bytes_sent;
      r.messages_sent = st.messages_sent;
      r.messages_refused = st.messages_refused;
      for (auto& [name, t] : st.received) {
        r.bytes_received += t.bytes;
        r.messages_received += t.messages;
        r.received_from.push_back(messages::peer_traffic{name, t.messages, t.bytes});
      }
      st.bytes_sent = st.messages_sent = st.messages_dropped = st.messages_refused = 0;
      st.received.clear();
      return messages::encode(messages::envelope{{st.args.cluster_id, messages::protocol_version,
                                                  st.args.platform},
                                                 std::move(r)});
    },
  };
}

} // namespace

mixer_actor spawn_mixer(caf::actor_system& sys, mixer_args args) {
  return caf::actor_cast<mixer_actor>(sys.spawn(mixer, std::move(args)));
}

void bind_mixer(const mixer_actor& m, const platform_actor& platform) {
  caf::anon_send(caf::actor_cast<bound_mixer>(m), bind_atom::value,
                 caf::actor_cast<caf::actor>(platform));
}

} // namespace eg::actors
