#include "algorithms/ps/commit_schedule.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace eg::learning {

config::registry<sync_model>& sync_models() {
  static config::registry<sync_model> r{"parameter-server strategy"};
  return r;
}

server_registration::server_registration(const std::string& name, config::strategy_traits traits,
                                         sync_model model) {
  traits.family = config::strategy_family::parameter_server;
  config::strategies().add(name, std::move(traits));
  sync_models().add(name, model);
}

namespace {

using config::strategy_family;
// Every model but BSP runs without the epoch barrier: its workers do not wait.
const server_registration bsp_strategy{
  "bsp", {strategy_family::parameter_server, false, false, "bulk-synchronous parameter server"},
  sync_model::bsp};
const server_registration ssp_strategy{
  "ssp", {strategy_family::parameter_server, true, false, "stale-synchronous parameter server"},
  sync_model::ssp};
const server_registration async_strategy{
  "async", {strategy_family::parameter_server, true, false, "asynchronous parameter server"},
  sync_model::async};
const server_registration adacomm_strategy{
  "adacomm",
  {strategy_family::parameter_server, true, false, "ADACOMM: commit period from the loss"},
  sync_model::adacomm};
const server_registration adsp_strategy{
  "adsp",
  {strategy_family::parameter_server, true, false,
   "ADSP (Hu et al. 2020): commit rate searched, nobody waits"},
  sync_model::adsp};

} // namespace

namespace {

/// ADSP searches C_target again after search_again, or the authors' 1000 s
/// against their 60 s period: 50 / 3 check periods of `gamma` (before Gamma
/// is known, of 1 s: replaced once it is).
double search_period(const commit_settings& s, double gamma = 1.0) {
  return s.search_again > 0 ? s.search_again : gamma * 1000.0 / 60.0;
}

/// The authors' 60 s : 10 s.
constexpr double period_to_interval = 6.0;

} // namespace

commit_schedule::commit_schedule(commit_settings s, const std::vector<std::string>& workers)
  : s_(s), bound_(s.staleness), tau_(s.commit_steps), trigger_(search_period(s), 0.3) {
  if (s_.check_period > 0)
    set_periods(s_.check_period,
                s_.min_interval > 0 ? s_.min_interval : s_.check_period / period_to_interval);
  else if (s_.min_interval > 0)
    set_periods(s_.min_interval * period_to_interval, s_.min_interval);
  for (auto& w : workers) {
    active_.insert(w);
    bound_.join(w);
    workers_[w];
  }
  if (s_.commit_steps < 1)
    throw argument_error("parameter server: commit_steps must be at least 1");
  if (!(s_.check_period >= 0) || !(s_.min_interval >= 0) || (gamma_ > 0 && min_ > gamma_))
    throw argument_error("parameter server: check period and minimum interval must be "
                                "positive (or 0: measured), the minimum no longer than the period");
}

adsp_periods measured_periods(double step_seconds, int64_t commit_steps) {
  adsp_periods p;
  p.check_period = 1.5 * static_cast<double>(commit_steps) * step_seconds;
  p.min_interval = p.check_period / period_to_interval;
  return p;
}

void commit_schedule::set_periods(double gamma, double min) {
  gamma_ = gamma;
  min_ = min;
  if (s_.search_again <= 0)
    trigger_ = search_trigger(search_period(s_, gamma_), 0.3);
}

void commit_schedule::measure(const std::string& w, double since, double now) {
  if (gamma_ > 0 || !(now > since) || step_samples_.count(w))
    return;
  step_samples_[w] = (now - since) / static_cast<double>(s_.commit_steps);
  // The median worker's step, once half the workers expected gave one.
  if (step_samples_.size() * 2 < workers_.size())
    return;
  std::vector<double> v;
  for (auto& [_, x] : step_samples_)
    v.push_back(x);
  std::sort(v.begin(), v.end());
  step_seconds_ = v[(v.size() - 1) / 2];
  auto p = measured_periods(step_seconds_, s_.commit_steps);
  set_periods(p.check_period, p.min_interval);
}

next_commit commit_schedule::next_for(const std::string& /*w*/, double overhead) const {
  switch (s_.model) {
    case sync_model::bsp:
    case sync_model::ssp:
    case sync_model::async:
      return {s_.commit_steps, 0};
    case sync_model::adacomm:
      return {tau_, 0};
    case sync_model::adsp:
      if (!first_check_done_)
        return {s_.commit_steps, 0};
      return {0, adsp_commit_interval(gamma_, search_.trial(), std::max(0.0, overhead), min_)};
  }
  return {s_.commit_steps, 0};
}

void commit_schedule::observe(double now, double loss) {
  if (!std::isfinite(loss) || loss <= 0)
    return;
  if (!started_) {
    started_ = true;
    period_start_ = trial_start_ = now;
  }
  switch (s_.model) {
    case sync_model::adacomm: {
      if (!initial_loss_)
        initial_loss_ = loss;
      period_loss_sum_ += loss;
      ++period_losses_;
      if (gamma_ > 0 && now - period_start_ >= gamma_) {
        const double mean = period_loss_sum_ / static_cast<double>(period_losses_);
        tau_ = adacomm_period(mean, *initial_loss_, s_.commit_steps, tau_);
        period_start_ = now;
        period_loss_sum_ = 0;
        period_losses_ = 0;
      }
      break;
    }
    case sync_model::adsp: {
      if (!first_check_done_) {
        // Before the first check every worker commits every commit_steps
        // steps; then the trials of C_target begin.
        if (gamma_ > 0 && now - trial_start_ >= gamma_) {
          first_check_done_ = true;
          trial_start_ = now;
          trial_points_.clear();
        }
        break;
      }
      if (!search_.searching()) {
        if (!settled_said_) {
          trigger_.settled(now, loss);
          settled_said_ = true;
        } else if (trigger_.due(now, loss)) {
          search_.again();
          settled_said_ = false;
          trial_start_ = now;
          trial_points_.clear();
        }
        break;
      }
      trial_points_.emplace_back(now - trial_start_, loss);
      if (now - trial_start_ >= gamma_) {
        auto curve = fit_loss_curve(trial_points_);
        search_.report(curve ? curve->reward(s_.target_loss) : 0.0);
        trial_start_ = now;
        trial_points_.clear();
      }
      break;
    }
    default:
      break;
  }
}

std::vector<release> commit_schedule::commit(const std::string& w, double now, double loss,
                                             double overhead, bool resting) {
  const bool rejoins = !active_.count(w);
  auto& v = workers_[w];
  // A full interval of commit_steps steps: after an answer to a commit
  // that did not end an epoch, ending with one that does not either.
  if (v.commits > 0 && !v.resting && !resting && v.next.steps == s_.commit_steps)
    measure(w, v.last_at, now);
  if (v.commits == 0)
    v.first_at = now;
  ++v.commits;
  v.last_at = now;
  v.resting = resting;
  overhead_[w] = overhead;
  observe(now, loss);
  std::vector<release> out;
  auto answer = [&](const std::string& who) {
    auto& x = workers_[who];
    x.held = false;
    x.next = next_for(who, overhead_[who]);
    out.push_back({who, x.next});
  };
  if (rejoins)
    bound_.join(w);
  if (resting) {
    active_.erase(w);
    bound_.leave(w);
    answer(w);
  } else {
    active_.insert(w);
    switch (s_.model) {
      case sync_model::bsp:
        held_.insert(w);
        v.held = true;
        break;
      case sync_model::ssp:
        bound_.tick(w);
        if (bound_.may_proceed(w)) {
          answer(w);
        } else {
          held_.insert(w);
          v.held = true;
        }
        break;
      default:
        answer(w);
    }
  }
  release_held(out);
  for (auto& [name, x] : workers_)
    x.lead = active_.count(name) ? bound_.lead(name) : 0;
  return out;
}

std::vector<release> commit_schedule::leave(const std::string& w) {
  std::vector<release> out;
  active_.erase(w);
  held_.erase(w);
  bound_.leave(w);
  if (auto i = workers_.find(w); i != workers_.end()) {
    i->second.held = false;
    i->second.resting = true;
  }
  release_held(out);
  return out;
}

void commit_schedule::release_held(std::vector<release>& out) {
  if (held_.empty())
    return;
  std::vector<std::string> go;
  if (s_.model == sync_model::bsp) {
    // The round is complete once every active worker committed in it.
    if (std::includes(held_.begin(), held_.end(), active_.begin(), active_.end()))
      go.assign(held_.begin(), held_.end());
  } else if (s_.model == sync_model::ssp) {
    for (auto& h : held_)
      if (bound_.may_proceed(h))
        go.push_back(h);
  }
  for (auto& who : go) {
    held_.erase(who);
    auto& x = workers_[who];
    x.held = false;
    x.next = next_for(who, overhead_[who]);
    out.push_back({who, x.next});
  }
}

commit_clock::commit_clock(int64_t first_steps) : next_{first_steps, 0} {
  if (first_steps < 1)
    throw argument_error("commit clock: first_steps must be at least 1");
}

void commit_clock::stepped(double loss) {
  ++steps_;
  if (std::isfinite(loss))
    loss_sum_ += loss;
}

bool commit_clock::due(double now) const {
  if (in_flight_)
    return false;
  if (next_.steps > 0)
    return static_cast<int64_t>(steps_) >= next_.steps;
  if (next_.seconds > 0)
    return steps_ > 0 && now - since_ >= next_.seconds;
  return steps_ > 0;
}

double commit_clock::loss() const {
  return steps_ > 0 ? loss_sum_ / static_cast<double>(steps_) : 0.0;
}

void commit_clock::committed(double now) {
  in_flight_ = true;
  sent_at_ = now;
  steps_ = 0;
  loss_sum_ = 0;
}

void commit_clock::answered(double now, next_commit next) {
  in_flight_ = false;
  overhead_ = std::max(0.0, now - sent_at_);
  since_ = now;
  if (next.steps > 0 || next.seconds > 0)
    next_ = next;
}

} // namespace eg::learning
