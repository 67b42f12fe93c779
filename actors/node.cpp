#include "actors/node.hpp"

#include "actors/inspection.hpp"
#include "actors/mixer.hpp"
#include "actors/network.hpp"
#include "actors/predictor.hpp"
#include "actors/report_files.hpp"
#include "messages/codec.hpp"
#include "messages/lane.hpp"
#include "messages/secret.hpp"
#include "storage/store.hpp"

#include "config/defaults.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <set>

namespace eg::actors {
namespace {

struct entry {
  messages::component what;
  caf::actor handle;
};

struct node_state {
  static inline const char* name = "node";
  node_args args;
  std::vector<local_platform> platforms;
  std::optional<balancer_actor> balancer;
  std::vector<entry> directory;           // every component known, local and remote
  std::map<std::string, node_actor> peers;  // connected remote nodes by name
  std::set<std::string> dialling;
  std::set<std::string> tls_checked;  // peers whose certificate passed probe_tls just now
  std::map<std::string, int> dial_failures;
  std::set<caf::node_id> peer_ids;         // CAF node ids of peered nodes
  std::set<std::string> lost;             // nodes that were peered and went down
  std::set<std::string> done;             // local platforms (and "balancer") done
  std::string run;
  bool finished = false;
  bool released = false;  // the launcher may end the process
  bool stopping = false;
  bool over_armed = false;  // the run is known to be over: over_atom is on its way
  std::vector<messages::epoch_report> reports;
  std::vector<caf::response_promise> waiting;
  /// The weights lane (none in a single-node cluster, with
  /// cluster.transport = "middleman", or when it could not listen).
  std::shared_ptr<messages::lane> lane;
  std::map<std::string, messages::lane_endpoint> lanes;  // of peered nodes
  /// Nonces handed out to dialling nodes and consoles (challenge_atom).
  messages::challenges challenges;
  /// Why this node's store cannot write ("" while it can).
  std::string store_failure;

  ~node_state() {
    if (lane)
      lane->stop();  // no frames for mixers of a node that is gone
  }

  /// Nodes in the order they take over the balancer: cluster.balancer,
  /// then the others in file order.
  std::vector<std::string> succession() const {
    std::vector<std::string> order{args.cluster.balancer().name};
    for (auto& n : args.cluster.nodes)
      if (n.name != order.front())
        order.push_back(n.name);
    return order;
  }

  /// The node hosting a balancer that we know of ("" if none).
  std::string balancer_home() const {
    for (auto& e : directory)
      if (e.what.role == messages::role::balancer)
        return e.what.node;
    return {};
  }

  /// Our hello and the handles of our local components, in the same order:
  /// with `purpose` "hello" it answers the challenge of the node we dial,
  /// with "hello-answer" the nonce of the node that dialled us (see
  /// messages/secret.hpp).
  std::pair<messages::hello, std::vector<caf::actor>> hello(const std::string& purpose,
                                                  const std::string& challenge,
                                                  const std::string& nonce) const {
    messages::hello h;
    h.node = args.name;
    h.challenge = challenge;
    h.nonce = nonce;
    h.secret_digest = messages::proof(args.cluster.secret, purpose, args.cluster.id, args.name,
                                      challenge, nonce);
    h.lane_port = lane ? lane->port() : 0;
    std::vector<caf::actor> handles;
    for (auto& e : directory)
      if (e.what.node == args.name) {
        h.components.push_back(e.what);
        handles.push_back(e.handle);
      }
    return {std::move(h), std::move(handles)};
  }

  /// Throws codec_error when `h` does not prove the cluster secret with
  /// `purpose` over its challenge and nonce.
  void check_proof(const messages::hello& h, const std::string& purpose) const {
    if (args.cluster.secret.empty())
      return;
    if (!messages::same_digest(h.secret_digest,
                               messages::proof(args.cluster.secret, purpose, args.cluster.id,
                                               h.node, h.challenge, h.nonce)))
      throw messages::codec_error("node '" + h.node + "' "
                                  + (h.secret_digest.empty() ? "presented no cluster secret"
                                                             : "presented a wrong cluster secret"));
  }

  size_t expected_done() const {
    return platforms.size() + (balancer ? 1 : 0);
  }
};

using over_atom = caf::atom_constant<caf::atom("over")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
/// The node's interface with its private messages: the run is over (the
/// grace period for local platforms ended), and the store is flushed (the
/// launcher may end the process).
using node_impl = node_actor::extend<caf::reacts_to<over_atom>, caf::reacts_to<release_atom>>;
using self_ptr = node_impl::stateful_pointer<node_state>;

/// Whether the message being handled comes from this process or a peered
/// node (not from a stranger who connected to our port without a handshake).
bool from_cluster(self_ptr self) {
  auto& sender = self->current_sender();
  if (!sender)
    return false;
  return sender->node() == self->node() || self->state.peer_ids.count(sender->node()) > 0;
}

/// Sends every local mixer the current list of peer mixers.
void publish_peers(self_ptr self) {
  auto& st = self->state;
  std::vector<std::string> names, lanes;
  std::vector<caf::actor> handles;
  for (auto& e : st.directory)
    if (e.what.role == messages::role::mixer) {
      names.push_back(e.what.name);
      handles.push_back(e.handle);
      auto l = st.lanes.find(e.what.node);
      lanes.push_back(e.what.node != st.args.name && l != st.lanes.end() && l->second.port != 0
                        ? messages::to_string(l->second)
                        : std::string{});
    }
  for (auto& p : st.platforms)
    self->send(p.mixer, peers_atom::value, names, handles, lanes);
}

/// Tells the local balancer about platforms it has not seen yet.
void announce_platforms(self_ptr self, const std::string& node) {
  auto& st = self->state;
  if (!st.balancer)
    return;
  for (auto& e : st.directory) {
    if (e.what.role != messages::role::platform || e.what.node != node)
      continue;
    caf::actor predictor;
    for (auto& q : st.directory)
      if (q.what.role == messages::role::predictor && q.what.name == e.what.name)
        predictor = q.handle;
    self->send(*st.balancer, join_atom::value, e.what.name, e.what.node, e.handle, predictor);
  }
}

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

/// Tells every peer node our directory again (a component was added or
/// removed here); their answers are taken in as in a handshake.
void rehello(self_ptr self) {
  auto& st = self->state;
  for (auto& [name, peer] : st.peers)
    handshake(self, peer, name, [] {}, [self, name = name](const std::string& why, bool) {
      spdlog::warn("[{}] node {} did not take our update: {}", self->state.args.name, name, why);
    });
}

/// Two balancers (a successor, and the node that came back): the one on the
/// node first in the succession stays; ours stops if it is the other one.
void resolve_balancers(self_ptr self) {
  auto& st = self->state;
  if (!st.balancer)
    return;
  auto order = st.succession();
  auto rank = [&](const std::string& n) {
    return std::find(order.begin(), order.end(), n) - order.begin();
  };
  for (auto& e : st.directory)
    if (e.what.role == messages::role::balancer && e.what.node != st.args.name
        && rank(e.what.node) < rank(st.args.name)) {
      spdlog::warn("[{}] node {} hosts the balancer too: stopping ours", st.args.name,
                   e.what.node);
      self->unlink_from(*st.balancer);
      self->send_exit(*st.balancer, caf::exit_reason::user_shutdown);
      st.balancer.reset();
      std::vector<entry> next;
      for (auto& d : st.directory)
        if (!(d.what.role == messages::role::balancer && d.what.node == st.args.name))
          next.push_back(d);
      st.directory = std::move(next);
      rehello(self);
      return;
    }
}

/// Starts the balancer here: a new run, or (with a saved run state) the run
/// its state describes.
void start_balancer(self_ptr self, bool continuing) {
  auto& st = self->state;
  auto args = st.args.balancer;
  args.node = caf::actor_cast<node_actor>(self);
  if (continuing) {
    std::optional<storage::run_state> saved;
    if (st.args.load_run_state)
      saved = st.args.load_run_state();
    if (saved && saved->finished && saved->fingerprint == args.fingerprint) {
      // The balancer that was lost had finished the run: no new one here,
      // and nothing left for this node to do.
      spdlog::warn("[{}] run {} is over (its balancer finished it); ending the node",
                   st.args.name, saved->run);
      st.run = saved->run;
      self->send(self, over_atom::value);
      return;
    }
    if (saved && saved->fingerprint == args.fingerprint)
      args.resume = std::move(saved);
    else
      args.resume = storage::run_state{args.fingerprint, "", false, {}, {}, 0};
  }
  st.balancer = spawn_balancer(self->system(), std::move(args));
  self->link_to(*st.balancer);
  st.directory.push_back(entry{{messages::role::balancer, st.args.name, st.args.name},
                               caf::actor_cast<caf::actor>(*st.balancer)});
  for (auto& n : st.args.cluster.nodes)
    announce_platforms(self, n.name);
  // Continuing, it goes on with the platforms of the live nodes, announced
  // just now, instead of waiting for every configured platform.
  if (continuing)
    self->send(*st.balancer, start_atom::value);
}

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
  for (auto& n : st.args.cluster.nodes)
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
  std::vector<entry> next;
  for (auto& e : st.directory)
    if (e.what.node != h->node)
      next.push_back(e);
  node_actor remote;
  for (size_t i = 0; i < handles.size(); ++i) {
    next.push_back(entry{h->components[i], handles[i]});
    if (h->components[i].role == messages::role::node)
      remote = caf::actor_cast<node_actor>(handles[i]);
  }
  st.directory = std::move(next);
  st.lanes[h->node] = {h->node, st.args.cluster.node(h->node).host, h->lane_port};
  auto old = st.peers.find(h->node);
  if (remote && (old == st.peers.end() || old->second != remote)) {
    self->monitor(remote);
    st.peers[h->node] = remote;
    st.peer_ids.insert(remote.node());
    st.lost.erase(h->node);
    spdlog::info("[{}] peered with node {} ({} components)", st.args.name, h->node,
                 handles.size());
  }
  resolve_balancers(self);
  publish_peers(self);
  announce_platforms(self, h->node);
}

/// Whether this node dials `name`: of two nodes, the one earlier in the
/// cluster file dials the later one (and again after it went down), so that
/// two nodes never dial each other at once: two connections between the
/// same pair race in CAF's BASP handshake, which keeps one of them.
bool dials(const node_state& st, const std::string& name) {
  for (auto& n : st.args.cluster.nodes) {
    if (n.name == st.args.name)
      return true;
    if (n.name == name)
      return false;
  }
  return false;
}

void dial(self_ptr self, const std::string& name) {
  auto& st = self->state;
  if (st.finished || st.peers.count(name) || st.dialling.count(name) || !dials(st, name))
    return;
  const auto& target = st.args.cluster.node(name);
  st.dialling.insert(name);
  auto retry = [self, name](const caf::error& err) {
    auto& st = self->state;
    st.dialling.erase(name);
    auto n = ++st.dial_failures[name];
    if (n == 1 || n % 30 == 0)
      spdlog::info("[{}] node {} not reachable yet ({}); retrying", st.args.name, name,
                   self->system().render(err));
    self->delayed_send(self, defaults::redial_interval, dial_atom::value, name);
  };
  if (st.args.cluster.tls.enabled() && !st.tls_checked.count(name)) {
    // Over TLS, the peer's certificate is checked first, outside CAF (see
    // probe_tls), on a thread of its own.
    auto tls = tls_of(st.args.cluster.tls, st.args.name);
    auto prober = self->spawn<caf::detached>(
      [tls, host = target.host, port = target.port]() -> caf::behavior {
        return {[=](dial_atom) {
          return probe_tls(host, port, tls,
                           static_cast<int>(defaults::tls_probe_timeout.count()));
        }};
      });
    self->request(prober, defaults::handshake_timeout, dial_atom::value)
      .then(
        [self, name, retry, prober](const std::string& problem) {
          self->send_exit(prober, caf::exit_reason::user_shutdown);
          auto& st = self->state;
          if (!problem.empty()) {
            retry(caf::make_error(caf::sec::cannot_connect_to_node, "TLS: " + problem));
            return;
          }
          st.tls_checked.insert(name);
          st.dialling.erase(name);
          dial(self, name);
        },
        [self, retry, prober](caf::error& err) {
          self->send_exit(prober, caf::exit_reason::user_shutdown);
          retry(err);
        });
    return;
  }
  st.tls_checked.erase(name);  // checked again before the next dial
  auto mm = connector(self->system());
  self->request(mm, defaults::handshake_timeout, caf::connect_atom::value, target.host, target.port)
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

void finish(self_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  if (st.args.cluster.nodes.size() > 1 && !st.run.empty() && !st.reports.empty()) {
    namespace fs = std::filesystem;
    auto dir = fs::path(st.args.cluster.output_dir) / st.run;
    try {
      fs::create_directories(dir);
      write_platform_csv((dir / (st.args.name + "-metrics.csv")).string(), st.reports);
    } catch (const std::exception& e) {
      spdlog::error("[{}] cannot write its metrics: {}", st.args.name, e.what());
    }
  }
  if (st.lane) {
    auto l = st.lane->stats();
    spdlog::info("[{}] weights lane: {} messages sent, {} received; {} skipped (waited more "
                 "than cluster.gossip_max_wait or pushed out of a full queue), {} lost (peer "
                 "unreachable or gone), {} refused; {} connections refused",
                 st.args.name, l.frames_sent, l.frames_received, l.frames_skipped, l.frames_lost,
                 l.frames_refused, l.connections_refused);
  }
  // Flush the store, then answer the launcher; the short grace period lets
  // the last messages to peers leave before the process goes.
  self->request(st.args.store, defaults::flush_timeout, flush_atom::value)
    .then([self](bool) {
      self->delayed_send(self, defaults::release_delay, release_atom::value);
    },
    [self](caf::error&) { self->send(self, release_atom::value); });
}

// -- inspection console ----------------------------------------------------------

/// What this node alone knows of the cluster, for when the balancer cannot be
/// asked: the nodes it is connected to, its own platforms' reports.
inspection::snapshot local_view(const node_state& st) {
  const auto& cfg = st.args.cluster;
  inspection::snapshot s;
  auto& h = s.cluster;
  h.id = cfg.id;
  h.strategy = config::to_string(cfg.strategy.name);
  h.schedule = cfg.strategy.asynchronous() ? "async" : "sync";
  h.run = st.run;
  h.state = st.finished ? "finished" : "unknown";
  h.epochs = cfg.train.epochs;
  h.balancer = cfg.balancer().name;
  h.balancer_reachable = false;
  h.via = st.args.name;
  auto up = [&](const std::string& node) {
    return node == st.args.name || st.peers.count(node) > 0;
  };
  for (auto& n : cfg.nodes) {
    inspection::node_row row{n.name, n.host, n.port, up(n.name) ? "up" : "down",
                             n.name == h.balancer, {}, n.name == st.args.name ? st.store_failure
                                                                              : std::string{}};
    for (auto& p : n.platforms) {
      row.platforms.push_back(p.name);
      inspection::platform_row pr;
      pr.name = p.name;
      pr.node = n.name;
      pr.state = row.state;
      (up(n.name) ? h.platforms_up : h.platforms_down) += 1;
      inspection::add_completed_epochs(pr, st.reports);
      for (auto& r : st.reports)
        if (r.platform == p.name && r.epoch >= pr.epoch) {
          pr.epoch = r.epoch;
          pr.progress = 1;
          pr.iterations = r.iterations;
          pr.samples = r.samples;
          pr.ratio = r.ratio;
          pr.train_loss = r.train_loss;
          pr.checkpoint_epochs = r.epoch + 1;
        }
      h.epoch = std::max(h.epoch, pr.epoch);
      s.platforms.push_back(std::move(pr));
    }
    s.nodes.push_back(std::move(row));
  }
  s.topology = inspection::topology_of(st.reports);
  s.events.push_back({0, "down", "the balancer on node " + h.balancer + " cannot be reached: "
                                   "node " + st.args.name + "'s own view"});
  return s;
}

/// Without the balancer: a control command straight to every platform this
/// node knows.
std::string control_platforms(self_ptr self, messages::verb what) {
  auto& st = self->state;
  size_t n = 0;
  for (auto& e : st.directory)
    if (e.what.role == messages::role::platform) {
      self->request(caf::actor_cast<platform_actor>(e.handle), defaults::control_timeout,
                    control_atom::value, control{what, {}})
        .then([](bool) {}, [](caf::error&) {});
      ++n;
    }
  const std::string verb = messages::to_string(what);
  spdlog::info("[{}] console: {} sent to {} platforms (the balancer is unreachable)",
               st.args.name, verb, n);
  return inspection::to_json(inspection::answer{
    true, verb + " sent to " + std::to_string(n) + " platforms by node " + st.args.name
            + " (the balancer is unreachable)"});
}

/// What this node answers when the balancer cannot: its own view.
caf::result<std::string> inspect_alone(self_ptr self, const control& c) {
  auto& st = self->state;
  switch (c.verb) {
    case messages::verb::snapshot:
      return inspection::to_json(local_view(st));
    case messages::verb::history: {
      inspection::history h{c.argument, {}};
      for (auto& r : st.reports)
        if (r.platform == c.argument)
          h.epochs.push_back(r);
      if (h.epochs.empty())
        return make_error(ec::unknown_platform, "the balancer is unreachable and platform '"
                                                  + c.argument + "' is not on node "
                                                  + st.args.name);
      return inspection::to_json(h);
    }
    default:
      return control_platforms(self, c.verb);
  }
}

/// The console's request: checks its credentials (the secret, over a
/// challenge of this node) and parses the command at the door, then asks
/// the balancer (wherever it runs) and passes its answer on.
caf::result<std::string> inspect(self_ptr self, const std::string& credentials,
                                 const std::string& text) {
  auto& st = self->state;
  if (!inspection::credentials_valid(credentials, st.args.cluster.secret,
                                     [&](const std::string& c) { return st.challenges.redeem(c); })) {
    spdlog::warn("[{}] console refused: wrong cluster secret, or a replayed or stale challenge",
                 st.args.name);
    return make_error(ec::refused, std::string{inspection::refused_text});
  }
  control c;
  try {
    c = inspection::parse_command(text);
  } catch (const std::exception& e) {
    return make_error(ec::bad_request, std::string{e.what()});
  }
  balancer_actor balancer;
  for (auto& e : st.directory)
    if (e.what.role == messages::role::balancer)
      balancer = caf::actor_cast<balancer_actor>(e.handle);
  if (!balancer)
    return inspect_alone(self, c);
  auto rp = self->make_response_promise<std::string>();
  self->request(balancer, defaults::console_forward_timeout, inspect_atom::value, c, st.args.name)
    .then([rp](std::string& answer) mutable { rp.deliver(std::move(answer)); },
          [self, rp, c](caf::error& err) mutable {
            if (is(err, ec::unknown_platform) || is(err, ec::bad_request)) {
              rp.deliver(std::move(err));  // the balancer's answer
              return;
            }
            auto alone = inspect_alone(self, c);
            if (alone.flag == caf::rt_value)
              rp.deliver(alone.value.get_as<std::string>(0));
            else
              rp.deliver(std::move(alone.err));
          });
  return rp;
}

/// The weights lane of a node in a cluster of several, listening on the
/// node's host (any free port, announced in the hello); none when it cannot
/// listen (gossip then goes through the middleman) or is configured off.
std::shared_ptr<messages::lane> open_lane(const node_state& st) {
  const auto& cfg = st.args.cluster;
  if (cfg.nodes.size() < 2 || cfg.transport != config::transport::lane)
    return nullptr;
  messages::lane_options o;
  o.cluster_id = cfg.id;
  o.node = st.args.name;
  o.secret = cfg.secret;
  o.host = cfg.node(st.args.name).host;
  std::set<std::string> peers;
  for (auto& n : cfg.nodes)
    if (n.name != st.args.name)
      peers.insert(n.name);
  o.peer_allowed = [peers](const std::string& node) { return peers.count(node) > 0; };
  o.max_queued_messages = static_cast<size_t>(cfg.gossip_queue);
  o.max_wait_ms = static_cast<int>(cfg.gossip_max_wait * 1000);
  // A peer that takes nothing for as long as it takes to declare it down.
  o.send_timeout_ms = static_cast<int>(cfg.peer_timeout * 1000);
  if (cfg.tls.enabled()) {
    auto tls = tls_of(cfg.tls, st.args.name);
    o.tls = {tls.certificate, tls.key, tls.ca};
  }
  try {
    auto lane = std::make_shared<messages::lane>(std::move(o));
    spdlog::info("[{}] weights lane listening on {}:{}", st.args.name, lane->options().host,
                 lane->port());
    return lane;
  } catch (const std::exception& e) {
    if (cfg.tls.enabled())  // never plain text when TLS was asked for
      throw;
    spdlog::error("[{}] no weights lane ({}); gossip goes through the middleman", st.args.name,
                  e.what());
    return nullptr;
  }
}

/// The door for gossip: decodes each frame of the lane once (on the lane's
/// thread), checked against the cluster id, and hands the weights to the
/// local mixer of the platform it is for.
void start_lane(node_state& st) {
  std::map<std::string, caf::actor_addr> mixers;
  for (auto& p : st.platforms)
    mixers[p.name] = caf::actor_cast<caf::actor_addr>(p.mixer);
  st.lane->start([mixers = std::move(mixers), me = st.args.name, cluster = st.args.cluster.id](
                   const std::string& from, const std::string& target,
                   messages::shared_buffer message) {
    auto i = mixers.find(target);
    auto mixer = i == mixers.end() ? caf::actor{} : caf::actor_cast<caf::actor>(i->second);
    if (!mixer) {
      spdlog::warn("[{}] weights lane: a message from node '{}' for platform '{}', which this "
                   "node does not host (any more), dropped",
                   me, from, target);
      return;
    }
    held_weights w;
    try {
      if (!message)
        throw messages::codec_error("empty message");
      auto env = messages::decode(message->data(), message->size(), cluster);
      auto* weights = std::get_if<messages::weights>(&env.payload);
      if (!weights)
        throw messages::codec_error("a gossip frame that does not hold weights");
      w = held_weights{env.hdr.sender, std::move(*weights), message, message->size()};
    } catch (const messages::codec_error& e) {
      spdlog::warn("[{}] weights lane: refused a message from node '{}': {}", me, from, e.what());
      return;
    }
    caf::anon_send(caf::actor_cast<mixer_actor>(mixer), gossip_atom::value, std::move(w));
  });
}

node_impl::behavior_type node(self_ptr self, node_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  auto me = caf::actor_cast<node_actor>(self);
  auto& sys = self->system();
  st.lane = open_lane(st);
  for (auto& pa : st.args.platforms) {
    auto name = pa.platform.name;
    pa.mixer = spawn_mixer(sys, mixer_args{name, st.args.cluster.id, st.lane});
    pa.node = me;
    pa.predictor = spawn_predictor(sys, {name, st.args.store,
                                         std::move(pa.predictor_samples)});
    self->link_to(pa.predictor);
    auto platform = spawn_platform(sys, pa);
    bind_mixer(pa.mixer, platform);
    self->link_to(platform);
    self->link_to(pa.mixer);
    st.platforms.push_back(local_platform{name, platform, pa.mixer, pa.predictor});
  }
  st.args.platforms.clear();  // their data now lives in the platforms
  if (st.lane)
    start_lane(st);
  st.reports = std::move(st.args.reports);
  using messages::role;
  auto local = [&](role r, std::string name, caf::actor h) {
    st.directory.push_back(entry{{r, std::move(name), st.args.name}, std::move(h)});
  };
  local(role::node, st.args.name, caf::actor_cast<caf::actor>(self));
  local(role::store, st.args.name, caf::actor_cast<caf::actor>(st.args.store));
  for (auto& p : st.platforms) {
    local(role::platform, p.name, caf::actor_cast<caf::actor>(p.platform));
    local(role::mixer, p.name, caf::actor_cast<caf::actor>(p.mixer));
    local(role::predictor, p.name, caf::actor_cast<caf::actor>(p.predictor));
  }
  if (st.args.start_balancer)
    start_balancer(self, false);
  else
    self->delayed_send(self, defaults::first_election, elect_atom::value);
  publish_peers(self);
  for (auto& n : st.args.cluster.nodes)
    if (n.name != st.args.name)
      self->send(self, dial_atom::value, n.name);
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    for (auto i = st.peers.begin(); i != st.peers.end(); ++i) {
      if (i->second.address() != dm.source)
        continue;
      auto name = i->first;
      st.peer_ids.erase(i->second.node());
      st.peers.erase(i);
      st.lanes.erase(name);
      st.lost.insert(name);
      bool had_balancer = st.balancer_home() == name;
      std::vector<entry> next;
      for (auto& e : st.directory)
        if (e.what.node != name)
          next.push_back(e);
      st.directory = std::move(next);
      if (st.finished)
        return;
      spdlog::warn("[{}] node {} is down ({})", st.args.name, name, caf::to_string(dm.reason));
      publish_peers(self);
      if (had_balancer)
        self->delayed_send(self, defaults::succession_delay, elect_atom::value);
      // It may come back: keep dialling.
      self->delayed_send(self, defaults::redial_interval, dial_atom::value, name);
      return;
    }
  });
  return {
    [self](hello_atom, const hello& their, const std::vector<caf::actor>& handles)
      -> caf::result<hello, std::vector<caf::actor>> {
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
    },
    [self](dial_atom, const std::string& name) { dial(self, name); },
    [self](done_atom, const std::string& who, const std::string& run) {
      auto& st = self->state;
      if (!from_cluster(self))
        return;
      st.run = run;
      st.done.insert(who);
      if (st.done.size() >= st.expected_done())
        finish(self);
      else if (who == "balancer" && !st.over_armed) {
        // The run is over: local platforms that do not say so within 30 s
        // (a done message lost on the way) do not keep the node up.
        st.over_armed = true;
        self->delayed_send(self, defaults::over_grace, over_atom::value);
      }
    },
    [self](report_atom, const epoch_report& r) {
      if (from_cluster(self))
        self->state.reports.push_back(r);
    },
    [self](wait_atom) -> caf::result<std::string> {
      if (self->state.released)
        return self->state.run;
      auto rp = self->make_response_promise<std::string>();
      self->state.waiting.push_back(rp);
      return rp;
    },
    [self](control_atom, const control& c) {
      auto& st = self->state;
      if (!from_cluster(self)) {
        spdlog::warn("[{}] refused control '{}' from outside the cluster", st.args.name,
                     messages::to_string(c.verb));
        return;
      }
      if (c.verb != messages::verb::stop) {
        spdlog::warn("[{}] a node does not take '{}'", st.args.name, messages::to_string(c.verb));
        return;
      }
      if (!st.finished && !st.stopping) {
        spdlog::info("[{}] stopping: final checkpoints", st.args.name);
        st.stopping = true;
        // The store is flushed once every platform's final checkpoint is in
        // it (or after 30 s, when a platform does not answer).
        auto pending = std::make_shared<size_t>(st.platforms.size());
        if (*pending == 0)
          finish(self);
        for (auto& p : st.platforms)
          self->request(p.platform, defaults::control_timeout, control_atom::value,
                        control{messages::verb::stop, {}})
            .then(
              [self, pending](bool) {
                if (--*pending == 0)
                  finish(self);
              },
              [self, pending](caf::error& err) {
                spdlog::error("[{}] a platform did not save its final checkpoint: {}",
                              self->state.args.name, caf::to_string(err));
                if (--*pending == 0)
                  finish(self);
              });
      }
    },
    [self](over_atom) {
      auto& st = self->state;
      if (st.finished)
        return;
      std::string missing;
      for (auto& p : st.platforms)
        if (!st.done.count(p.name))
          missing += " " + p.name;
      spdlog::warn("[{}] the run is over but{} did not finish; ending the node", st.args.name,
                   missing);
      finish(self);
    },
    [self](release_atom) {
      auto& st = self->state;
      st.released = true;
      for (auto& rp : st.waiting)
        rp.deliver(st.run);
      st.waiting.clear();
    },
    [self](run_atom, const std::string& state) {
      auto& st = self->state;
      if (!from_cluster(self))
        return;
      // Every node keeps the balancer's latest run state.
      for (auto& e : st.directory)
        if (e.what.role == messages::role::store)
          self->send(caf::actor_cast<store_actor>(e.handle), store_atom::value,
                     std::string{storage::name(storage::family::runs)},
                     std::string{storage::run_state_key}, state);
      // The run is over: local platforms that do not say they are done
      // within the grace period (their done message lost, their node cut
      // off when the balancer finished) do not keep the node up.
      std::string problem;
      auto r = storage::parse_run_state(state, problem);
      if (r && r->finished && !st.finished && !st.over_armed) {
        st.over_armed = true;
        st.run = r->run;
        self->delayed_send(self, defaults::over_grace, over_atom::value);
      }
    },
    [self](elect_atom) {
      auto& st = self->state;
      if (st.finished || st.stopping || st.balancer || !st.balancer_home().empty())
        return;
      if (!st.dialling.empty()) {
        // Still finding out who is there.
        self->delayed_send(self, defaults::election_retry, elect_atom::value);
        return;
      }
      for (auto& n : st.succession()) {
        if (n == st.args.name) {
          spdlog::warn("[{}] no balancer in the cluster: starting one here", st.args.name);
          start_balancer(self, true);
          rehello(self);
          return;
        }
        // A node before us that is up, or has not been seen yet (it may be
        // starting), has its turn first; one we saw go down has not.
        if (!st.lost.count(n))
          return;
      }
    },
    [self](failed_atom, const std::string& why) {
      auto& st = self->state;
      if (self->current_sender() && self->current_sender()->node() != self->node())
        return;  // only this process's store says so
      if (!st.store_failure.empty())
        return;
      st.store_failure = why;
      for (auto& e : st.directory)  // for the console, wherever it asks
        if (e.what.role == messages::role::balancer)
          self->send(caf::actor_cast<balancer_actor>(e.handle), failed_atom::value, st.args.name,
                     why);
      if (st.args.cluster.on_store_failure == config::store_failure_action::stop
          && !st.finished) {
        spdlog::error("[{}] the store cannot write ({}); cluster.on_store_failure = \"stop\": "
                      "stopping the node",
                      st.args.name, why);
        self->send(self, control_atom::value, control{messages::verb::stop, {}});
      } else {
        spdlog::error("[{}] the store cannot write ({}); training goes on without checkpoints "
                      "(cluster.on_store_failure = \"continue\")",
                      st.args.name, why);
      }
    },
    [self](challenge_atom) { return self->state.challenges.issue(); },
    [self](inspect_atom, const std::string& secret, const std::string& command) {
      return inspect(self, secret, command);
    },
  };
}

} // namespace

node_actor spawn_node(caf::actor_system& sys, node_args args) {
  return caf::actor_cast<node_actor>(sys.spawn(node, std::move(args)));
}

} // namespace eg::actors
