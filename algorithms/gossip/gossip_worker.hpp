#pragma once
// The gossip worker: GoSGD and the push-sum family (SGP, Sparse-Push, SCSP).
// After each step the strategy decides what goes to whom (the topology's
// targets at this iteration; push-sum gossips every `gossip_every` steps),
// and every peer message is merged by the strategy's arithmetic
// (algorithms/gossip/gossip.hpp). Push-sum may wait, before a step, for the messages
// of its in-neighbours (the tau-overlap wait, algorithms/gossip/topology.hpp).

#include "algorithms/gossip/gossip.hpp"
#include "algorithms/gossip/topology.hpp"
#include "train/worker.hpp"

namespace eg::learning {

class gossip_worker : public worker {
public:
  /// Over `model`; `strategy` and `topology` do the arithmetic and choose
  /// the peers (settings.strategy says which, make_worker builds them).
  gossip_worker(const worker_settings& settings, platform_model& model,
                std::unique_ptr<gossip_strategy> strategy, std::unique_ptr<topology> topology);

  std::string family() const override;
  void start() override;
  void restored(double weight) override;
  void adopted() override;
  double weight() const override { return strategy_->weight(); }
  void planned(const messages::plan& plan) override;
  void epoch_begins(size_t batches) override;
  std::vector<worker_note> epoch_over(uint32_t epoch) override;
  std::string epoch_summary(const messages::epoch_report& report) const override;
  std::vector<std::string> awaited(uint64_t k) override;
  size_t give_up(uint64_t k) override;
  worker_outcome stepped(const step_done& step, const run_position& at) override;
  void merge(const messages::held_weights& message) override;
  void unsent(const std::string& to, const messages::held_weights& message) override;
  void peers(const std::vector<std::string>& live) override;
  bool rescale(double factor) override;


private:
  /// Gossip rounds done by iteration k (counted from 1): round r ends with
  /// step r * gossip_every, which sends its messages.
  uint64_t round(uint64_t k) const { return k / gossip_every_; }
  /// EdgeGossip over push-sum (a plan with rounds): round j of epoch e is
  /// numbered e * 2^20 + j on every platform, whatever its share, for the
  /// topology's schedule and the overlap wait.
  uint64_t planned_round(uint64_t j) const { return (uint64_t{epoch_} << 20) + j; }

  std::unique_ptr<gossip_strategy> strategy_;
  std::unique_ptr<topology> topology_;
  overlap_gate gate_;               ///< push-sum's tau-overlap wait (tau 0: off)
  uint64_t gossip_every_ = 1;       ///< local steps per gossip round
  std::vector<std::string> live_;   ///< peer platforms reachable now
  double ratio_ = 1;                ///< r_i of this epoch (EdgeGossip's merge by rate)
  // EdgeGossip over push-sum: the plan's rounds (0: a round every
  // gossip_every steps), this epoch's batches, steps and rounds made.
  uint32_t epoch_ = 0;
  uint64_t rounds_ = 0, batches_ = 0, steps_ = 0, done_ = 0;
  uint64_t gave_up_ = 0;            ///< waits that ran out this epoch
  uint64_t out_of_step_said_ = 0;   ///< strategy's out_of_step() when last noted
  uint64_t returned_ = 0;           ///< messages not sent that came back this epoch
  double returned_weight_ = 0;      ///< the weight they brought back
};

/// The strategy of `settings.strategy` (GoSGD for EdgeGossip and GoSGD's
/// asynchronous schedule) over `model`'s parameters.
std::unique_ptr<gossip_strategy> make_gossip_strategy(const worker_settings& settings,
                                                      platform_model& model);

} // namespace eg::learning
