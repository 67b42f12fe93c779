#include "actors/platform/mixer.hpp"
#include "actors/census.hpp"

#include "actors/server.hpp"

#include "messages/codec.hpp"
#include "messages/lane.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <functional>
#include <map>


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
  // Counters since the last stats request. The bytes sent are sent.total():
  // one count, by what the messages carried.
  messages::traffic sent;
  messages::traffic received_parts;
  uint64_t messages_sent = 0;
  uint64_t messages_dropped = 0;  // the peer is gone, or its lane queue is full
  std::map<std::string, traffic> received;
  // The node's lane as it was at the last stats request (link_timing).
  messages::lane_stats lane_seen;
};

using bound_mixer = mixer_actor::extend<caf::reacts_to<bind_atom, caf::actor>>;
using self_ptr = bound_mixer::stateful_pointer<mixer_state>;

/// Tells the platform which peers it can reach now.
void tell_platform(self_ptr self) {
  auto& st = self->state;
  if (!st.platform)
    return;
  std::vector<std::string> live;
  for (auto& p : st.peers)
    live.push_back(p.name);
  self->send(st.platform, peers_atom::value, std::move(live));
}

/// What goes back to the platform of a gossip message that was not sent:
/// the message without its dense tensors (a loan of the parameters that
/// need not last), its sparse parts held. Nothing for a message that
/// carries no weight and no parts (a keyframe request).
std::function<void()> give_back(self_ptr self, const std::string& target,
                                const held_weights& message) {
  const auto& st = self->state;
  if (!st.platform || (message.value.gossip_weight == 0 && message.value.sparse.empty()))
    return {};
  held_weights back{message.sender, message.value, nullptr, 0, 0};
  back.value.tensors.clear();
  if (!back.value.sparse.empty())
    back.hold = message.hold;
  return [platform = st.platform, target, back = std::move(back)] {
    caf::anon_send(platform, unsent_atom::value, target, back);
  };
}

/// Sends `message` to `target` at the lane endpoint `to`, encoded once,
/// the tensors written from where they lie (the message's hold keeps them),
/// and counts it. `unsent` is called if the lane does not send it; an
/// `urgent` one goes before the frames waiting for that peer and is never
/// skipped (a Sparse-Push keyframe, which restarts its edge).
template <class Body>
void send_on_lane(self_ptr self, const messages::lane_endpoint& to, const std::string& target,
                  messages::held<Body> message, std::function<void()> unsent = {},
                  bool urgent = false) {
  auto& st = self->state;
  messages::envelope e;
  e.hdr = {st.args.cluster_id, messages::protocol_version, st.args.platform};
  e.payload = std::move(message.value);
  auto pieces = std::make_shared<const messages::gathered>(
    messages::encode_gathered(e, std::move(message.hold)));
  auto parts = messages::traffic_of(std::get<Body>(e.payload), pieces->sizes());
  if (!st.args.lane->send(to, target, std::move(pieces), urgent, unsent)) {
    ++st.messages_dropped;  // the lane's queue is full
    if (unsent)
      unsent();
    return;
  }
  st.sent += parts;
  ++st.messages_sent;
}

/// Sends the platform's model for the balancer's average on the weights
/// lane to the balancer's node, not counted as gossip (it is no message of
/// the strategy's, and the bytes-to-accuracy figures count those). Returns
/// the header alone (no tensors) once the lane took it, else the whole
/// model, which then goes in the typed answer.
held_weights model_to_balancer(self_ptr self, const std::string& balancer_lane,
                               held_weights model) {
  auto& st = self->state;
  if (!st.args.lane)
    return model;
  messages::lane_endpoint to;
  try {
    to = messages::parse_endpoint(balancer_lane);
  } catch (const messages::lane_error& e) {
    spdlog::warn("[{}] the balancer's weights lane is no endpoint ({}): the model goes through "
                 "the middleman",
                 st.args.platform, e.what());
    return model;
  }
  messages::envelope e;
  e.hdr = {st.args.cluster_id, messages::protocol_version, st.args.platform};
  e.payload = model.value;  // views into model.hold, which the frame holds too
  auto frame = std::make_shared<const messages::gathered>(messages::encode_gathered(e, model.hold));
  if (!st.args.lane->send(to, std::string{balancer_name}, std::move(frame), /*urgent=*/true))
    return model;
  held_weights header{model.sender, model.value, nullptr, 0, 0};
  header.value.tensors.clear();
  header.value.sparse.clear();
  return header;
}

/// Counts a message received (by its sender).
template <class Body>
void count_received(mixer_state& st, const messages::held<Body>& message) {
  auto& t = st.received[message.sender];
  ++t.messages;
  t.bytes += message.wire_bytes;
  st.received_parts += messages::traffic_of(message.value, message.size());
}

/// Sends the platform's message to peer `target`: on the weights lane to a
/// peer on another node, as a copy to one in this process, through the
/// middleman else; counted as it would weigh on the wire.
void send_to_peer(self_ptr self, const std::string& target, held_weights& message) {
  auto& st = self->state;
  auto to = std::find_if(st.peers.begin(), st.peers.end(),
                         [&](const peer& p) { return p.name == target; });
  if (to == st.peers.end()) {
    ++st.messages_dropped;  // went down since the platform heard of it
    if (auto back = give_back(self, target, message))
      back();
    return;
  }
  if (st.args.lane && to->lane.port != 0 && to->handle.node() != self->node()) {
    auto back = give_back(self, target, message);
    const bool keyframe = message.value.keyframe;
    send_on_lane(self, to->lane, to->name, std::move(message), std::move(back), keyframe);
    return;
  }
  // What it would weigh on the wire (counted as such in this process
  // too, so that runs in one process and across nodes compare).
  messages::envelope e;
  e.hdr = {st.args.cluster_id, messages::protocol_version, st.args.platform};
  e.payload = message.value;
  const auto size = messages::measure(e);
  const auto parts = messages::traffic_of(message.value, size);
  message.wire_bytes = size.wire;
  message.unpacked_bytes = size.unpacked;
  if (to->handle.node() == self->node()) {
    // A peer in this process gets a copy of its own: the sender's
    // parameters are free again once it is made.
    self->send(to->handle, gossip_atom::value, messages::copy_held(message));
  } else {
    // A node without a weights lane: through the middleman, which
    // encodes it (actors/wire.hpp).
    self->send(to->handle, gossip_atom::value, std::move(message));
  }
  st.sent += parts;
  ++st.messages_sent;
}

/// The peer mixers from the node (each new one monitored), told to the
/// platform.
void take_peers(self_ptr self, const std::vector<std::string>& names,
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
  tell_platform(self);
}

bound_mixer::behavior_type mixer(self_ptr self, mixer_args args) {
  self->state.args = std::move(args);
  if (self->state.args.lane)
    self->state.lane_seen = self->state.args.lane->stats();
  self->set_down_handler([self](const caf::down_msg& dm) {
    // Its platform left the run (its model kept running away): nothing is
    // left to mix for, and its peers see it go. (One that fails ends the
    // node, and with it this mixer.)
    if (self->state.platform && dm.source == self->state.platform.address()) {
      if (!dm.reason)
        self->quit();
      return;
    }
    auto& ps = self->state.peers;
    for (auto i = ps.begin(); i != ps.end(); ++i)
      if (i->handle.address() == dm.source) {
        // A peer whose platform left the run ends normally, which CAF
        // words as "none".
        spdlog::info("[{}] peer {} is down ({}); gossiping without it",
                     self->state.args.platform, i->name,
                     dm.reason ? caf::to_string(dm.reason) : std::string("it left the run"));
        ps.erase(i);
        tell_platform(self);
        return;
      }
  });
  return {
    [self](bind_atom, caf::actor platform) {
      self->state.platform = caf::actor_cast<platform_actor>(platform);
      self->monitor(platform);
      tell_platform(self);
    },
    [self](send_atom, const std::string& target, held_weights& message) {
      send_to_peer(self, target, message);
    },
    [self](gossip_atom, held_weights& message) {
      auto& st = self->state;
      count_received(st, message);
      if (st.platform)
        self->send(st.platform, merge_atom::value, std::move(message));
    },
    [self](weights_atom, const std::string& balancer_lane, held_weights& model) -> held_weights {
      return model_to_balancer(self, balancer_lane, std::move(model));
    },
    [self](commit_atom, const std::string& server_lane, held_commit& update) {
      auto& st = self->state;
      messages::lane_endpoint to;
      try {
        to = messages::parse_endpoint(server_lane);
      } catch (const messages::lane_error& e) {
        ++st.messages_dropped;  // the server's answer says ec::lost
        spdlog::warn("[{}] no weights lane to the parameter server: {}", st.args.platform, e.what());
        return;
      }
      if (st.args.lane)
        send_on_lane(self, to, std::string{server_name}, std::move(update));
      else
        ++st.messages_dropped;
    },
    [self](pull_atom, const std::string& from, held_global_model& model) {
      auto& st = self->state;
      count_received(st, model);
      if (st.platform)
        self->send(st.platform, pull_atom::value, from, std::move(model));
    },
    [self](peers_atom, const std::vector<std::string>& names,
           const std::vector<caf::actor>& handles, const std::vector<std::string>& lanes) {
      take_peers(self, names, handles, lanes);
    },
    [self](stats_atom) -> epoch_report {
      auto& st = self->state;
      epoch_report r;
      r.platform = st.args.platform;
      r.bytes_sent = st.sent.total();
      r.sent = st.sent;
      r.received = st.received_parts;
      r.messages_sent = st.messages_sent;
      for (auto& [name, t] : st.received) {
        r.bytes_received += t.bytes;
        r.messages_received += t.messages;
        r.received_from.push_back(messages::peer_traffic{name, t.messages, t.bytes});
      }
      if (st.args.lane) {
        // The lane is the node's: its timings are the link's, whichever
        // platform of the node its frames were for.
        auto now = st.args.lane->stats();
        r.link.bytes_sent = now.bytes_sent - st.lane_seen.bytes_sent;
        r.link.send_seconds = now.send_seconds - st.lane_seen.send_seconds;
        r.link.bytes_received = now.bytes_received - st.lane_seen.bytes_received;
        r.link.receive_seconds = now.receive_seconds - st.lane_seen.receive_seconds;
        st.lane_seen = now;
      }
      st.messages_sent = st.messages_dropped = 0;
      st.sent = st.received_parts = {};
      st.received.clear();
      return r;
    },
  };
}

} // namespace

mixer_actor spawn_mixer(caf::actor_system& sys, mixer_args args) {
  auto what = "mixer of " + args.platform;
  return census::counted(caf::actor_cast<mixer_actor>(sys.spawn(mixer, std::move(args))), what);
}

void bind_mixer(const mixer_actor& m, const platform_actor& platform) {
  caf::anon_send(caf::actor_cast<bound_mixer>(m), bind_atom::value,
                 caf::actor_cast<caf::actor>(platform));
}

} // namespace eg::actors
