#include "actors/node/node_state.hpp"
#include "actors/census.hpp"

#include "actors/node/network.hpp"
#include "config/defaults.hpp"

#include <caf/io/all.hpp>
#include <spdlog/spdlog.h>

#include <optional>

namespace eg::actors::node_detail {

namespace {

void absorb(self_ptr self, const messages::hello& h, const std::vector<caf::actor>& handles,
            const std::function<void(const messages::hello&)>& check);

/// The handshake with a peer node's actor: asks it for a challenge, sends
/// our hello answering it (with a fresh nonce of ours), and takes in its
/// answer once that proves the secret over our nonce. `failed` gets what went
/// wrong (unreachable, or refused: then `refused` is true).
void handshake(self_ptr self, const node_actor& remote, const std::string& name,
               std::function<void()> done,
               std::function<void(const std::string&, bool refused)> failed) {
  self->request(remote, defaults::handshake_timeout, challenge_atom::value)
    .then(
      [self, remote, name, done, failed](const std::string& challenge) {
        auto nonce = messages::make_nonce();
        auto [mine, handles] = self->state.hello("hello", challenge, nonce);
        self->request(remote, defaults::handshake_timeout, hello_atom::value, std::move(mine),
                      std::move(handles))
          .then(
            [self, name, nonce, done, failed](const messages::hello& their,
                                              const std::vector<caf::actor>& hs) {
              try {
                absorb(self, their, hs, [&](const messages::hello& h) {
                  if (h.challenge != nonce)
                    throw messages::codec_error("node '" + h.node
                                                + "' answered another handshake than ours");
                  self->state.check_proof(h, "hello-answer");
                });
              } catch (const messages::codec_error& e) {
                failed(e.what(), true);
                return;
              }
              done();
            },
            [self, failed](caf::error& err) {
              // The peer's refusal (its reason as the error's text), or no answer.
              std::string why;
              if (is(err, ec::refused, &why))
                failed(why, true);
              else
                failed(self->system().render(err), false);
            });
      },
      [self, failed](caf::error& err) { failed(self->system().render(err), false); });
}

} // namespace

/// Tells every peer node our directory again (a component was added or
/// removed here); their answers are taken in as in a handshake.
void rehello(self_ptr self) {
  auto& st = self->state;
  for (auto& [name, peer] : st.peers)
    handshake(self, peer, name, [] {}, [self, name = name](const std::string& why, bool) {
      spdlog::warn("[{}] node {} did not take our update: {}", self->state.args.name, name, why);
    });
}

namespace {

/// Takes a peer node's hello into the directory once `check` passes it.
void absorb(self_ptr self, const messages::hello& hello, const std::vector<caf::actor>& handles,
            const std::function<void(const messages::hello&)>& check) {
  auto& st = self->state;
  const auto* h = &hello;
  if (h->components.size() != handles.size())
    throw messages::codec_error("handshake lists " + std::to_string(h->components.size())
                                + " components but carries " + std::to_string(handles.size())
                                + " handles");
  bool known_node = false;
  for (auto& n : st.args.settings.nodes)
    known_node = known_node || n.name == h->node;
  if (!known_node || h->node == st.args.name)
    throw messages::codec_error("node '" + h->node + "' is not a peer in the cluster file");
  if (h->nonce.empty())
    throw messages::codec_error("handshake of node '" + h->node + "' carries no nonce");
  check(*h);
  bool has_node = false;
  for (auto& c : h->components)
    has_node = has_node || (c.role == messages::role::node && c.name == h->node && c.node == h->node);
  if (!has_node)
    throw messages::codec_error("handshake of node '" + h->node + "' lacks the node itself");
  // Replace whatever we knew of that node.
  st.directory.replace_node(h->node, h->components, handles);
  auto remote = caf::actor_cast<node_actor>(st.directory.find(messages::role::node, h->node));
  st.lanes[h->node] = {h->node, st.args.settings.node(h->node).host, h->lane_port};
  auto old = st.peers.find(h->node);
  if (remote && old != st.peers.end() && old->second == remote)
    st.rehandshake_at[h->node] = std::chrono::steady_clock::now();
  if (remote && (old == st.peers.end() || old->second != remote)) {
    self->monitor(remote);
    st.peers[h->node] = remote;
    st.peer_ids.insert(remote.node());
    st.lost.erase(h->node);
    st.refusing.erase(h->node);
    st.dial_back.erase(h->node);
    st.alone_since.reset();
    spdlog::info("[{}] peered with node {} ({} components)", st.args.name, h->node,
                 handles.size());
    tell_members(self, remote);
    // Whether the run ended while one of us was away: asked of the peer and
    // told to it (whichever of the two ends of a handshake takes the other
    // in first cannot hear from it yet).
    if (!st.ended.empty())
      self->send(remote, done_atom::value, messages::role::node, st.args.name, st.ended);
    else
      self->request(remote, defaults::handshake_timeout, done_atom::value)
        .then([self, peer = h->node](const std::string& run) { heard_run_over(self, peer, run); },
              [](caf::error&) {});
  }
  resolve_balancers(self);
  check_balancer_majority(self);
  resolve_servers(self);
  publish_peers(self);
  announce_platforms(self, h->node);
}

} // namespace

void check_alone(self_ptr self, const std::string& peer, bool refused) {
  auto& st = self->state;
  if (refused)
    st.refusing.insert(peer);
  else
    st.refusing.erase(peer);
  // This node and the peers it reaches are a minority side, and every other
  // node's port is closed: nobody runs the run any more.
  std::set<std::string> reachable;
  for (auto& [name, _] : st.peers)
    reachable.insert(name);
  size_t outside = 0, closed = 0;
  for (auto& n : st.args.settings.nodes)
    if (n.name != st.args.name && !reachable.count(n.name)) {
      ++outside;
      closed += st.refusing.count(n.name);
    }
  if (st.finished || st.lost.empty() || outside == 0 || closed < outside ||
      st.succession.majority(st.args.name, reachable, st.args.settings.majority)) {
    st.alone_since.reset();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!st.alone_since) {
    st.alone_since = now;
    return;
  }
  if (now - *st.alone_since < defaults::alone_timeout)
    return;
  spdlog::warn("[{}] no node outside its side of the cluster ({} of {} nodes, no majority) has "
               "been running for {} s (every one refuses connections): the run ended while this "
               "side was cut off, or the cluster was stopped; ending this node (its checkpoints "
               "are kept: start it again with the others to go on)",
               st.args.name, reachable.size() + 1, st.args.settings.nodes.size(),
               std::chrono::duration_cast<std::chrono::seconds>(defaults::alone_timeout).count());
  st.alone_since.reset();
  if (!st.over_armed) {
    st.over_armed = true;
    self->send(self, over_atom::value);
  }
}

/// A lost peer that dials this node (not the other way round): probed now
/// and then, so that check_alone() learns whether it is still running.
void probe_lost(self_ptr self, const std::string& name) {
  auto& st = self->state;
  if (st.finished || st.peers.count(name) || !st.lost.count(name) || st.probing.count(name) ||
      !st.args.settings.probe_before_dial)
    return;
  const auto& target = st.args.settings.node(name);
  st.probing.insert(name);
  auto prober = self->spawn<caf::detached>([host = target.host,
                                            port = target.port]() -> caf::behavior {
    return {[=](dial_atom) {
      return probe_tcp(host, port, static_cast<int>(defaults::probe_timeout.count()));
    }};
  });
  census::counted(prober, "prober of node " + name);
  auto again = [self, name, prober](bool refused) {
    self->send_exit(prober, caf::exit_reason::user_shutdown);
    self->state.probing.erase(name);
    check_alone(self, name, refused);
    self->delayed_send(self, defaults::redial_interval, dial_atom::value, name);
  };
  self->request(prober, defaults::handshake_timeout, dial_atom::value)
    .then([again](const std::string& problem) {
            again(problem.find("refused") != std::string::npos);
          },
          [again](caf::error&) { again(false); });
}

/// Says that dialling `name` failed, the first time and every 30th: through
/// a front door the route knows what went wrong there, and a refusal (a
/// wrong secret, another cluster) is said plainly.
void report_dial_failure(self_ptr self, const std::string& name, const caf::error& err) {
  auto& st = self->state;
  auto n = ++st.dial_failures[name];
  if (n != 1 && n % 30 != 0)
    return;
  std::string why;
  if (auto& routes = st.args.settings.routes) {
    const auto& t = st.args.settings.node(name);
    why = routes->last_failure(t.host, t.port);
  }
  if (why.rfind("refused the handshake", 0) == 0)
    spdlog::error("[{}] node {} {}; retrying", st.args.name, name, why);
  else
    spdlog::info("[{}] node {} not reachable yet ({}); retrying", st.args.name, name,
                 why.empty() ? self->system().render(err) : why);
}

/// A detached actor that probes node `name` once (dial_atom): a plain TCP
/// connection to its port, then over TLS the peer's certificate through the
/// route CAF will take. Answers "" or what went wrong.
caf::actor spawn_prober(self_ptr self, const std::string& name) {
  auto& st = self->state;
  const auto& target = st.args.settings.node(name);
  std::optional<config::tls_config> tls;
  if (st.args.settings.tls.enabled())
    tls = tls_of(st.args.settings.tls, st.args.name);
  auto prober = self->spawn<caf::detached>(
    [tls, name, routes = st.args.settings.routes, host = target.host,
     port = target.port]() -> caf::behavior {
      return {[=](dial_atom) {
        auto problem = probe_tcp(host, port, static_cast<int>(defaults::probe_timeout.count()));
        if (!problem.empty() || !tls)
          return problem;
        std::string h = host;
        uint16_t p = port;
        if (routes) {
          try {
            p = routes->route(name, host, port);
            h = "127.0.0.1";
          } catch (const messages::door_error& e) {
            return std::string(e.what());
          }
        }
        problem = probe_tls(h, p, *tls, static_cast<int>(defaults::tls_probe_timeout.count()));
        if (!problem.empty() && routes && !routes->last_failure(host, port).empty())
          problem = routes->last_failure(host, port);
        return problem;
      }};
    });
  return census::counted(prober, "prober of node " + name);
}

void dial(self_ptr self, const std::string& name) {
  auto& st = self->state;
  if (st.finished || st.peers.count(name) || st.dialling.count(name))
    return;
  if (!dials(st.args.settings.node_names(), st.args.name, name)) {
    auto back = st.dial_back.find(name);
    if (back != st.dial_back.end() && std::chrono::steady_clock::now() >= back->second) {
      st.dial_back.erase(back);
      back = st.dial_back.end();
    }
    if (back == st.dial_back.end()) {
      probe_lost(self, name);
      return;
    }
  }
  const auto& target = st.args.settings.node(name);
  st.dialling.insert(name);
  auto retry = [self, name](const caf::error& err) {
    self->state.dialling.erase(name);
    report_dial_failure(self, name, err);
    self->delayed_send(self, defaults::redial_interval, dial_atom::value, name);
  };
  if (!st.probed.count(name) &&
      (st.args.settings.probe_before_dial || st.args.settings.tls.enabled())) {
    // The peer is probed first, outside CAF, on a thread of its own: CAF
    // 0.17's middleman connects with a blocking connect(), which waits for
    // minutes on a host whose link is cut (no answer at all), holding up
    // every other dial and the node's shutdown. A TCP connection within
    // the probe's timeout first (probe_tcp); over TLS the peer's
    // certificate is checked as well (probe_tls).
    auto prober = spawn_prober(self, name);
    self->request(prober, defaults::handshake_timeout, dial_atom::value)
      .then(
        [self, name, retry, prober,
         over_tls = st.args.settings.tls.enabled()](const std::string& problem) {
          self->send_exit(prober, caf::exit_reason::user_shutdown);
          auto& st = self->state;
          if (!problem.empty()) {
            check_alone(self, name, problem.find("refused") != std::string::npos);
            retry(caf::make_error(caf::sec::cannot_connect_to_node,
                                  (over_tls ? "TLS: " : "") + problem));
            return;
          }
          st.probed.insert(name);
          st.dialling.erase(name);
          dial(self, name);
        },
        [self, retry, prober](caf::error& err) {
          self->send_exit(prober, caf::exit_reason::user_shutdown);
          retry(err);
        });
    return;
  }
  st.probed.erase(name);  // probed again before the next dial
  std::string host = target.host;
  uint16_t port = target.port;
  if (auto& routes = st.args.settings.routes) {
    try {
      port = routes->route(name, host, port);
      host = "127.0.0.1";
    } catch (const messages::door_error& e) {
      retry(make_error(ec::unreachable, e.what()));
      return;
    }
  }
  auto mm = connector(self->system());
  self->request(mm, defaults::handshake_timeout, caf::connect_atom::value, host, port)
    .then(
      [self, name, retry](const caf::node_id&, caf::strong_actor_ptr& ptr,
                          const std::set<std::string>&) {
        if (!ptr) {
          retry(caf::make_error(caf::sec::no_actor_published_at_port));
          return;
        }
        auto remote = caf::actor_cast<node_actor>(ptr);
        handshake(
          self, remote, name,
          [self, name] {
            self->state.dialling.erase(name);
            self->state.dial_failures.erase(name);
          },
          [self, name, retry](const std::string& why, bool refused) {
            if (!refused) {
              retry(make_error(ec::unreachable, why));
              return;
            }
            // Refused (a wrong secret, another cluster): said plainly, and
            // tried again, since the peer may be started again set right.
            auto& st = self->state;
            auto n = ++st.dial_failures[name];
            if (n == 1 || n % 30 == 0)
              spdlog::error("[{}] node {} refused the handshake: {}", st.args.name, name, why);
            st.dialling.erase(name);
            self->delayed_send(self, defaults::redial_interval, dial_atom::value, name);
          });
      },
      retry);
}

/// A peer node dialled us: its hello must answer a challenge we handed out
/// and prove the secret; ours answers its nonce.
caf::result<hello, std::vector<caf::actor>>
answer_hello(self_ptr self, const hello& their, const std::vector<caf::actor>& handles) {
  auto& st = self->state;
  std::string challenge, nonce;
  try {
    absorb(self, their, handles, [&](const messages::hello& h) {
      if (!st.challenges.redeem(h.challenge))
        throw messages::codec_error("node '" + h.node + "' answered no challenge this node "
                                    "handed out (a replayed or stale handshake)");
      st.check_proof(h, "hello");
      challenge = h.nonce;
      nonce = h.challenge;
    });
  } catch (const messages::codec_error& e) {
    spdlog::warn("[{}] refused a handshake: {}", st.args.name, e.what());
    return make_error(ec::refused, std::string{e.what()});
  }
  auto [mine, hs] = st.hello("hello-answer", challenge, nonce);
  return {std::move(mine), std::move(hs)};
}

} // namespace eg::actors::node_detail
