#pragma once
// The mixer: the gossip endpoint of one platform. It knows the peer mixers
// (monitoring each), sends the platform's weights to the peer the
// platform names (on the weights lane when the peer is on another node),
// counts traffic per peer, and passes received weights (checked at the door:
// the lane, or the middleman: actors/wire.hpp) to its platform, which owns
// the parameters and merges. It tells its platform which peers are live.
// With a parameter server on another node, it sends its platform's
// commits' updates on the lane and passes the server's models back, counted
// as traffic like gossip.

#include "actors/interfaces.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <string>

namespace eg::messages {
class lane;
}

namespace eg::actors {

struct mixer_args {
  std::string platform;    ///< name of the platform it serves
  std::string cluster_id;  ///< messages of any other cluster are refused
  /// This node's weights lane (none: every peer is reached through CAF).
  std::shared_ptr<messages::lane> lane;
};

/// Spawns a mixer for `platform`; `set_platform` must be sent before gossip
/// flows (the two are spawned as a pair).
mixer_actor spawn_mixer(caf::actor_system& sys, mixer_args args);

/// Binds a mixer to its platform (local, once, right after spawning).
void bind_mixer(const mixer_actor& mixer, const platform_actor& platform);

} // namespace eg::actors
