#include "algorithms/ps/adsp.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

namespace eg::learning {

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
}

double adsp_commit_interval(double check_period, int64_t c_target, double overhead,
                            double minimum) {
  if (!(check_period > 0) || !std::isfinite(check_period))
    throw argument_error("adsp: check period must be positive");
  if (!(minimum > 0) || !std::isfinite(minimum))
    throw argument_error("adsp: minimum commit interval must be positive");
  if (c_target < 1)
    throw argument_error("adsp: C_target must be at least 1");
  if (!(overhead >= 0) || !std::isfinite(overhead))
    throw argument_error("adsp: commit overhead must be a non-negative number");
  return std::max(minimum, check_period / static_cast<double>(c_target) - overhead);
}

double loss_curve::time_to(double target) const {
  if (!(target > c) || !(a2 > 0))
    return inf;
  return (1.0 / (target - c) - b) / a2;
}

double loss_curve::reward(double target) const {
  const double t = time_to(target);
  if (t == inf)
    return 0;
  if (t <= 0)
    return inf;
  return 1.0 / t;
}

namespace {

/// For a fixed c: the least-squares line 1 / (l - c) = a2 t + b (a2 >= 0)
/// and its squared error in loss units; nullopt when some l <= c or the
/// curve is not positive at a point.
std::optional<loss_curve> fit_for(const std::vector<std::pair<double, double>>& p, double c) {
  const double n = static_cast<double>(p.size());
  double st = 0, sy = 0, stt = 0, sty = 0;
  for (auto& [t, l] : p) {
    if (!(l > c))
      return std::nullopt;
    const double y = 1.0 / (l - c);
    st += t;
    sy += y;
    stt += t * t;
    sty += t * y;
  }
  loss_curve f;
  f.c = c;
  const double var = stt - st * st / n;
  f.a2 = var > 0 ? (sty - st * sy / n) / var : 0;
  if (!(f.a2 > 0))
    f.a2 = 0;
  f.b = (sy - f.a2 * st) / n;
  double e = 0;
  for (auto& [t, l] : p) {
    const double d = f.a2 * t + f.b;
    if (!(d > 0))
      return std::nullopt;
    const double r = l - (1.0 / d + c);
    e += r * r;
  }
  f.residual = e;
  return f;
}

} // namespace

std::optional<loss_curve> fit_loss_curve(const std::vector<std::pair<double, double>>& points) {
  std::set<double> times;
  double lo = inf, hi = -inf;
  for (auto& [t, l] : points) {
    if (!std::isfinite(t) || !std::isfinite(l))
      return std::nullopt;
    times.insert(t);
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  }
  if (times.size() < 3)
    return std::nullopt;
  // c = lo - delta: delta log-spaced over ten decades of the losses' spread
  // on either side, then golden-section refinement around the best.
  const double scale = std::max(hi - lo, 1e-12 * std::max(1.0, std::fabs(lo)));
  auto error_at = [&](double log_delta) {
    auto f = fit_for(points, lo - scale * std::exp(log_delta));
    return f ? f->residual : inf;
  };
  const double from = std::log(1e-6), to = std::log(1e4);
  const int steps = 200;
  double best = from, best_e = inf;
  for (int i = 0; i <= steps; ++i) {
    const double x = from + (to - from) * i / steps;
    const double e = error_at(x);
    if (e < best_e) {
      best_e = e;
      best = x;
    }
  }
  if (best_e == inf)
    return std::nullopt;
  const double step = (to - from) / steps;
  double a = best - step, b = best + step;
  const double g = (std::sqrt(5.0) - 1) / 2;
  double x1 = b - g * (b - a), x2 = a + g * (b - a);
  double e1 = error_at(x1), e2 = error_at(x2);
  for (int i = 0; i < 80; ++i) {
    if (e1 < e2) {
      b = x2;
      x2 = x1;
      e2 = e1;
      x1 = b - g * (b - a);
      e1 = error_at(x1);
    } else {
      a = x1;
      x1 = x2;
      e1 = e2;
      x2 = a + g * (b - a);
      e2 = error_at(x2);
    }
  }
  const double x = e1 < e2 ? x1 : x2;
  auto refined = fit_for(points, lo - scale * std::exp(x));
  auto coarse = fit_for(points, lo - scale * std::exp(best));
  if (refined && (!coarse || refined->residual <= coarse->residual))
    return refined;
  return coarse;
}

commit_rate_search::commit_rate_search(int64_t start) : base_(start) {
  if (start < 1)
    throw argument_error("adsp: C_target starts at 1 or more");
}

int64_t commit_rate_search::trial() const {
  if (!searching_ || !base_reward_)
    return base_;
  return base_ + 1;
}

void commit_rate_search::report(double reward) {
  if (!searching_)
    return;
  if (!base_reward_) {
    base_reward_ = reward;
    return;
  }
  if (reward > *base_reward_) {
    ++base_;
    base_reward_ = reward;
    return;
  }
  searching_ = false;
}

void commit_rate_search::again() {
  searching_ = true;
  base_reward_.reset();
}

search_trigger::search_trigger(double period, double rise) : period_(period), rise_(rise) {
  if (!(period > 0) || !(rise > 0))
    throw argument_error("adsp: search period and loss rise must be positive");
}

void search_trigger::settled(double now, double loss) {
  since_ = now;
  lowest_ = loss;
  armed_ = true;
}

bool search_trigger::due(double now, double loss) {
  if (!armed_)
    return false;
  if (std::isfinite(loss))
    lowest_ = std::min(lowest_, loss);
  if (now - since_ >= period_ || (std::isfinite(loss) && loss >= (1 + rise_) * lowest_)) {
    armed_ = false;
    return true;
  }
  return false;
}

staleness_bound::staleness_bound(uint64_t staleness) : staleness_(staleness) {}

void staleness_bound::join(const std::string& worker) {
  const uint64_t floor = slowest();
  auto it = clocks_.find(worker);
  if (it == clocks_.end())
    clocks_[worker] = floor;
  else
    it->second = std::max(it->second, floor);
}

void staleness_bound::leave(const std::string& worker) { clocks_.erase(worker); }

void staleness_bound::tick(const std::string& worker) {
  auto it = clocks_.find(worker);
  if (it == clocks_.end())
    throw argument_error("ssp: worker '" + worker + "' has not joined");
  ++it->second;
}

uint64_t staleness_bound::clock(const std::string& worker) const {
  auto it = clocks_.find(worker);
  if (it == clocks_.end())
    throw argument_error("ssp: worker '" + worker + "' has not joined");
  return it->second;
}

uint64_t staleness_bound::slowest() const {
  if (clocks_.empty())
    return 0;
  uint64_t m = clocks_.begin()->second;
  for (auto& [w, c] : clocks_)
    m = std::min(m, c);
  return m;
}

uint64_t staleness_bound::lead(const std::string& worker) const {
  return clock(worker) - slowest();
}

bool staleness_bound::may_proceed(const std::string& worker) const {
  return lead(worker) <= staleness_;
}

int64_t adacomm_period(double loss, double initial_loss, int64_t tau0, int64_t tau) {
  if (tau0 < 1 || tau < 1)
    throw argument_error("adacomm: periods must be at least 1");
  if (!(initial_loss > 0) || !std::isfinite(initial_loss))
    throw argument_error("adacomm: initial loss must be positive");
  int64_t next;
  const double ratio = loss / initial_loss;
  const double candidate =
    std::isfinite(ratio) && ratio >= 0 ? std::ceil(std::sqrt(ratio) * static_cast<double>(tau0)) : inf;
  if (candidate < static_cast<double>(tau))
    next = static_cast<int64_t>(candidate);
  else
    next = (tau + 1) / 2;
  return std::max<int64_t>(next, 1);
}

} // namespace eg::learning
