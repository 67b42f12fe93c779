#pragma once
// What the balancer knows of epochs, as a plain class (no CAF, no torch), so
// that the barrier, the averaging weights, the plans (Algorithm 1 with
// EdgeGossip) and the epoch deadline are tested without actors: the
// platforms (up or down, their latest progress, |X_i|, predicted epoch
// times, the epoch each is expected from), every epoch's reports, start and
// end, planned time and deadline, and the evaluated epochs. The balancer
// (actors/balancer/balancer.cpp) holds one, feeds it what arrives and sends what it
// returns. Time is passed in, so tests decide what "now" is.

#include "algorithms/edgegossip/balancing.hpp"
#include "messages/codec.hpp"
#include "storage/store.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace eg::config {
struct cluster_config;
}

namespace eg::actors {

/// What the barrier takes from the cluster file.
struct barrier_settings {
  std::vector<std::string> expected;  ///< the cluster file's platforms
  size_t quorum = 0;           ///< platforms that must have joined for a new run to start
  std::map<std::string, uint64_t> shard_sizes;  ///< |X_i| of every platform
  uint32_t last_epoch = 0;     ///< the run stops after this epoch (train.epochs - 1)
  bool edgegossip = false;     ///< plans with Algorithm 1; else GoSGD, every r_i = 1
  bool asynchronous = false;   ///< no epoch barrier: platforms go on by themselves
  double p_threshold = 0.001;  ///< a platform predicted slower than this has failed
  double f_threshold = 0.1;    ///< failed share past which survivors adopt failed shards
  double deadline = 0;         ///< edgegossip.deadline (0: none)
  /// edgegossip.count_network: Algorithm 1 plans on compute plus the
  /// communication the predictions' link times and the last reports' bytes
  /// give (epoch_barrier::communication).
  bool count_network = false;
  /// edgegossip.first_epoch_share: the share a platform the predictor has
  /// not seen train yet trains (1 here: the whole shard).
  double first_epoch_share = 1;
  /// EdgeGossip over push-sum: every plan carries the epoch's gossip rounds
  /// (messages::plan::rounds), from the batches of the platform with the
  /// most (batch, max_iterations) and the steps per round (gossip_every).
  bool push_sum = false;
  int64_t batch = 64;
  int64_t max_iterations = 0;
  int64_t gossip_every = 1;
  /// train.average_every: the epochs whose models are averaged (averages()).
  int64_t average_every = 1;

  /// The settings of `cluster` (shard sizes apart: they come with the data).
  static barrier_settings of(const config::cluster_config& cluster);
};

/// The plans of one epoch, for the balancer to send and log.
struct epoch_plan {
  uint32_t epoch = 0;
  /// Every live platform's plan, by name.
  std::map<std::string, messages::plan> plans;
  /// Algorithm 1 planned it. False: every r_i = 1 (GoSGD, or a live platform
  /// without observations yet, which is profiled on its whole shard).
  bool balanced = false;
  /// The ratios as the balancer logs them: " p0 r=1.00 p2 r=0.33".
  std::string line;
  /// Live platforms predicted below p_threshold: failed. They train their
  /// whole shard, so that the barrier, which waits for every live platform,
  /// is never held up by one of them.
  std::vector<std::string> failed;
  /// What the balancer warns of: each live platform failed, and exception
  /// handling when it is on.
  std::vector<std::string> warnings;
  /// Exception handling (failed / E > f_threshold): the failed platforms
  /// whose shards the survivors take over, in parts (empty: none).
  std::vector<std::string> adopt;
  bool exception_handling = false;
  size_t failed_count = 0;  ///< failed platforms, down ones included
  size_t platforms = 0;     ///< of how many (Algorithm 1's E)
  double planned_seconds = 0;  ///< the longest predicted epoch time (0: none)
};

/// What the epoch deadline asks for when its timer fires.
struct deadline_action {
  /// The deadline is not there yet, or the cluster is paused: look again
  /// after this many seconds.
  std::optional<double> wait;
  double limit = 0;  ///< the deadline, seconds after the epoch's start
  /// The live platforms expected in the epoch that did not report it: to be
  /// cut (empty: nothing to do).
  std::vector<std::string> cut;
};

class epoch_barrier {
public:
  using clock = std::chrono::steady_clock;

  /// What the balancer knows of one platform.
  struct platform {
    std::string node;
    bool up = true;
    messages::epoch_report progress;  ///< latest progress or report
    uint64_t shard_size = 0;          ///< |X_i|
    std::map<uint32_t, double> predicted_seconds;  ///< per epoch, EdgeGossip
    /// Joined (again) during the run: expected from this epoch on.
    uint32_t first_epoch = 0;
  };

  /// A platform that joined (again).
  struct joined {
    bool again = false;        ///< it was known: a rejoin (its node restarted, or woke up)
    uint32_t first_epoch = 0;  ///< the barrier expects it from this epoch on
    /// Asynchronous schedule, a run in progress: its plan, to send at once.
    std::optional<messages::plan> plan;
  };

  explicit epoch_barrier(barrier_settings settings);

  const barrier_settings& settings() const { return settings_; }
  uint32_t last_epoch() const { return settings_.last_epoch; }

  // -- platforms --------------------------------------------------------------------

  const std::map<std::string, platform>& platforms() const { return platforms_; }
  /// The platform of that name; null when it never joined.
  const platform* find(const std::string& name) const;
  /// Platforms up.
  uint32_t up() const;
  /// The names of the platforms up, in name order.
  std::vector<std::string> live() const;
  /// `name` is a platform of the cluster file, or of a node that joined.
  bool expects(const std::string& name) const;
  /// A platform of a node that joined the cluster: it may join the run
  /// (join()) from now on. False when it was expected already.
  bool expect(const std::string& name);
  /// Enough platforms joined for a new run to start (cluster.quorum, 0:
  /// all), and at least one. A platform refused at join counts out of the
  /// quorum: "all" is all but it, and a quorum larger than the platforms
  /// left is all of them.
  bool has_quorum() const;
  /// The balancer refused platform `name` at join (`why`: its data or
  /// settings are not the cluster's): it is no longer expected, and the
  /// epoch lines name it until it joins again set right (expect()).
  /// False when it was refused already for the same reason.
  bool refuse(const std::string& name, const std::string& why);
  /// The platforms refused, and why, by name.
  const std::map<std::string, std::string>& refused() const { return refused_; }

  /// Platform `name` of `node` joins, or joins again as a fresh platform.
  /// `running`: a run is in progress (started, not finished); the platform
  /// then takes part from the next epoch (synchronous schedule: the epochs
  /// planned so far do not wait for it), or at once with the epoch the
  /// others are in (asynchronous: it gets its plan now, with r = 1).
  /// `samples` > 0: the platform's training samples, which its node knows
  /// (data of its own) in place of the shard size in the settings.
  joined join(const std::string& name, const std::string& node, bool running,
              uint64_t samples = 0);
  /// A platform's monitor fired: it no longer holds an epoch back. False
  /// when it was not up.
  bool down(const std::string& name);

  // -- reports ----------------------------------------------------------------------

  /// A platform's report of the epoch so far.
  void progress(const messages::epoch_report& r);
  /// A platform's report at the end of an epoch, received `now`; the
  /// prediction of its epoch time is filled in. False when that report was
  /// counted already (sent again to a balancer that took over).
  bool record(messages::epoch_report& r, clock::time_point now);
  /// Every live platform expected in `epoch` reported it (or a later one:
  /// reports lost with a previous balancer do not hold an epoch back).
  bool complete(uint32_t epoch) const;
  /// The epochs with reports that are complete, oldest first.
  std::vector<uint32_t> complete_epochs() const;
  /// The reports of `epoch` by platform (empty: none yet).
  const std::map<std::string, messages::epoch_report>& reports(uint32_t epoch) const;
  /// Every report of the run in the order received, a continued run's saved
  /// ones first (metrics.csv, the run state, the console).
  const std::vector<messages::epoch_report>& all_reports() const { return all_reports_; }

  /// A platform's weight in the averaged model of `epoch`: the points it
  /// trained in that epoch (FedAvg's n_k), so that a platform on a small
  /// share r_i counts in proportion. Under GoSGD every platform trains its
  /// whole shard and the average is the plain mean. A platform without a
  /// report for the epoch counts as the mean of those with one.
  double averaging_weight(uint32_t epoch, const std::string& name) const;
  /// A platform's weights of the output layer's rows in the averaged model
  /// of `epoch`: the points of each class it trained in that epoch; empty
  /// when its report does not say.
  std::vector<double> class_weights(uint32_t epoch, const std::string& name) const;

  // -- plans ------------------------------------------------------------------------

  /// The plans of `epoch`, which starts `now`. GoSGD: every r_i = 1.
  /// EdgeGossip: Algorithm 1 (learning::balance with p_threshold and
  /// f_threshold) on the predicted throughputs, by platform name; r = 1 for
  /// all while a live platform has no observations (the first epoch
  /// profiles). Records each platform's predicted epoch time and the
  /// epoch's planned time (the longest), for the deadline and cluster.csv.
  epoch_plan plan(uint32_t epoch, const std::map<std::string, messages::prediction>& predictions,
                  clock::time_point now);
  /// The newest epoch whose plans went out (0: none yet).
  uint32_t planned_epoch() const;
  /// The plans of `epoch` went out.
  bool planned(uint32_t epoch) const { return epoch_start_.count(epoch) > 0; }
  /// EdgeGossip's planned time of `epoch` (0: none).
  double planned_seconds(uint32_t epoch) const;
  /// Plans that count the network: the communication of `name`'s next
  /// epoch, from its prediction's send seconds per byte (its link) and the
  /// bytes it sent in its last report before `epoch`. A platform sends
  /// about as many messages a epoch whatever its share (its exchange
  /// probability is p / r_i; push-sum makes the epoch's rounds), so these
  /// are fixed seconds. Its own sending alone: the time its frames take to
  /// come in is its senders' links, which their plans count.
  learning::platform_estimate communication(const std::string& name,
                                            const messages::prediction& p,
                                            uint32_t epoch) const;

  /// The console resumed a cluster paused since `paused_at`: the time paused
  /// is no epoch time (cluster.csv), as on the platforms, so the epochs not
  /// complete start that much later.
  void resumed(clock::time_point paused_at, clock::time_point now);

  // -- the epoch deadline -------------------------------------------------------------

  /// Arms the deadline of `r`'s epoch (learning::epoch_deadline) when `r`
  /// is the first report with data of it, received `now`: EdgeGossip with
  /// the synchronous schedule only (GoSGD, the baseline, waits for its
  /// slowest platform). Answers the seconds from now until it passes, or
  /// nothing when no deadline was armed.
  std::optional<double> arm_deadline(const messages::epoch_report& r, clock::time_point now);
  /// The deadline of `epoch` (seconds after its start); none when not armed.
  std::optional<double> deadline(uint32_t epoch) const;
  /// The deadline timer of `epoch` fired at `now`: whom to cut, or when to
  /// look again (`paused`: the console paused the cluster).
  deadline_action deadline_passed(uint32_t epoch, clock::time_point now, bool paused) const;

  // -- the run and its evaluated epochs --------------------------------------------------

  /// Training starts `now`.
  void start(clock::time_point now);
  /// Continues a saved run: its evaluated epochs and reports (of cluster
  /// `cluster_id`; why each unusable one was left out goes to `unusable`).
  /// Answers the epoch to plan next (the one after the last evaluated).
  uint32_t resume(const storage::run_state& saved, const std::string& cluster_id,
                  std::vector<std::string>& unusable);
  /// Seconds of the run at `now`, a continued run's earlier ones included.
  double elapsed(clock::time_point now) const;

  /// `epoch` is complete at `now` and its averaged model is to be
  /// evaluated: measures its row of cluster.csv (elapsed, epoch and training
  /// times, samples, prediction error, platforms up). False when it is being
  /// or was evaluated already.
  bool begin_evaluation(uint32_t epoch, clock::time_point now);
  /// The evaluation of `epoch` begun is dropped (the balancer paused on a
  /// minority side while it gathered the models): the epoch is not closed,
  /// and may be evaluated again later.
  void cancel_evaluation(uint32_t epoch);
  /// The row of `epoch` while its averaged model is being evaluated; null
  /// when it is not.
  const storage::cluster_epoch* evaluating(uint32_t epoch) const;
  /// The averaged model of `epoch` was evaluated: its test loss and
  /// accuracy, and the seconds evaluating took.
  const storage::cluster_epoch& evaluation_done(uint32_t epoch, double loss, double accuracy,
                                                double seconds);
  /// The same from the nodes' tests of the averaged model on their own test
  /// data: the loss and accuracy over all their samples (NaN when no node
  /// tested it), each node's kept beside them.
  const storage::cluster_epoch& evaluation_done(uint32_t epoch,
                                                std::vector<storage::node_test> tests,
                                                double seconds);
  /// Closes evaluated `epoch` at `now`: the wall time since the epoch before
  /// ended (what the user waited) and, of it, the time waiting for messages.
  const storage::cluster_epoch& close(uint32_t epoch, clock::time_point now);
  const std::map<uint32_t, storage::cluster_epoch>& evaluated() const { return evaluated_; }
  /// The evaluated epochs in order (cluster.csv, the run state).
  std::vector<storage::cluster_epoch> evaluated_epochs() const;
  /// The slowest platform's training time in `epoch` (measured; 0 before).
  double slowest_training(uint32_t epoch) const;
  /// Every epoch of the run was evaluated.
  bool all_evaluated() const;
  /// `epoch`'s models are averaged and the average tested
  /// (train.average_every, and the last epoch always); the others end with
  /// their reports, evaluation_done with no tests.
  bool averages(uint32_t epoch) const;

  // -- what users read --------------------------------------------------------------------

  /// The log line of closed `epoch`: its wall time and, of it, training,
  /// waiting for messages and evaluating; samples; the averaged model's
  /// accuracy; platforms up; how far off the predicted epoch times were.
  std::string epoch_line(uint32_t epoch) const;
  /// "; refused: c0 (why), ..." for the platforms refused at join ("" when
  /// none): the end of the epoch lines.
  std::string refused_text() const;
  /// The progress display at `now`: the furthest epoch, each platform's
  /// epoch and share of it done (or "down"), the mean training loss, the
  /// latest averaged model's accuracy and the run's time.
  std::string progress_line(clock::time_point now) const;

private:
  storage::cluster_epoch measure(uint32_t epoch, clock::time_point now);
  /// EdgeGossip over push-sum: the epoch's gossip rounds (0 otherwise).
  uint32_t gossip_rounds(const std::vector<std::string>& survivors,
                         const std::map<std::string, double>& ratios) const;

  barrier_settings settings_;
  /// The cluster file's platforms (settings_.expected before any joined or
  /// was refused): the quorum counts among them.
  std::vector<std::string> file_platforms_;
  std::map<std::string, std::string> refused_;
  std::map<std::string, platform> platforms_;
  std::map<uint32_t, std::map<std::string, messages::epoch_report>> reports_;
  std::vector<messages::epoch_report> all_reports_;
  std::map<uint32_t, clock::time_point> epoch_start_;
  std::map<uint32_t, clock::time_point> epoch_end_;  ///< its last report
  std::map<uint32_t, double> planned_seconds_;
  std::map<uint32_t, double> deadline_;
  /// Each epoch's slowest platform's training time (its report's wall_seconds).
  std::map<uint32_t, double> slowest_training_;
  std::map<uint32_t, storage::cluster_epoch> evaluated_;
  std::map<uint32_t, storage::cluster_epoch> evaluating_;
  clock::time_point run_start_;
  /// When the last epoch ended (its averaged model evaluated), or training
  /// started: the start of the next epoch's wall time.
  clock::time_point last_epoch_end_;
  double clock_offset_ = 0;  ///< seconds of the run before this balancer (resuming)
};

/// The averaged model's accuracy as the epoch line and the console show it:
/// the cluster's over every node's test data, then each node's ("n/a" when
/// no node tested it).
std::string accuracy_text(const storage::cluster_epoch& e);

} // namespace eg::actors
