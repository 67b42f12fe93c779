#pragma once
// The node actor's state and the functions its parts share (inside the
// project's actors/ only): node.cpp (lifetime, the behaviour),
// node_peering.cpp (dialling, the handshake, the directory), node_console.cpp
// (the console's door and the node's own view), node_lane.cpp (the weights
// lane's door).

#include "actors/node/directory.hpp"
#include "actors/interfaces.hpp"
#include "actors/node/node.hpp"
#include "messages/lane.hpp"
#include "messages/secret.hpp"

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace eg::actors::node_detail {

/// What the weights lane's door hands on besides gossip: workers' updates
/// for the parameter server hosted here now, and platforms' models for the
/// balancer hosted here now (set on the node's thread, read on the lane's).
class lane_routes {
public:
  void set_server(caf::actor_addr server) {
    std::lock_guard<std::mutex> lock(mutex_);
    server_ = std::move(server);
  }
  caf::actor_addr server() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return server_;
  }
  void set_balancer(caf::actor_addr balancer) {
    std::lock_guard<std::mutex> lock(mutex_);
    balancer_ = std::move(balancer);
  }
  caf::actor_addr balancer() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return balancer_;
  }

private:
  mutable std::mutex mutex_;
  caf::actor_addr server_;
  caf::actor_addr balancer_;
};

/// What a node knows and holds.
struct node_state {
  static inline const char* name = "node";
  node_args args;
  std::vector<local_platform> platforms;
  std::optional<balancer_actor> balancer;
  std::optional<server_actor> server;  // the parameter server, if hosted here
  std::map<size_t, stage_actor> stages;  // a split run's stages hosted here, by index
  bool split_over = false;               // a split run: its first stage ended it
  actors::directory directory;             // every component known, local and remote
  actors::succession succession;           // who hosts the balancer when its node is lost
  actors::succession server_succession;    // who hosts the parameter server when its node is lost
  std::map<std::string, node_actor> peers;  // connected remote nodes by name
  /// This node last found itself on the minority side of a cut (it may not
  /// start a balancer or a parameter server there).
  bool minority = false;
  /// The balancer hosted here paused its platforms: this node reaches no
  /// majority (check_balancer_majority).
  bool balancer_paused = false;
  /// Its peers are being asked whether they follow another balancer,
  /// before ours resumes (check_balancer_majority).
  bool majority_asking = false;
  /// What the last such poll found ("node c follows the balancer on node
  /// b"), said once.
  std::string kept_elsewhere;
  std::set<std::string> dialling;
  /// When a peer last handshook again while it was peered (it dialled us
  /// anew after a freeze or a cut, over a new connection).
  std::map<std::string, std::chrono::steady_clock::time_point> rehandshake_at;
  /// Peers this node dials although the file order says they dial it, and
  /// until when: one that dialled us again just before its old connection
  /// was seen to end (it takes itself to be peered; CAF dropped our route to
  /// it with the old connection). For a short while only: a peer that is
  /// really gone dials us itself when it is back.
  std::map<std::string, std::chrono::steady_clock::time_point> dial_back;
  std::set<std::string> probed;  // peers that answered probe_tcp (or probe_tls) just now
  std::map<std::string, int> dial_failures;
  /// Peers whose port refused the last probe (the host answers, nothing
  /// listens: the node is not running), and since when every other node's
  /// has, after this node had peers and lost them.
  std::set<std::string> refusing;
  std::set<std::string> probing;  // lost peers that dial us, probed now (probe_lost)
  std::optional<std::chrono::steady_clock::time_point> alone_since;
  std::set<caf::node_id> peer_ids;         // CAF node ids of peered nodes
  std::set<std::string> lost;             // nodes that were peered and went down
  std::set<std::string> done;             // local platforms done
  std::set<std::string> left;             // local platforms that left the run (ran away)
  bool balancer_done = false;             // the balancer (if here) ended the run
  std::string run;
  bool finished = false;
  bool released = false;  // the launcher may end the process
  bool stopping = false;
  bool over_armed = false;  // the run is known to be over: over_atom is on its way
  /// The run this node saw end ("" while it goes on): told to nodes that
  /// peer with this one later, so that a node that was down or cut off when
  /// the run ended ends as well instead of waiting for peers that are gone.
  std::string ended;
  /// Why the last election here was put off ("" if it was not).
  std::string deferred_election;
  std::vector<messages::epoch_report> reports;
  std::vector<caf::response_promise> waiting;
  /// The weights lane (none in a single-node cluster, with
  /// cluster.transport = "middleman", or when it could not listen).
  std::shared_ptr<messages::lane> lane;
  std::map<std::string, messages::lane_endpoint> lanes;  // of peered nodes
  std::shared_ptr<lane_routes> routes = std::make_shared<lane_routes>();
  /// Nonces handed out to dialling nodes and consoles (challenge_atom).
  messages::challenges challenges;
  /// Why this node's store cannot write ("" while it can).
  std::string store_failure;

  ~node_state() {
    if (lane)
      lane->stop();  // no frames for mixers of a node that is gone
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
    h.secret_digest = messages::proof(args.settings.secret, purpose, args.settings.cluster_id, args.name,
                                      challenge, nonce);
    h.lane_port = lane ? lane->port() : 0;
    std::vector<caf::actor> handles;
    for (auto& e : directory.hosted_by(args.name)) {
      h.components.push_back(e.what);
      handles.push_back(e.handle);
    }
    return {std::move(h), std::move(handles)};
  }

  /// Throws codec_error when `h` does not prove the cluster secret with
  /// `purpose` over its challenge and nonce.
  void check_proof(const messages::hello& h, const std::string& purpose) const {
    if (args.settings.secret.empty())
      return;
    if (!messages::same_digest(h.secret_digest,
                               messages::proof(args.settings.secret, purpose, args.settings.cluster_id,
                                               h.node, h.challenge, h.nonce)))
      throw messages::codec_error("node '" + h.node + "' "
                                  + (h.secret_digest.empty() ? "presented no cluster secret"
                                                             : "presented a wrong cluster secret"));
  }

  /// A split run (stages, no platforms).
  bool split() const { return !args.settings.stage_nodes.empty(); }
  /// Every local platform, and the balancer if it runs here, is done; in a
  /// split run, the first stage ended it.
  bool all_done() const {
    if (split())
      return split_over;
    return done.size() >= platforms.size() && (balancer_done || !balancer);
  }
};


using over_atom = caf::atom_constant<caf::atom("over")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
/// Time to see whether this node is to start the parameter server.
using serve_atom = caf::atom_constant<caf::atom("serve")>;
/// The node's interface with its private messages: the run is over (the
/// grace period for local platforms ended), the store is flushed (the
/// launcher may end the process), and the parameter server's election.
/// Time to ask the peers again whether another balancer kept the run.
using recheck_atom = caf::atom_constant<caf::atom("recheck")>;
/// The balancer hears pauses and resumes for a lost majority through the
/// console's command, from this sender.
inline constexpr const char* majority_via = "majority";
using node_impl = node_actor::extend<caf::reacts_to<over_atom>, caf::reacts_to<release_atom>,
                                     caf::reacts_to<serve_atom>, caf::reacts_to<recheck_atom>>;
using self_ptr = node_impl::stateful_pointer<node_state>;


/// After a failed dial or probe of `peer` (`refused`: its host refused
/// the connection): a node that lost peers, is on a minority side and
/// finds every node beyond that side with its port closed for
/// defaults::alone_timeout ends (the run ended while it was cut off, or the
/// cluster stopped); its checkpoints are kept.
void check_alone(self_ptr self, const std::string& peer, bool refused);

/// Whether the message being handled comes from this process or a peered
/// node (not from a stranger who connected to our port without a handshake).
bool from_cluster(self_ptr self);
/// The weights lane endpoint of another node's lane, as text ("": this
/// node, or one without a lane, or this node has none: reached through CAF).
std::string lane_of(const node_state& st, const std::string& node);
/// Sends every local mixer the current list of peer mixers.
void publish_peers(self_ptr self);
void publish_testers(self_ptr self);
/// The balancer hosted here pauses its platforms while this node reaches
/// no majority of the nodes; once it does again, it asks its peers whether
/// another balancer kept the run, and resumes them only if none did.
void check_balancer_majority(self_ptr self);
/// Tells the local balancer about the platforms of `node`.
void announce_platforms(self_ptr self, const std::string& node);
/// Two balancers: ours stops if the other's node is before ours in the
/// succession.
void resolve_balancers(self_ptr self);
/// Starts the balancer here: a new run, or (`continuing`) the run of the
/// saved run state.
void start_balancer(self_ptr self, bool continuing);
/// Starts the parameter server here: a new run's, or (`continuing`) from
/// the newest server checkpoint in this node's store.
void start_server(self_ptr self, bool continuing);
/// Two parameter servers: ours stops if the other's node is before ours in
/// the server's succession.
void resolve_servers(self_ptr self);
/// Ends the node's run: metrics file, lane stats, store flush, release.
void finish(self_ptr self);
/// Peer node `peer` saw run `run` end ("": it goes on): unless this node is
/// on another run or already ending, it ends once its platforms are done or
/// defaults::over_grace has passed.
void heard_run_over(self_ptr self, const std::string& peer, const std::string& run);

// node_roles.cpp
/// Hosts the balancer here if no live node before this one in the
/// succession does.
void elect(self_ptr self);
/// Hosts the parameter server here if no live node before this one in the
/// server's succession does.
void serve(self_ptr self);

// node_run.cpp
/// A local platform, the balancer, the first stage (or a peer node that saw
/// the run end) is done with run `run`.
void someone_done(self_ptr self, messages::role who, const std::string& name, const std::string& run);
/// A local platform's epoch report (or a split run's epoch, from its first
/// stage), for the node's metrics.
void keep_report(self_ptr self, const epoch_report& r);
/// Control for the whole node: stop (final checkpoints, then the end).
void stop_node(self_ptr self, const control& c);
/// The grace after the run's end passed: the node ends, done or not.
void run_over(self_ptr self);
/// The balancer's run state: kept in every node's store.
void keep_run_state(self_ptr self, const std::string& state);
/// This process's store cannot write: reported once; the node goes on or
/// stops as cluster.on_store_failure says.
void store_failed(self_ptr self, const std::string& why);
/// A monitored peer node is down: its components leave the directory; a
/// balancer or server it hosted is succeeded; it is dialled again.
void peer_down(self_ptr self, const caf::down_msg& dm);
/// Whether `dm` is a local platform's end. One that exits normally before
/// the run's end left the run (its model kept running away past
/// train.max_rollbacks): it is done here, and a node whose every platform
/// left ends with an error (node_args::failure) once it hosts no balancer
/// still running.
bool platform_down(self_ptr self, const caf::down_msg& dm);

// node_peering.cpp
/// Dials the peer node of that name (retried until it answers).
void dial(self_ptr self, const std::string& name);
/// Tells every peer node our directory again (a component was added or
/// removed here); their answers are taken in as in a handshake.
void rehello(self_ptr self);
/// Answers a peer's hello (hello_atom): ours, or ec::refused.
caf::result<hello, std::vector<caf::actor>>
answer_hello(self_ptr self, const hello& their, const std::vector<caf::actor>& handles);

// node_members.cpp
/// Takes in a node that joined (or joined again from another address):
/// membership, the doors, the succession, the console's layout, the
/// balancer's barrier; dials it and keeps it in the store. False when it
/// was known as it is, or names this node or a node of the cluster file.
bool add_member(self_ptr self, config::node_config member);
/// A node asks to join (member_atom with its credentials and description).
caf::result<std::string> admit_member(self_ptr self, const std::string& credentials,
                                      const std::string& description);
/// A peer's list of members (member_atom): the new ones are taken in and
/// passed on to the other peers.
void learn_members(self_ptr self, const std::string& text);
/// Tells a peer that just peered with this node the members it knows.
void tell_members(self_ptr self, const node_actor& peer);

// node_console.cpp
/// The console's request (credentials, command text), answered in JSON.
caf::result<std::string> inspect(self_ptr self, const std::string& credentials,
                                 const std::string& text);

// node_lane.cpp
/// The node's weights lane (null: none, gossip goes through the middleman).
std::shared_ptr<messages::lane> open_lane(const node_state& st);
/// Hands the lane's frames, decoded once, to the local mixers.
void start_lane(node_state& st);

} // namespace eg::actors::node_detail
