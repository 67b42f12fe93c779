#include "algorithms/edgegossip/epoch_barrier.hpp"

#include "config/config.hpp"
#include "algorithms/edgegossip/balancing.hpp"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace eg::actors {
namespace {

double seconds(epoch_barrier::clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

} // namespace

barrier_settings barrier_settings::of(const config::cluster_config& cluster) {
  barrier_settings s;
  for (auto& p : cluster.platforms())
    s.expected.push_back(p.name);
  // (Nodes that joined a run are not waited for to start the next.)
  s.quorum = cluster.quorum > 0 ? static_cast<size_t>(cluster.quorum)
                                : cluster.file_platforms().size();
  s.last_epoch = cluster.train.epochs - 1;
  s.edgegossip = cluster.strategy.edgegossip();
  s.asynchronous = cluster.strategy.asynchronous();
  s.p_threshold = cluster.edgegossip.p_threshold;
  s.f_threshold = cluster.edgegossip.f_threshold;
  s.deadline = cluster.edgegossip.deadline;
  s.count_network = cluster.edgegossip.count_network;
  s.first_epoch_share = cluster.edgegossip.first_epoch_share;
  s.push_sum = cluster.strategy.push_sum();
  s.batch = cluster.train.batch;
  s.max_iterations = cluster.train.max_iterations;
  s.gossip_every = cluster.strategy.gossip_every;
  s.average_every = cluster.train.average_every;
  return s;
}

epoch_barrier::epoch_barrier(barrier_settings settings)
    : settings_(settings), file_platforms_(settings_.expected) {}

// -- platforms ------------------------------------------------------------------------

const epoch_barrier::platform* epoch_barrier::find(const std::string& name) const {
  auto i = platforms_.find(name);
  return i == platforms_.end() ? nullptr : &i->second;
}

uint32_t epoch_barrier::up() const {
  uint32_t n = 0;
  for (auto& [_, p] : platforms_)
    n += p.up ? 1 : 0;
  return n;
}

std::vector<std::string> epoch_barrier::live() const {
  std::vector<std::string> out;
  for (auto& [name, p] : platforms_)
    if (p.up)
      out.push_back(name);
  return out;
}

bool epoch_barrier::expects(const std::string& name) const {
  return std::find(settings_.expected.begin(), settings_.expected.end(), name)
         != settings_.expected.end();
}

bool epoch_barrier::expect(const std::string& name) {
  refused_.erase(name);
  if (expects(name))
    return false;
  settings_.expected.push_back(name);
  return true;
}

bool epoch_barrier::has_quorum() const {
  if (platforms_.empty())
    return false;
  size_t refused_file_platforms = 0;
  for (auto& name : file_platforms_)
    refused_file_platforms += refused_.count(name);
  const size_t left = file_platforms_.size() - refused_file_platforms;
  return platforms_.size() >= std::min(settings_.quorum, left);
}

bool epoch_barrier::refuse(const std::string& name, const std::string& why) {
  auto& expected = settings_.expected;
  expected.erase(std::remove(expected.begin(), expected.end(), name), expected.end());
  auto [at, fresh] = refused_.try_emplace(name, why);
  if (!fresh && at->second == why)
    return false;
  at->second = why;
  return true;
}

epoch_barrier::joined epoch_barrier::join(const std::string& name, const std::string& node,
                                          bool running, uint64_t samples) {
  joined out;
  out.again = platforms_.count(name) > 0;
  auto size = settings_.shard_sizes.find(name);
  auto& entry = platforms_[name];
  entry = platform{node, true, {},
                   samples > 0 ? samples
                   : size == settings_.shard_sizes.end() ? 0 : size->second,
                   {}, 0};
  entry.progress.platform = name;
  if (!running)
    return out;
  if (settings_.asynchronous) {
    uint32_t now = 0;
    for (auto& [_, p] : platforms_)
      now = std::max(now, p.progress.epoch);
    entry.first_epoch = now;
    messages::plan p;
    p.epoch = now;
    p.ratio = 1.0;
    p.last_epoch = settings_.last_epoch;
    out.plan = p;
  } else {
    entry.first_epoch = planned_epoch() + 1;
  }
  out.first_epoch = entry.first_epoch;
  return out;
}

bool epoch_barrier::down(const std::string& name) {
  auto i = platforms_.find(name);
  if (i == platforms_.end() || !i->second.up)
    return false;
  i->second.up = false;
  return true;
}

// -- reports --------------------------------------------------------------------------

void epoch_barrier::progress(const messages::epoch_report& r) {
  auto i = platforms_.find(r.platform);
  if (i != platforms_.end())
    i->second.progress = r;
}

bool epoch_barrier::record(messages::epoch_report& r, clock::time_point now) {
  auto i = platforms_.find(r.platform);
  if (i != platforms_.end()) {
    i->second.progress = r;
    auto p = i->second.predicted_seconds.find(r.epoch);
    if (p != i->second.predicted_seconds.end())
      r.predicted_seconds = p->second;
  }
  auto& reported = reports_[r.epoch];
  if (reported.count(r.platform))
    return false;
  reported[r.platform] = r;
  epoch_end_[r.epoch] = now;
  all_reports_.push_back(r);
  return true;
}

bool epoch_barrier::complete(uint32_t epoch) const {
  auto i = reports_.find(epoch);
  if (i == reports_.end())
    return false;
  for (auto& [name, p] : platforms_) {
    if (!p.up || p.first_epoch > epoch || i->second.count(name))
      continue;
    bool later = false;
    for (auto j = std::next(i); j != reports_.end() && !later; ++j)
      later = j->second.count(name) > 0;
    if (!later)
      return false;
  }
  return true;
}

std::vector<uint32_t> epoch_barrier::complete_epochs() const {
  std::vector<uint32_t> out;
  for (auto& [epoch, _] : reports_)
    if (complete(epoch))
      out.push_back(epoch);
  return out;
}

const std::map<std::string, messages::epoch_report>&
epoch_barrier::reports(uint32_t epoch) const {
  static const std::map<std::string, messages::epoch_report> none;
  auto i = reports_.find(epoch);
  return i == reports_.end() ? none : i->second;
}

double epoch_barrier::averaging_weight(uint32_t epoch, const std::string& name) const {
  auto i = reports_.find(epoch);
  if (i == reports_.end() || i->second.empty())
    return 1;
  auto r = i->second.find(name);
  if (r != i->second.end() && r->second.samples > 0)
    return static_cast<double>(r->second.samples);
  double sum = 0;
  for (auto& [_, report] : i->second)
    sum += static_cast<double>(report.samples);
  return sum > 0 ? sum / static_cast<double>(i->second.size()) : 1;
}

std::vector<double> epoch_barrier::class_weights(uint32_t epoch, const std::string& name) const {
  auto i = reports_.find(epoch);
  if (i == reports_.end())
    return {};
  auto r = i->second.find(name);
  if (r == i->second.end())
    return {};
  return {r->second.class_samples.begin(), r->second.class_samples.end()};
}

// -- plans ----------------------------------------------------------------------------

uint32_t epoch_barrier::gossip_rounds(const std::vector<std::string>& survivors,
                                     const std::map<std::string, double>& ratios) const {
  if (!settings_.edgegossip || !settings_.push_sum || survivors.empty())
    return 0;
  // As many rounds as the platform with the most batches makes at one a
  // gossip_every steps (push-sum's pace without balancing): a platform on a
  // small share gossips as often per epoch as the others, several rounds
  // in a step where it has fewer batches than rounds (one split to all
  // their targets). Fewer rounds (those of the platform with the fewest
  // batches) mixed too little: 0.8645 after 12 epochs against 0.8909 for
  // Sparse-Push alone (bench tta, static, seed 1).
  const int64_t batch = std::max<int64_t>(settings_.batch, 1);
  int64_t most = 0;
  for (const auto& name : survivors) {
    auto it = platforms_.find(name);
    if (it == platforms_.end())
      continue;
    auto r = ratios.find(name);
    const double ratio = r == ratios.end() ? 1.0 : r->second;
    const auto samples =
      static_cast<int64_t>(std::ceil(static_cast<double>(it->second.shard_size) * ratio));
    int64_t batches = (samples + batch - 1) / batch;
    if (settings_.max_iterations > 0)
      batches = std::min(batches, settings_.max_iterations);
    most = std::max(most, batches);
  }
  const int64_t rounds = most / std::max<int64_t>(settings_.gossip_every, 1);
  return static_cast<uint32_t>(std::clamp<int64_t>(rounds, 1, 1 << 20));
}

learning::platform_estimate epoch_barrier::communication(const std::string& name,
                                                         const messages::prediction& p,
                                                         uint32_t epoch) const {
  learning::platform_estimate out;
  // Its newest report of an epoch before this one.
  const messages::epoch_report* last = nullptr;
  for (auto e = reports_.rbegin(); e != reports_.rend() && !last; ++e) {
    if (e->first >= epoch)
      continue;
    auto r = e->second.find(name);
    if (r != e->second.end())
      last = &r->second;
  }
  if (!last)
    return out;
  // Its own sending alone: the time its frames take to come in is its
  // senders' links (counted in their plans). On the wan profile counting
  // the receive side too, under push-sum, made every epoch the slowest
  // uplink's long and cost EdgeGossip over Sparse-Push 2.2 points
  // (bench/HISTORY.md).
  const double per_byte = p.send_seconds_per_byte;
  if (std::isfinite(per_byte) && per_byte > 0)
    out.communication_seconds = static_cast<double>(last->bytes_sent) * per_byte;
  return out;
}

epoch_plan epoch_barrier::plan(uint32_t epoch,
                               const std::map<std::string, messages::prediction>& predictions,
                               clock::time_point now) {
  epoch_plan out;
  out.epoch = epoch;
  std::map<std::string, double> ratios;  // none: every r_i = 1
  if (settings_.edgegossip) {
    std::vector<learning::platform_estimate> estimates;
    bool all_known = true;
    std::vector<std::string> unmeasured;  // up, with data, not seen training by its predictor
    for (auto& [name, entry] : platforms_) {
      learning::platform_estimate e;
      e.name = name;
      e.samples = static_cast<int64_t>(entry.shard_size);
      e.down = !entry.up;
      auto i = predictions.find(name);
      if (i != predictions.end()) {
        e.throughput = i->second.throughput;
        if (settings_.count_network) {
          auto c = communication(name, i->second, epoch);
          e.communication_seconds = c.communication_seconds;
          e.communication_per_point = c.communication_per_point;
        }
      }
      if (entry.up && (i == predictions.end() || i->second.observations == 0 || e.samples == 0))
        all_known = false;
      if (entry.up && e.samples > 0 && i != predictions.end() && i->second.observations == 0)
        unmeasured.push_back(name);
      estimates.push_back(e);
    }
    // A platform without observations (the first epoch) trains
    // first_epoch_share of its shard, which is enough to measure it; the
    // others train everything until every platform is known.
    if (settings_.first_epoch_share < 1)
      for (auto& name : unmeasured) {
        ratios[name] = settings_.first_epoch_share;
        out.line += fmt::format(" {} r={:.2f} (first epoch)", name, settings_.first_epoch_share);
      }
    if (all_known) {
      auto balanced = learning::balance(estimates, settings_.p_threshold, settings_.f_threshold);
      for (auto& d : balanced.platforms) {
        if (d.failed) {
          if (platforms_[d.name].up) {
            out.failed.push_back(d.name);
            out.warnings.push_back(
              fmt::format("platform {} predicted below p_threshold: failed", d.name));
          }
          out.adopt.push_back(d.name);
          continue;
        }
        ratios[d.name] = d.ratio;
        platforms_[d.name].predicted_seconds[epoch] = d.planned_seconds;
        planned_seconds_[epoch] = std::max(planned_seconds_[epoch], d.planned_seconds);
        out.line += fmt::format(" {} r={:.2f}", d.name, d.ratio);
        if (d.communication_seconds > 0.005)
          out.line += fmt::format(" (link {:.1f} s)", d.communication_seconds);
        else if (d.unplanned_communication > 0)
          out.line += fmt::format(" (link {:.1f} s: too slow to wait for)",
                                  d.unplanned_communication);
      }
      out.exception_handling = balanced.exception_handling;
      if (!out.exception_handling)
        out.adopt.clear();
      else
        out.warnings.push_back(fmt::format("{} of {} platforms failed: survivors take over "
                                           "their shards",
                                           balanced.failed, balanced.platforms.size()));
      out.balanced = true;
      out.failed_count = balanced.failed;
      out.platforms = balanced.platforms.size();
      out.planned_seconds = planned_seconds(epoch);
    }
  }
  epoch_start_[epoch] = now;
  // A platform that is still up but predicted below p_threshold has no ratio
  // here and trains its whole shard, so the epoch barrier, which waits for
  // every live platform, is never held up by it.
  auto survivors = live();
  const uint32_t rounds = gossip_rounds(survivors, ratios);
  for (size_t i = 0; i < survivors.size(); ++i) {
    messages::plan p;
    p.epoch = epoch;
    p.rounds = rounds;
    auto r = ratios.find(survivors[i]);
    p.ratio = r == ratios.end() ? 1.0 : r->second;
    p.last_epoch = settings_.last_epoch;
    p.adopt = out.adopt;
    p.adopt_part = static_cast<uint32_t>(i);
    p.adopt_parts = static_cast<uint32_t>(survivors.size());
    out.plans[survivors[i]] = std::move(p);
  }
  return out;
}

uint32_t epoch_barrier::planned_epoch() const {
  return epoch_start_.empty() ? 0 : epoch_start_.rbegin()->first;
}

double epoch_barrier::planned_seconds(uint32_t epoch) const {
  auto i = planned_seconds_.find(epoch);
  return i == planned_seconds_.end() ? 0.0 : i->second;
}

void epoch_barrier::resumed(clock::time_point paused_at, clock::time_point now) {
  for (auto& [epoch, start] : epoch_start_)
    if (!complete(epoch))
      start += now - std::max(paused_at, start);
}

// -- the epoch deadline ---------------------------------------------------------------

std::optional<double> epoch_barrier::arm_deadline(const messages::epoch_report& r,
                                                  clock::time_point now) {
  const double factor = settings_.deadline;
  if (!settings_.edgegossip || settings_.asynchronous || factor <= 0 || r.samples == 0
      || deadline_.count(r.epoch) || !epoch_start_.count(r.epoch))
    return std::nullopt;
  const double first = seconds(now - epoch_start_[r.epoch]);
  const double limit = learning::epoch_deadline(factor, first, planned_seconds(r.epoch));
  deadline_[r.epoch] = limit;
  return limit - first;
}

std::optional<double> epoch_barrier::deadline(uint32_t epoch) const {
  auto i = deadline_.find(epoch);
  if (i == deadline_.end())
    return std::nullopt;
  return i->second;
}

deadline_action epoch_barrier::deadline_passed(uint32_t epoch, clock::time_point now,
                                               bool paused) const {
  deadline_action out;
  if (evaluated_.count(epoch) || evaluating_.count(epoch) || complete(epoch))
    return out;
  auto limit = deadline_.find(epoch);
  auto start = epoch_start_.find(epoch);
  if (limit == deadline_.end() || start == epoch_start_.end())
    return out;
  out.limit = limit->second;
  // Paused by the console, or the epoch's start moved by a pause: later.
  const double elapsed = seconds(now - start->second);
  if (paused || elapsed < limit->second) {
    out.wait = paused ? 1.0 : limit->second - elapsed;
    return out;
  }
  const auto& reported = reports(epoch);
  for (auto& [name, p] : platforms_)
    if (p.up && p.first_epoch <= epoch && !reported.count(name))
      out.cut.push_back(name);
  return out;
}

// -- the run and its evaluated epochs ---------------------------------------------------

void epoch_barrier::start(clock::time_point now) {
  run_start_ = last_epoch_end_ = now;
}

uint32_t epoch_barrier::resume(const storage::run_state& saved, const std::string& cluster_id,
                               std::vector<std::string>& unusable) {
  uint32_t next = 0;
  for (auto& e : saved.epochs) {
    evaluated_[e.epoch] = e;
    next = std::max(next, e.epoch + 1);
    clock_offset_ = std::max(clock_offset_, e.elapsed_seconds);
  }
  for (auto& record : saved.reports) {
    std::string problem;
    if (auto report = storage::decode_report(record, cluster_id, problem))
      all_reports_.push_back(std::move(*report));
    else
      unusable.push_back(problem);
  }
  return next;
}

double epoch_barrier::elapsed(clock::time_point now) const {
  return clock_offset_ + seconds(now - run_start_);
}

bool epoch_barrier::begin_evaluation(uint32_t epoch, clock::time_point now) {
  if (evaluated_.count(epoch) || evaluating_.count(epoch))
    return false;
  evaluating_[epoch] = measure(epoch, now);
  return true;
}

void epoch_barrier::cancel_evaluation(uint32_t epoch) { evaluating_.erase(epoch); }

const storage::cluster_epoch* epoch_barrier::evaluating(uint32_t epoch) const {
  auto i = evaluating_.find(epoch);
  return i == evaluating_.end() ? nullptr : &i->second;
}

storage::cluster_epoch epoch_barrier::measure(uint32_t epoch, clock::time_point now) {
  storage::cluster_epoch ce;
  ce.epoch = epoch;
  ce.elapsed_seconds = elapsed(now);
  auto start = epoch_start_.find(epoch);
  const auto from = start != epoch_start_.end() ? start->second : run_start_;
  auto before = epoch > 0 ? evaluated_.find(epoch - 1) : evaluated_.end();
  if (settings_.asynchronous && before != evaluated_.end())
    ce.epoch_seconds = ce.elapsed_seconds - before->second.elapsed_seconds;
  else
    ce.epoch_seconds = seconds(now - from);
  double error_sum = 0;
  int predicted = 0;
  double longest = 0;  // the slowest platform's epoch time
  for (auto& [_, r] : reports(epoch)) {
    ce.samples += r.samples;
    longest = std::max(longest, r.wall_seconds);
    if (r.predicted_seconds > 0 && r.wall_seconds > 0) {
      error_sum += std::abs(r.predicted_seconds - r.wall_seconds) / r.wall_seconds;
      ++predicted;
    }
  }
  if (predicted > 0)
    ce.prediction_error = error_sum / predicted;
  // An epoch planned by a lost balancer: its start is not known here.
  ce.epoch_seconds = std::max(ce.epoch_seconds, longest);
  slowest_training_[epoch] = longest;
  ce.platforms_up = up();
  auto last = epoch_end_.find(epoch);
  const auto end = last != epoch_end_.end() ? last->second : now;
  if (settings_.asynchronous) {
    ce.training_seconds = clock_offset_ + seconds(end - run_start_);
  } else {
    const double trained = before != evaluated_.end() ? before->second.training_seconds : 0.0;
    ce.training_seconds = trained + std::max(longest, seconds(end - from));
  }
  return ce;
}

const storage::cluster_epoch& epoch_barrier::evaluation_done(uint32_t epoch, double loss,
                                                             double accuracy, double seconds) {
  auto i = evaluating_.find(epoch);
  auto& e = evaluated_[epoch];
  e = i == evaluating_.end() ? storage::cluster_epoch{} : i->second;
  e.epoch = epoch;
  e.averaged_loss = loss;
  e.averaged_accuracy = accuracy;
  e.evaluation_seconds = seconds;
  if (i != evaluating_.end())
    evaluating_.erase(i);
  return e;
}

const storage::cluster_epoch& epoch_barrier::evaluation_done(
  uint32_t epoch, std::vector<storage::node_test> tests, double seconds) {
  double loss = 0;
  uint64_t correct = 0, samples = 0;
  for (auto& t : tests) {
    loss += t.loss * static_cast<double>(t.samples);
    correct += t.correct;
    samples += t.samples;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  evaluation_done(epoch, samples ? loss / static_cast<double>(samples) : nan,
                  samples ? static_cast<double>(correct) / samples : nan, seconds);
  auto& e = evaluated_[epoch];
  e.tests = std::move(tests);
  return e;
}

std::vector<storage::cluster_epoch> epoch_barrier::evaluated_epochs() const {
  std::vector<storage::cluster_epoch> out;
  for (auto& [_, e] : evaluated_)
    out.push_back(e);
  return out;
}

const storage::cluster_epoch& epoch_barrier::close(uint32_t epoch, clock::time_point now) {
  auto& e = evaluated_[epoch];
  e.wall_seconds = seconds(now - last_epoch_end_);
  last_epoch_end_ = now;
  e.network_seconds = std::max(0.0, e.wall_seconds - e.evaluation_seconds
                                      - slowest_training(epoch));
  return e;
}

double epoch_barrier::slowest_training(uint32_t epoch) const {
  auto i = slowest_training_.find(epoch);
  return i == slowest_training_.end() ? 0.0 : i->second;
}

bool epoch_barrier::all_evaluated() const {
  for (uint32_t i = 0; i <= settings_.last_epoch; ++i)
    if (!evaluated_.count(i))
      return false;
  return true;
}

bool epoch_barrier::averages(uint32_t epoch) const {
  const int64_t every = settings_.average_every;
  return epoch >= settings_.last_epoch || (every > 0 && (epoch + 1) % every == 0);
}

// -- what users read -----------------------------------------------------------------

std::string accuracy_text(const storage::cluster_epoch& e) {
  if (std::isnan(e.averaged_accuracy))
    return "n/a (no node tested it)";
  std::string out = fmt::format("{:.4f}", e.averaged_accuracy);
  if (e.tests.size() > 1 || (e.tests.size() == 1 && e.tests[0].node != "local")) {
    out += " (";
    for (size_t i = 0; i < e.tests.size(); ++i)
      out += fmt::format("{}{} {:.4f} of {}", i ? ", " : "", e.tests[i].node,
                         e.tests[i].accuracy(), e.tests[i].samples);
    out += ")";
  }
  return out;
}

std::string epoch_barrier::epoch_line(uint32_t epoch) const {
  auto i = evaluated_.find(epoch);
  const auto e = i == evaluated_.end() ? storage::cluster_epoch{} : i->second;
  return fmt::format("epoch {}/{}: {:.1f} s ({:.1f} s training, {:.1f} s waiting for messages, "
                     "{:.1f} s evaluating), {} samples ({:.0f}/s), averaged model accuracy "
                     "{}, {} platforms up{}",
                     epoch + 1, settings_.last_epoch + 1, e.wall_seconds,
                     slowest_training(epoch), e.network_seconds, e.evaluation_seconds,
                     e.samples, e.epoch_seconds > 0 ? e.samples / e.epoch_seconds : 0.0,
                     averages(epoch) ? accuracy_text(e)
                                     : fmt::format("not made (train.average_every = {})",
                                                   settings_.average_every),
                     e.platforms_up,
                     e.prediction_error >= 0
                       ? fmt::format(", predicted epoch times off by {:.1f} %",
                                     100 * e.prediction_error)
                       : std::string{})
         + refused_text();
}

std::string epoch_barrier::refused_text() const {
  std::string out;
  for (auto& [name, why] : refused_)
    out += fmt::format("{} {} ({})", out.empty() ? "; refused:" : ",", name, why);
  return out;
}

std::string epoch_barrier::progress_line(clock::time_point now) const {
  uint32_t epoch = 0;
  double loss = 0;
  int n = 0;
  std::string parts;
  for (auto& [name, p] : platforms_) {
    epoch = std::max(epoch, p.progress.epoch);
    auto pct = p.progress.planned_samples
                 ? 100.0 * p.progress.samples / p.progress.planned_samples
                 : 0.0;
    parts += fmt::format(" {} {}", name, p.up ? fmt::format("e{} {:3.0f}%", p.progress.epoch + 1,
                                                            pct)
                                              : std::string{"down"});
    if (p.up && p.progress.iterations) {
      loss += p.progress.train_loss;
      ++n;
    }
  }
  // The newest average's (train.average_every: not every epoch has one).
  double acc = 0;
  for (auto e = evaluated_.rbegin(); e != evaluated_.rend(); ++e)
    if (averages(e->first)) {
      acc = e->second.averaged_accuracy;
      break;
    }
  auto secs = static_cast<int>(elapsed(now));
  return fmt::format("epoch {}/{} |{} | loss {:.3f} | avg acc {:.4f} | {}:{:02d}", epoch + 1,
                     settings_.last_epoch + 1, parts, n ? loss / n : 0.0, acc, secs / 60,
                     secs % 60);
}

} // namespace eg::actors
