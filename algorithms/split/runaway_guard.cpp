#include "algorithms/split/runaway_guard.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace eg::learning {

namespace {

const double nan = std::numeric_limits<double>::quiet_NaN();

std::string fixed(double x, int digits = 4) {
  std::ostringstream s;
  s.precision(digits);
  s << x;
  return s.str();
}

} // namespace

namespace {
const std::string stuck_words = "the model is stuck";
}

bool is_stuck(const std::string& why) { return why.find(stuck_words) != std::string::npos; }

void check(const runaway_options& o) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok)
      throw argument_error("runaway guard: " + what);
  };
  need(o.warmup >= 0, "warmup must not be negative");
  need(o.rate > 0 && o.rate <= 1, "rate must be in (0, 1]");
  need(o.loss_rise > 1, "loss_rise must be above 1");
  need(o.loss_margin >= 0, "loss_margin must not be negative");
  need(o.loss_chance > 1, "loss_chance must be above 1");
  need(o.norm_spike > 1, "norm_spike must be above 1");
  need(o.norm_floor >= 0, "norm_floor must not be negative");
  need(o.min_step >= 0, "min_step must not be negative");
  need(o.slow > 0 && o.slow < 1, "slow must be in (0, 1)");
  need(o.max_rollbacks >= 0, "max_rollbacks must not be negative");
  need(o.stuck_after >= 0, "stuck_after must not be negative");
  need(o.stuck_level > 0 && o.stuck_level <= 1, "stuck_level must be in (0, 1]");
}

runaway_guard::runaway_guard(runaway_options opt, int64_t classes)
    : opt_(opt),
      chance_(classes > 1 ? std::log(static_cast<double>(classes)) : nan),
      loss_avg_(nan), lowest_(nan), norm_avg_(nan) {
  check(opt_);
}

std::optional<std::string> runaway_guard::loss(double value) {
  if (!opt_.enabled)
    return std::nullopt;
  if (!std::isfinite(value))
    return "the training loss is " + fixed(value);
  loss_avg_ = losses_++ == 0 ? value : (1 - opt_.rate) * loss_avg_ + opt_.rate * value;
  if (losses_ <= opt_.warmup)
    return std::nullopt;
  if (std::isnan(lowest_) || loss_avg_ < lowest_)
    lowest_ = loss_avg_;
  if (loss_avg_ > opt_.loss_rise * lowest_ && loss_avg_ > lowest_ + opt_.loss_margin)
    return "the training loss's average rose to " + fixed(loss_avg_) + " from its lowest, " +
           fixed(lowest_);
  if (!std::isnan(chance_) && loss_avg_ > opt_.loss_chance * chance_)
    return "the training loss's average, " + fixed(loss_avg_) + ", is above " +
           fixed(opt_.loss_chance, 3) + " x that of a uniform guess (" + fixed(chance_) + ")";
  if (!std::isnan(chance_) && opt_.stuck_after > 0 &&
      losses_ >= std::max(opt_.stuck_after, opt_.warmup + 1) &&
      loss_avg_ > opt_.stuck_level * chance_)
    return "the training loss's average, " + fixed(loss_avg_) + ", is at a uniform guess's (" +
           fixed(chance_) + ") after " + std::to_string(losses_) + " steps: " + stuck_words +
           " (dead units, or a rate too high to start at)";
  return std::nullopt;
}

std::optional<std::string> runaway_guard::gradient_norm(double value,
                                                       const std::function<double()>& step_fraction) {
  if (!opt_.enabled)
    return std::nullopt;
  if (!std::isfinite(value))
    return "a gradient's norm is " + fixed(value);
  if (norms_ == 0) {
    // Its level starts with the first norm that is not (about) zero: a
    // stage below a synthetic-gradient module that still predicts zero has
    // no level yet, and no norm is a runaway against it.
    if (value > opt_.norm_floor) {
      norm_avg_ = value;
      norms_ = 1;
    }
    return std::nullopt;
  }
  const double level = std::max(norm_avg_, opt_.norm_floor);
  if (value > opt_.norm_spike * level) {
    const double step = step_fraction ? step_fraction() : std::numeric_limits<double>::infinity();
    if (norms_ >= opt_.warmup && !(step < opt_.min_step))
      return "a gradient's norm, " + fixed(value) + ", is " + fixed(value / level, 3) +
             " x its average (" + fixed(norm_avg_) + ")" +
             (step_fraction ? ", a step of " + fixed(step, 3) + " x the parameters' norm"
                            : std::string{});
    // Within the warm-up, or a step too small to harm: the stage is still
    // waking up (its synthetic gradient growing from zero); the level and
    // the warm-up start here.
    norm_avg_ = value;
    norms_ = 1;
    return std::nullopt;
  }
  norm_avg_ = (1 - opt_.rate) * norm_avg_ + opt_.rate * value;
  ++norms_;
  return std::nullopt;
}

void runaway_guard::restart() {
  losses_ = norms_ = 0;
  loss_avg_ = lowest_ = norm_avg_ = nan;
}

} // namespace eg::learning
