#pragma once
// Detects a split model that is running away (docs/SPLIT.md, "Runaways"):
// its loss or a stage's gradient turning non-finite, a stage's gradient norm
// jumping far above its recent level, the loss climbing well above its
// lowest level so far or above what guessing uniformly would give, or a
// loss that never went below a uniform guess's. No torch
// and no actors here: a stage feeds it the figures of each optimizer step,
// and the first stage decides what to do (every stage goes back to its last
// checkpoint with a smaller learning rate, and the epoch starts again).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace eg::learning {

struct runaway_options {
  bool enabled = true;
  /// Steps observed before the level checks apply (non-finite values are
  /// caught from the first step). Counted again after each rollback.
  int64_t warmup = 30;
  /// Weight of the newest value in the exponential averages.
  double rate = 0.05;
  /// The loss has run away when its average exceeds both rise x its lowest
  /// average so far and that lowest + margin (a model that had learnt and
  /// went back to guessing)...
  double loss_rise = 2.0;
  double loss_margin = 0.5;
  /// ...or chance x ln(classes), the loss of a uniform guess (a model that
  /// answers confidently and wrongly).
  double loss_chance = 1.5;
  /// A model whose loss's average is above stuck_level x ln(classes) after
  /// stuck_after losses or more (since the start or the last rollback) is
  /// stuck at a uniform guess (its ReLUs died, or its rate is too high to
  /// start at), whether or not it learnt a little first. 0: never.
  int64_t stuck_after = 2000;
  double stuck_level = 0.95;
  /// A gradient norm above spike x its average has run away, once the
  /// average means something: the norm's warm-up (`warmup` steps) starts
  /// with its first value above norm_floor (a synthetic-gradient module
  /// predicts zero until it has learnt, so the stage below it sees a zero
  /// gradient at first), and starts again when a norm jumps past spike x
  /// the average within it (a stage still waking up).
  double norm_spike = 100;
  /// Gradient norms at or below this are taken as zero: the stage has not
  /// woken up yet.
  double norm_floor = 1e-8;
  /// ...and only where the step it takes is not negligible: the learning
  /// rate x the norm at least this fraction of the parameters' norm. A
  /// stage below a synthetic-gradient module that wakes up slowly sees
  /// norms of 1e-7 for many steps and then 2e-3 (bench split, conv8, 3
  /// stages: "2.09e+04 x its average"), steps of 1e-6 of its parameters;
  /// a gradient that explodes takes steps of a sizeable part of them.
  double min_step = 1e-3;
  /// Each rollback multiplies every stage's learning rate by this.
  double slow = 0.5;
  /// Rollbacks in a run before it stops with an error.
  int64_t max_rollbacks = 4;
};

/// Whether a runaway's reason (what runaway_guard returned) says the model
/// is stuck at a uniform guess rather than running away from what it had
/// learnt: its checkpoints may hold the same dead model, and a model at a
/// uniform guess is worth no more than where it began, so it goes back
/// there.
bool is_stuck(const std::string& why);

/// Throws std::invalid_argument (argument_error) for options out of range.
void check(const runaway_options& o);

class runaway_guard {
public:
  /// `classes`: the data's classes (the chance-level loss); 0 or 1: no
  /// chance check.
  runaway_guard(runaway_options opt, int64_t classes);

  /// A step's mean training loss (the last stage). Returns why the model
  /// ran away, or nothing.
  std::optional<std::string> loss(double value);
  /// The norm of a step's gradient over the stage's parameters;
  /// `step_fraction`, asked only when the norm spikes, says what part of
  /// the parameters' norm the step takes (learning rate x norm / their
  /// norm; none: the spike counts as it is).
  std::optional<std::string> gradient_norm(double value,
                                           const std::function<double()>& step_fraction = {});

  /// After a rollback: the averages, the lowest loss and the warmup start
  /// again (the checkpoint rolled back to may be well above the lowest
  /// loss seen, and must not count as a runaway).
  void restart();

  const runaway_options& options() const { return opt_; }
  /// The loss's average and lowest average (NaN before the first value).
  double loss_average() const { return loss_avg_; }
  double lowest_loss_average() const { return lowest_; }

private:
  runaway_options opt_;
  double chance_;
  int64_t losses_ = 0, norms_ = 0;
  double loss_avg_;
  double lowest_;
  double norm_avg_;
};

} // namespace eg::learning
