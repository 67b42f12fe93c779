#pragma once
// The parameter server's worker (bsp, ssp, async, adacomm, adsp): it trains
// locally and commits U = params - base to the server when its commit clock
// says (algorithms/ps/commit_schedule.hpp), and with the epoch's last step; it
// steps on once the answer brings the global model (or gives up on it, and
// trains on with its own). A server on another node gets the update on the
// weights lane and sends its model back there; the typed answer and the
// lane's model are paired by the model's version. A worker that has not
// heard of a server yet waits for one before its first step (nodes still
// peering at the run's start), for `first_server_waits` overlap waits; then,
// and whenever the server is unreachable later, training goes on locally and
// a later step commits.

#include "algorithms/ps/commit_schedule.hpp"
#include "algorithms/ps/parameter_server.hpp"
#include "train/worker.hpp"

#include <chrono>

namespace eg::learning {

class ps_worker : public worker {
public:
  ps_worker(const worker_settings& settings, platform_model& model);

  std::string family() const override { return "parameter server"; }
  void start() override;
  void restored(double weight) override;
  void adopted() override { start(); }
  double weight() const override { return weight_; }
  void fill_report(messages::epoch_report& report) const override;
  std::vector<worker_note> epoch_over(uint32_t epoch) override;
  std::string epoch_summary(const messages::epoch_report& report) const override;
  bool ready() const override { return !commits_.in_flight(); }
  bool rolls_back() const override { return false; }
  /// The server, until one was heard of or the waits for it ran out.
  std::vector<std::string> awaited(uint64_t k) override;
  size_t give_up(uint64_t k) override;
  /// Overlap waits before training without ever having heard of a server.
  static constexpr int first_server_waits = 10;
  worker_outcome stepped(const step_done& step, const run_position& at) override;

  worker_outcome server_changed(bool present, bool moved, const std::string& lane,
                                double now) override;
  worker_outcome answered(uint64_t generation, const messages::held_global_model& global,
                          int64_t steps, double seconds, double now) override;
  worker_outcome answered_on_lane(uint64_t generation, uint64_t version, int64_t steps,
                                  double seconds, double now) override;
  worker_outcome lane_model(const std::string& from, messages::held_global_model model,
                            double now) override;
  worker_outcome lane_wait_over(uint64_t generation, double now) override;
  worker_outcome unanswered(uint64_t generation, bool lost, const std::string& why,
                            double now) override;

private:
  /// A commit of the epoch's end (`epoch_end`) or in its course.
  worker_outcome commit(bool epoch_end, const run_position& at, double now);
  /// The commit in flight is over (answered, or given up on): the clock
  /// learns when the next is due; its update and what waited on the lane go.
  void commit_over(double now, next_commit next);
  /// The answer is complete: the global model (null: it did not come;
  /// training goes on with the local model), then on.
  worker_outcome pulled(const messages::held_global_model* global, next_commit next, double now);
  /// After a commit: the epoch ends (its last commit) or training steps on.
  next_move after_commit() const {
    return commit_ends_epoch_ ? next_move::finish_epoch : next_move::step;
  }

  double weight_;
  commit_clock commits_;
  commit_base base_;
  bool server_present_ = false;
  bool server_heard_ = false;     ///< a server was present once
  int server_waits_ = 0;          ///< overlap waits for the first server that ran out
  std::string server_lane_;  ///< "": updates and models go in the typed messages
  std::string server_node_;  ///< of server_lane_
  uint64_t generation_ = 0;  ///< a server change makes answers on their way stale
  bool commit_ends_epoch_ = false;
  bool serverless_said_ = false;
  bool lane_commits_said_ = false;
  /// Of lane commits: pairs their two halves at the server. Counted from the
  /// clock, so that a restarted worker's numbers are new to the server.
  uint64_t commit_number_ =
    static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  /// The update in flight (what goes again with the next commit if the
  /// server says none of it arrived).
  std::shared_ptr<std::vector<torch::Tensor>> in_flight_update_;
  /// A lane commit's answer, waiting for its model on the lane; and the
  /// newest model from the lane, waiting for its answer.
  struct pending_answer {
    uint64_t version = 0;
    next_commit next;
  };
  std::optional<pending_answer> lane_answer_;
  std::optional<messages::held_global_model> lane_model_;
  uint64_t epoch_commits_ = 0;   ///< commits answered this epoch
  double epoch_staleness_ = 0;   ///< their staleness, summed
  std::optional<uint64_t> pulled_version_;  ///< of the global model pulled last
};

} // namespace eg::learning
