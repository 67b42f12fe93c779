#pragma once
// What the inspection console sees of a running cluster: the snapshot (a
// cluster header, one row per platform, nodes, gossip topology, recent
// events) and a platform's history, with their JSON form. Plain code, no CAF
// and no torch: the balancer keeps a console_state beside its epoch barrier
// and builds a snapshot from both (console_snapshot), the node passes its
// JSON on, the console parses and draws it.

#include "common/error.hpp"
#include "algorithms/edgegossip/epoch_barrier.hpp"
#include "messages/codec.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <stdexcept>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace eg::config {
struct cluster_config;
}

namespace eg::inspection {

/// A JSON document that is not a snapshot / history / answer.
class inspection_error : public failure<errc::bad_request> {
public:
  using failure::failure;
};

/// The text of the error a node answers for a wrong cluster secret (the
/// console recognises a refusal by it).
inline constexpr const char* refused_text = "refused: wrong cluster secret";

/// What the console presents with a command, in answer to the node's
/// challenge (node_actor's challenge_atom): "<challenge> <nonce> <proof>",
/// the proof an HMAC-SHA256 keyed by the cluster secret over both nonces
/// (messages/secret.hpp), so that neither the secret nor anything replayable
/// crosses the network; no proof for no secret.
std::string console_credentials(const std::string& secret, const std::string& challenge);

/// True when `credentials` answer a challenge that `redeem` accepts (issued
/// by this node, not used yet: it is used up) and prove the cluster secret
/// `secret` (an empty `secret` requires no proof). Compares in time
/// independent of where digests differ.
bool credentials_valid(const std::string& credentials, const std::string& secret,
                       const std::function<bool(const std::string&)>& redeem);

struct cluster_header {
  std::string id;
  std::string strategy;
  std::string schedule;
  std::string run;          ///< run name ("" before every platform joined)
  std::string state;        ///< "waiting", "training", "paused", "finished", "unknown"
  double elapsed_seconds = 0;
  uint32_t epoch = 0;       ///< the furthest epoch a platform is in (0-based)
  uint32_t epochs = 0;      ///< epochs of the run
  int64_t evaluated_epoch = -1;  ///< latest epoch whose averaged model was evaluated
  double averaged_accuracy = 0;  ///< of that epoch, over every node's test data
  uint32_t platforms_up = 0;
  uint32_t platforms_down = 0;
  std::string balancer;     ///< node hosting the balancer
  bool balancer_reachable = true;  ///< false: the answering node's own partial view
  std::string via;          ///< node that answered the console
  /// Parameter-server strategies: the node hosting the server ("" for
  /// other strategies), and the newest version of its model a worker pulled.
  std::string server;
  uint64_t server_version = 0;
  /// Each node's share of averaged_accuracy: "a 0.8000 of 100, b 0.5000 of
  /// 300" ("" for one node's own, or none).
  std::string accuracy_by_node;
};

/// A split run's header (strategy "split MODEL"): its rows are the stages.
inline bool is_split(const cluster_header& h) { return h.strategy.rfind("split ", 0) == 0; }

struct platform_row {
  std::string name;
  std::string node;
  /// "up", "down", "restoring" (rejoined, not trained yet), "waiting" (not
  /// joined yet), "refused" (at join; the events say why)
  std::string state;
  bool paused = false;
  uint32_t epoch = 0;       ///< 0-based
  double progress = 0;      ///< of the epoch, 0..1
  uint64_t iterations = 0;  ///< of the epoch so far
  uint64_t samples = 0;     ///< of the epoch so far
  double throughput = 0;    ///< predicted points/s (0: no prediction)
  double ratio = 1;         ///< r_i of the epoch
  double train_loss = 0;    ///< mean over the epoch so far
  double test_accuracy = -1;  ///< of its own model after its latest epoch (-1: none yet)
  uint64_t bytes_in = 0;    ///< gossip bytes, completed epochs
  uint64_t bytes_out = 0;
  uint64_t messages_in = 0;
  uint64_t messages_out = 0;
  double exchange_rate = 0;  ///< messages sent per iteration, completed epochs
  int64_t checkpoint_epochs = -1;  ///< epochs done in its latest checkpoint (-1: none)
  double checkpoint_at = -1;       ///< elapsed seconds when it was taken (-1: none)
  /// Parameter-server strategies: commits to the server (completed epochs
  /// and the current one), per second of training, and their mean
  /// staleness (other workers' commits between two pulls).
  uint64_t commits = 0;
  double commit_rate = 0;
  double staleness = 0;
};

struct node_row {
  std::string name;
  std::string host;
  uint16_t port = 0;
  std::string state;        ///< "up", "down", "unknown"
  bool balancer = false;
  std::vector<std::string> platforms;
  /// Why the node's store cannot write (disk full, read-only, removed): its
  /// checkpoints are not being saved. "" while it writes.
  std::string store;
};

/// Gossip received by `to` from `from` over the completed epochs.
struct link {
  std::string from;
  std::string to;
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

struct event {
  double at = 0;            ///< elapsed seconds since the balancer started
  std::string kind;         ///< "join", "down", "plan", "epoch", "checkpoint", "pause", "resume", "server"
  std::string text;
};

struct snapshot {
  cluster_header cluster;
  std::vector<platform_row> platforms;
  std::vector<node_row> nodes;
  std::vector<link> topology;
  std::vector<event> events;  ///< oldest first
};

/// The per-epoch reports of one platform.
struct history {
  std::string platform;
  std::vector<messages::epoch_report> epochs;
};

/// The answer to a command (pause, resume, checkpoint).
struct answer {
  bool ok = true;
  std::string text;
};

/// The most recent events, at most `capacity` of them.
class event_log {
public:
  explicit event_log(size_t capacity = 64) : capacity_(capacity) {}
  void add(double at, std::string kind, std::string text);
  std::vector<event> recent() const { return {events_.begin(), events_.end()}; }
  size_t size() const { return events_.size(); }

private:
  size_t capacity_;
  std::deque<event> events_;
};

/// What the balancer keeps for the console beyond its epochs: the events,
/// whether the console paused the cluster, the platforms restoring, the
/// stores that cannot write and each platform's latest checkpoint. The
/// methods note the balancer's events in the words the console shows.
struct console_state {
  using clock = std::chrono::steady_clock;

  event_log events;
  clock::time_point born = clock::now();  ///< events are timed from here
  bool paused = false;
  clock::time_point paused_at;
  std::set<std::string> restoring;  ///< rejoined after being down, not trained yet
  std::map<std::string, std::string> store_failures;  ///< node -> why its store cannot write
  /// Each platform's latest checkpoint: epochs done, and when (seconds since `born`).
  std::map<std::string, std::pair<int64_t, double>> checkpoints;
  /// Where the parameter server runs now, when it is not on the node the
  /// cluster file names (a successor), or "" before the node said.
  std::string server;

  /// Seconds since `born`.
  double now() const;
  void note(std::string kind, std::string text);

  /// A platform joined, or rejoined after it was down (then it is restoring
  /// until it trains).
  void joined(const std::string& name, const std::string& node, bool rejoined);
  /// A platform's monitor fired.
  void down(const std::string& name, const std::string& node, const std::string& reason);
  /// The balancer refused a platform at join (its data or settings are not
  /// the cluster's).
  void refused(const std::string& name, const std::string& node, const std::string& why);
  /// A platform reported an epoch: it checkpoints at every epoch end, before
  /// it reports, and is no longer restoring.
  void reported(const messages::epoch_report& r);
  /// A checkpoint the console asked of a platform was saved.
  void checkpointed(const std::string& name);
  /// The parameter server runs on `node` now ("": none reachable, which
  /// changes nothing); a move is noted.
  void server_at(const std::string& node);
  /// A node's store cannot write; false when that was known.
  bool store_failed(const std::string& node, const std::string& why);
  /// The console sent `what` (pause, resume, checkpoint) to `platforms`,
  /// `when`: answers what was done, as noted. A pause marks the cluster
  /// paused; a resume moves the start of the epochs not complete in `epochs`
  /// by the time paused, which is no epoch time (cluster.csv), as on the
  /// platforms.
  std::string command(messages::verb what, const std::vector<std::string>& platforms,
                      actors::epoch_barrier& epochs, clock::time_point when);
  /// The plans of an epoch went out.
  void planned(const actors::epoch_plan& plan);
  /// The deadline of `epoch` (`limit` seconds) cut these platforms.
  void cut(uint32_t epoch, double limit, const std::string& names);
  /// The averaged model of `epoch` was evaluated; the platforms that
  /// reported it have checkpoints of it.
  void epoch_done(const actors::epoch_barrier& epochs, uint32_t epoch);
};

/// What the console shows of the cluster file: its id, strategy, epochs,
/// the node named to host the balancer, and every node with its address and
/// platforms (in file order).
struct cluster_layout {
  struct node {
    std::string name;
    std::string host;
    uint16_t port = 0;
    std::vector<std::string> platforms;
  };
  std::string id;
  std::string strategy;
  std::string schedule;     ///< "sync" or "async"
  uint32_t epochs = 0;
  std::string balancer;
  std::string server;  ///< strategy.server's node ("" without a server)
  std::vector<node> nodes;

  static cluster_layout of(const config::cluster_config& cluster);
  /// A node that joined the cluster (or joined again from elsewhere).
  void joined(node row);
  /// The header's fields the layout fixes (id, strategy, schedule, epochs,
  /// balancer); the rest is left as it is.
  void fill(cluster_header& h) const;
};

/// The balancer's run as the console shows it.
struct run_status {
  std::string run;          ///< "" before it started
  bool started = false;
  bool finished = false;
  double elapsed_seconds = 0;  ///< of the run, a continued run's earlier ones included
};

/// The balancer's answer to "snapshot": the cluster file's platforms and
/// nodes with what `epochs` and `console` know of them, the predictions
/// asked for it (by platform), and the node that answered (`via`).
snapshot console_snapshot(const cluster_layout& cluster,
                          const actors::epoch_barrier& epochs, const console_state& console,
                          const run_status& run,
                          const std::map<std::string, messages::prediction>& predictions,
                          const std::string& via);

/// The reports of `platform` among `reports`, by epoch.
history history_of(const std::string& platform,
                   const std::vector<messages::epoch_report>& reports);

/// Who received gossip from whom, summed over the reports' received_from.
std::vector<link> topology_of(const std::vector<messages::epoch_report>& reports);

/// Adds up a platform's completed epochs into its row: bytes and messages in
/// and out, exchange rate, test accuracy of the latest epoch.
void add_completed_epochs(platform_row& row, const std::vector<messages::epoch_report>& reports);

/// Parses a console command ("snapshot", "history NAME", "pause", "resume",
/// "checkpoint"), as typed by a user; throws inspection_error naming what is
/// wrong (the node parses it at its door; the balancer gets the control).
messages::control parse_command(const std::string& text);

std::string to_json(const snapshot& s);
std::string to_json(const history& h);
std::string to_json(const answer& a);

/// Parse what to_json wrote; throw inspection_error when the text is not that.
snapshot snapshot_from_json(const std::string& text);
history history_from_json(const std::string& text);
answer answer_from_json(const std::string& text);

} // namespace eg::inspection
