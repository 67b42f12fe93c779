#include "actors/balancer.hpp"

#include "actors/evaluator.hpp"
#include "actors/inspection.hpp"
#include "actors/report_files.hpp"
#include "learning/balancing.hpp"
#include "learning/dataset.hpp"
#include "learning/gossip.hpp"
#include "learning/model.hpp"
#include "learning/serialize.hpp"
#include "learning/trainer.hpp"
#include "messages/codec.hpp"

#include "config/defaults.hpp"

#include <caf/all.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;

struct platform_entry {
  std::string node;
  platform_actor handle;
  predictor_actor predictor;
  bool up = true;
  messages::epoch_report progress;  // latest progress or report
  uint64_t shard_size = 0;          // |X_i|
  std::map<uint32_t, double> predicted_seconds;  // per epoch, EdgeGossip
  uint32_t first_epoch = 0;  // joined (again) during the run: expected from this epoch on
};

struct balancer_state {
  static inline const char* name = "balancer";
  balancer_args args;
  std::map<std::string, platform_entry> platforms;
  /// The latest averaged model (learning::save_model), from the evaluator.
  std::shared_ptr<std::string> averaged_model = std::make_shared<std::string>();
  bool started = false;
  bool finished = false;
  std::string run;
  clock::time_point run_start;
  /// When the last epoch ended (its averaged model evaluated), or training
  /// started: the start of the next epoch's wall time.
  clock::time_point last_epoch_end;
  /// Each epoch's slowest platform's training time (its report's wall_seconds).
  std::map<uint32_t, double> slowest_training;
  clock::time_point last_line;
  uint32_t last_epoch = 0;
  // Epochs: reports received and epoch start times.
  std::map<uint32_t, std::map<std::string, messages::epoch_report>> reports;
  std::map<uint32_t, clock::time_point> epoch_start;
  std::map<uint32_t, clock::time_point> epoch_end;  // last report of the epoch
  std::set<uint32_t> planning;  // epochs whose predictions are being gathered
  /// EdgeGossip's planned epoch time (the longest predicted), by epoch.
  std::map<uint32_t, double> planned_seconds;
  /// The epoch deadline (edgegossip.deadline), seconds after the epoch's
  /// start, set when the first platform reports the epoch.
  std::map<uint32_t, double> deadline;
  std::map<uint32_t, cluster_epoch> evaluated;
  std::set<uint32_t> evaluating;
  std::vector<messages::epoch_report> all_reports;
  /// Averages and evaluates models on a thread of its own, so the balancer
  /// answers (reports, the console) meanwhile.
  caf::actor evaluator;
  double started_unix = 0;
  double clock_offset = 0;  // seconds of the run before this balancer (resuming)
  /// What the inspection console sees beyond the above.
  struct {
    inspection::event_log events;
    clock::time_point born = clock::now();
    bool paused = false;
    clock::time_point paused_at;
    std::set<std::string> restoring;  // rejoined after being down, not trained yet
    std::map<std::string, std::string> store_failures;  // node -> why its store cannot write
    std::map<std::string, std::pair<int64_t, double>> checkpoints;  // epochs done, at
    double now() const { return std::chrono::duration<double>(clock::now() - born).count(); }
    void note(std::string kind, std::string text) {
      events.add(now(), std::move(kind), std::move(text));
    }
  } console;

  uint32_t up() const {
    uint32_t n = 0;
    for (auto& [_, p] : platforms)
      n += p.up ? 1 : 0;
    return n;
  }

  /// Every live platform expected in `epoch` reported it (or a later one:
  /// reports lost with a previous balancer do not hold an epoch back).
  bool complete(uint32_t epoch) const {
    auto i = reports.find(epoch);
    if (i == reports.end())
      return false;
    for (auto& [name, p] : platforms) {
      if (!p.up || p.first_epoch > epoch || i->second.count(name))
        continue;
      bool later = false;
      for (auto j = std::next(i); j != reports.end() && !later; ++j)
        later = j->second.count(name) > 0;
      if (!later)
        return false;
    }
    return true;
  }

  /// A platform's weight in the averaged model of `epoch`: the points it
  /// trained in that epoch (FedAvg's n_k), so that a platform on a small
  /// share r_i counts in proportion. Under GoSGD every platform trains its
  /// whole shard and the average is the plain mean. A platform without a
  /// report for the epoch counts as the mean of those with one.
  double averaging_weight(uint32_t epoch, const std::string& name) const {
    auto i = reports.find(epoch);
    if (i == reports.end() || i->second.empty())
      return 1;
    auto r = i->second.find(name);
    if (r != i->second.end() && r->second.samples > 0)
      return static_cast<double>(r->second.samples);
    double sum = 0;
    for (auto& [_, report] : i->second)
      sum += static_cast<double>(report.samples);
    return sum > 0 ? sum / static_cast<double>(i->second.size()) : 1;
  }

  /// A platform's weights of the output layer's rows in the averaged model
  /// of `epoch`: the points of each class it trained in that epoch; empty
  /// when its report does not say.
  std::vector<double> class_weights(uint32_t epoch, const std::string& name) const {
    auto i = reports.find(epoch);
    if (i == reports.end())
      return {};
    auto r = i->second.find(name);
    if (r == i->second.end())
      return {};
    return {r->second.class_samples.begin(), r->second.class_samples.end()};
  }

  /// The newest epoch whose plans went out.
  uint32_t planned_epoch() const {
    return epoch_start.empty() ? 0 : epoch_start.rbegin()->first;
  }

  double elapsed() const {
    return clock_offset + std::chrono::duration<double>(clock::now() - run_start).count();
  }
};

using self_ptr = balancer_actor::stateful_pointer<balancer_state>;

std::string run_name(const std::string& cluster) {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return cluster + "-" + buf;
}

// -- inspection console: events ---------------------------------------------------

/// A control command to one platform; a checkpoint is noted once the store
/// has it.
void console_send(self_ptr self, const std::string& name, const platform_actor& handle,
                  messages::verb what) {
  self->request(handle, defaults::control_timeout, control_atom::value, control{what, {}})
    .then(
      [self, name, what](bool ok) {
        auto& st = self->state;
        if (what == messages::verb::checkpoint && ok)
          st.console.checkpoints[name].second = st.console.now();
      },
      [self, name, what](caf::error& err) {
        spdlog::warn("balancer: console: {} on platform {}: {}", messages::to_string(what), name,
                     self->system().render(err));
      });
}

void console_joined(self_ptr self, const std::string& name, const std::string& node,
                    const platform_actor& handle, bool rejoined) {
  auto& st = self->state;
  st.console.note("join", fmt::format("platform {} {} from node {}", name,
                                      rejoined ? "rejoined" : "joined", node));
  if (rejoined)
    st.console.restoring.insert(name);
  if (st.console.paused)  // the cluster is paused: so is a platform that joins now
    console_send(self, name, handle, messages::verb::pause);
}

/// A platform checkpoints at every epoch end, before it reports.
void console_reported(balancer_state& st, const messages::epoch_report& r) {
  st.console.checkpoints[r.platform] = {static_cast<int64_t>(r.epoch) + 1, st.console.now()};
  st.console.restoring.erase(r.platform);
}

void console_epoch(balancer_state& st, uint32_t epoch) {
  auto& e = st.evaluated[epoch];
  st.console.note("epoch", fmt::format("epoch {}/{}: averaged model accuracy {:.4f}, {} "
                                       "platforms up",
                                       epoch + 1, st.last_epoch + 1, e.averaged_accuracy,
                                       e.platforms_up));
  std::string who;
  for (auto& [name, _] : st.reports[epoch])
    who += " " + name;
  st.console.note("checkpoint", fmt::format("checkpoints after epoch {}:{}", epoch + 1, who));
}

/// Asks every target for one answer (of type Answer), all at once, and
/// calls `done` with the answers once each target has answered or failed
/// (failures are logged and left out), so a dead peer never holds the
/// balancer up.
template <class Answer, class Handle, class Atom>
void gather(self_ptr self, const std::vector<std::pair<std::string, Handle>>& targets,
            std::chrono::milliseconds timeout, Atom atom, const char* what,
            std::function<void(std::vector<Answer>&)> done) {
  struct state {
    size_t pending;
    std::vector<Answer> answers;
    std::function<void(std::vector<Answer>&)> done;
  };
  auto g = std::make_shared<state>(state{targets.size(), {}, std::move(done)});
  if (targets.empty()) {
    g->done(g->answers);
    return;
  }
  for (auto& [name, handle] : targets)
    self->request(handle, timeout, atom)
      .then(
        [g](Answer& answer) {
          g->answers.push_back(std::move(answer));
          if (--g->pending == 0)
            g->done(g->answers);
        },
        [g, what, name = name](caf::error& err) {
          spdlog::warn("balancer: no {} from {}: {}", what, name, caf::to_string(err));
          if (--g->pending == 0)
            g->done(g->answers);
        });
}

/// Sends every live platform its plan for `epoch`; `ratios` and `adopt`
/// come from Algorithm 1 (empty: GoSGD, every r_i = 1).
void send_plans(self_ptr self, uint32_t epoch, const std::map<std::string, double>& ratios,
                const std::vector<std::string>& adopt) {
  auto& st = self->state;
  st.epoch_start[epoch] = clock::now();
  std::vector<std::string> survivors;
  for (auto& [name, entry] : st.platforms)
    if (entry.up)
      survivors.push_back(name);
  for (size_t i = 0; i < survivors.size(); ++i) {
    messages::plan p;
    p.epoch = epoch;
    auto r = ratios.find(survivors[i]);
    p.ratio = r == ratios.end() ? 1.0 : r->second;
    p.last_epoch = st.last_epoch;
    p.adopt = adopt;
    p.adopt_part = static_cast<uint32_t>(i);
    p.adopt_parts = static_cast<uint32_t>(survivors.size());
    self->send(st.platforms[survivors[i]].handle, plan_atom::value, p);
  }
}

/// Algorithm 1 on the predictors' answers, then the plans.
void balance_and_send(self_ptr self, uint32_t epoch,
                      const std::map<std::string, messages::prediction>& predictions) {
  auto& st = self->state;
  std::vector<learning::platform_estimate> estimates;
  bool all_known = true;
  for (auto& [name, entry] : st.platforms) {
    learning::platform_estimate e;
    e.name = name;
    e.samples = static_cast<int64_t>(entry.shard_size);
    e.down = !entry.up;
    auto i = predictions.find(name);
    if (i != predictions.end())
      e.throughput = i->second.throughput;
    if (entry.up && (i == predictions.end() || i->second.observations == 0 || e.samples == 0))
      all_known = false;
    estimates.push_back(e);
  }
  if (!all_known) {
    // A platform without observations (the first epoch): profile with r = 1.
    send_plans(self, epoch, {}, {});
    return;
  }
  auto plan = learning::balance(estimates, st.args.cluster.edgegossip.p_threshold,
                                st.args.cluster.edgegossip.f_threshold);
  std::map<std::string, double> ratios;
  std::vector<std::string> adopt;
  std::string line;
  for (auto& d : plan.platforms) {
    if (d.failed) {
      if (st.platforms[d.name].up)
        spdlog::warn("balancer: platform {} predicted below p_threshold: failed", d.name);
      adopt.push_back(d.name);
      continue;
    }
    ratios[d.name] = d.ratio;
    st.platforms[d.name].predicted_seconds[epoch] = d.epoch_seconds * d.ratio;
    st.planned_seconds[epoch] = std::max(st.planned_seconds[epoch], d.epoch_seconds * d.ratio);
    line += fmt::format(" {} r={:.2f}", d.name, d.ratio);
  }
  if (!plan.exception_handling)
    adopt.clear();
  else
    spdlog::warn("balancer: {} of {} platforms failed: survivors take over their shards",
                 plan.failed, plan.platforms.size());
  spdlog::info("balancer: epoch {} plan:{}", epoch + 1, line);
  st.console.note("plan", fmt::format("epoch {} plan:{}{}", epoch + 1, line,
                                      adopt.empty() ? "" : " (survivors take failed shards)"));
  // A platform that is still up but predicted below p_threshold has no ratio
  // here and trains its whole shard (send_plans' default), so the epoch
  // barrier, which waits for every live platform, is never held up by it.
  send_plans(self, epoch, ratios, adopt);
}

void send_plan(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  if (!st.args.cluster.strategy.edgegossip()) {
    send_plans(self, epoch, {}, {});
    return;
  }
  if (st.planning.count(epoch))
    return;
  st.planning.insert(epoch);
  std::vector<std::pair<std::string, predictor_actor>> targets;
  for (auto& [name, entry] : st.platforms)
    if (entry.up && entry.predictor)
      targets.emplace_back(name, entry.predictor);
  gather<prediction>(self, targets, defaults::prediction_timeout, predict_atom::value,
                     "prediction", [self, epoch](std::vector<prediction>& answers) {
           std::map<std::string, messages::prediction> predictions;
           for (auto& p : answers)
             predictions[p.platform] = p;
           self->state.planning.erase(epoch);
           balance_and_send(self, epoch, predictions);
         });
}

void finish(self_ptr self);

/// Sends the run state to the node, which keeps it in every node's store.
void save_run_state(self_ptr self) {
  auto& st = self->state;
  storage::run_state r;
  r.fingerprint = st.args.fingerprint;
  r.run = st.run;
  r.finished = st.finished;
  r.started_unix = st.started_unix;
  for (auto& [_, e] : st.evaluated)
    r.epochs.push_back(e);
  for (auto& report : st.all_reports)
    r.reports.push_back(storage::encode_report(report, st.args.cluster.id));
  self->send(st.args.node, run_atom::value, storage::frame_run_state(r));
}

void start(self_ptr self) {
  auto& st = self->state;
  if (st.started)
    return;
  st.started = true;
  st.run_start = st.last_line = st.last_epoch_end = clock::now();
  uint32_t next = 0;
  if (st.args.resume && st.args.resume->run.empty()) {
    // A successor with no saved state (the run's first epoch was not over).
    st.args.resume.reset();
    st.run = run_name(st.args.cluster.id);
    st.started_unix = storage::unix_now();
    spdlog::info("balancer: starting run {} with {} of {} platforms", st.run, st.up(),
                 st.args.cluster.platforms().size());
  } else if (st.args.resume) {
    auto& r = *st.args.resume;
    st.run = r.run;
    st.started_unix = r.started_unix;
    for (auto& e : r.epochs) {
      st.evaluated[e.epoch] = e;
      next = std::max(next, e.epoch + 1);
      st.clock_offset = std::max(st.clock_offset, e.elapsed_seconds);
    }
    for (auto& record : r.reports) {
      std::string problem;
      if (auto report = storage::decode_report(record, st.args.cluster.id, problem))
        st.all_reports.push_back(std::move(*report));
      else
        spdlog::warn("balancer: a saved report is unusable: {}", problem);
    }
    spdlog::info("balancer: continuing run {} at epoch {}/{} with {} of {} platforms",
                 st.run, next + 1, st.last_epoch + 1, st.up(),
                 st.args.cluster.platforms().size());
  } else {
    st.run = run_name(st.args.cluster.id);
    st.started_unix = storage::unix_now();
    spdlog::info("{} of {} platforms joined; training run {} ({} {}, {} epochs)",
                 st.platforms.size(), st.args.cluster.platforms().size(), st.run,
                 config::to_string(st.args.cluster.strategy.name),
                 config::to_string(st.args.cluster.strategy.schedule),
                 st.args.cluster.train.epochs);
  }
  save_run_state(self);
  self->delayed_send(self, defaults::progress_interval, tick_atom::value);
  if (next > st.last_epoch) {
    finish(self);
    return;
  }
  send_plan(self, next);
}

void write_outputs(self_ptr self) {
  auto& st = self->state;
  namespace fs = std::filesystem;
  auto dir = fs::path(st.args.cluster.output_dir) / st.run;
  try {
    fs::create_directories(dir);
    write_platform_csv((dir / "metrics.csv").string(), st.all_reports);
    std::vector<cluster_epoch> epochs;
    for (auto& [_, e] : st.evaluated)
      epochs.push_back(e);
    write_cluster_csv((dir / "cluster.csv").string(), epochs);
    auto model = learning::make_classifier(st.args.cluster.train.model, st.args.cluster.seed);
    if (!st.averaged_model->empty())
      learning::load_model(*model, *st.averaged_model);
    learning::write_state_dict(*model, (dir / "model.pt").string());
    auto shown = st.args.cluster;
    if (!shown.secret.empty())
      shown.secret = "(not written)";  // run directories get copied around
    std::ofstream((dir / "config.toml").string()) << config::to_toml(shown);
    spdlog::info("run directory: {}", dir.string());
  } catch (const std::exception& e) {
    spdlog::error("cannot write the run directory {}: {}", dir.string(), e.what());
  }
}

void finish(self_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  if (st.args.interactive)
    std::fputc('\n', stderr);
  write_outputs(self);
  save_run_state(self);
  for (auto& [name, entry] : st.platforms)
    if (entry.up)
      self->send(entry.handle, done_atom::value, st.run);
  self->send(st.args.node, done_atom::value, std::string{"balancer"}, st.run);
}

void epoch_evaluated(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  auto& e = st.evaluated[epoch];
  // The wall time since the epoch before ended: what the user waited.
  const auto now = clock::now();
  e.wall_seconds = std::chrono::duration<double>(now - st.last_epoch_end).count();
  st.last_epoch_end = now;
  e.network_seconds =
    std::max(0.0, e.wall_seconds - e.evaluation_seconds - st.slowest_training[epoch]);
  spdlog::info("epoch {}/{}: {:.1f} s ({:.1f} s training, {:.1f} s waiting for messages, "
               "{:.1f} s evaluating), {} samples ({:.0f}/s), averaged model accuracy {:.4f}, "
               "{} platforms up{}",
               epoch + 1, st.last_epoch + 1, e.wall_seconds, st.slowest_training[epoch],
               e.network_seconds, e.evaluation_seconds, e.samples,
               e.epoch_seconds > 0 ? e.samples / e.epoch_seconds : 0.0, e.averaged_accuracy,
               e.platforms_up,
               e.prediction_error >= 0
                 ? fmt::format(", predicted epoch times off by {:.1f} %",
                               100 * e.prediction_error)
                 : std::string{});
  console_epoch(st, epoch);
  bool all_done = true;
  for (uint32_t i = 0; i <= st.last_epoch; ++i)
    all_done = all_done && st.evaluated.count(i) > 0;
  if (all_done) {
    finish(self);
    return;
  }
  if (!st.args.cluster.strategy.asynchronous() && epoch < st.last_epoch
      && st.epoch_start.count(epoch + 1) == 0)
    send_plan(self, epoch + 1);
}

/// All live platforms reported `epoch`: averages their current models.
void evaluate_average(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  if (st.evaluated.count(epoch) || st.evaluating.count(epoch))
    return;
  st.evaluating.insert(epoch);
  cluster_epoch ce;
  ce.epoch = epoch;
  ce.elapsed_seconds = st.elapsed();
  auto from = st.epoch_start.count(epoch) ? st.epoch_start[epoch] : st.run_start;
  if (st.args.cluster.strategy.asynchronous() && epoch > 0 && st.evaluated.count(epoch - 1))
    ce.epoch_seconds = ce.elapsed_seconds - st.evaluated[epoch - 1].elapsed_seconds;
  else
    ce.epoch_seconds = std::chrono::duration<double>(clock::now() - from).count();
  double error_sum = 0;
  int predicted = 0;
  double longest = 0;  // the slowest platform's epoch time
  for (auto& [_, r] : st.reports[epoch]) {
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
  st.slowest_training[epoch] = longest;
  ce.platforms_up = st.up();
  auto end = st.epoch_end.count(epoch) ? st.epoch_end[epoch] : clock::now();
  if (st.args.cluster.strategy.asynchronous()) {
    ce.training_seconds =
      st.clock_offset + std::chrono::duration<double>(end - st.run_start).count();
  } else {
    double before = epoch > 0 && st.evaluated.count(epoch - 1)
                      ? st.evaluated[epoch - 1].training_seconds
                      : 0.0;
    ce.training_seconds =
      before + std::max(longest, std::chrono::duration<double>(end - from).count());
  }
  std::vector<std::pair<std::string, platform_actor>> targets;
  for (auto& [name, entry] : st.platforms)
    if (entry.up)
      targets.emplace_back(name, entry.handle);
  gather<held_weights>(
    self, targets, defaults::weights_timeout, weights_atom::value, "weights",
    [self, ce, epoch](std::vector<held_weights>& answers) mutable {
      auto& st = self->state;
      std::vector<double> samples;               // each model's weight in the average
      std::vector<std::vector<double>> classes;  // and of its rows of the output layer
      for (auto& w : answers) {
        samples.push_back(st.averaging_weight(epoch, w.sender));
        classes.push_back(st.class_weights(epoch, w.sender));
      }
      auto done = [self, ce, epoch](double loss, double accuracy, double seconds) mutable {
        auto& st = self->state;
        ce.averaged_loss = loss;
        ce.averaged_accuracy = accuracy;
        ce.evaluation_seconds = seconds;
        st.evaluating.erase(epoch);
        st.evaluated[epoch] = ce;
        if (epoch < st.last_epoch)
          save_run_state(self);  // the last one is saved by finish, marked finished
        epoch_evaluated(self, epoch);
      };
      self
        ->request(caf::actor_cast<evaluator_actor>(st.evaluator), caf::infinite,
                  evaluate_atom::value, std::move(answers), std::move(samples),
                  std::move(classes))
        .then(done, [self, done](caf::error& err) mutable {
          spdlog::error("balancer: the averaged model was not evaluated: {}",
                        self->system().render(err));
          done(0, 0, 0);
        });
    });
}

std::chrono::microseconds micros(double seconds) {
  return std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1e6));
}

/// The epoch deadline (learning::epoch_deadline) is set when the first
/// platform with data reports `epoch`. EdgeGossip with the synchronous
/// schedule only: GoSGD, the baseline, waits for its slowest platform.
void arm_deadline(self_ptr self, const messages::epoch_report& r) {
  auto& st = self->state;
  const double factor = st.args.cluster.edgegossip.deadline;
  if (!st.args.cluster.strategy.edgegossip() || st.args.cluster.strategy.asynchronous()
      || factor <= 0 || r.samples == 0 || st.deadline.count(r.epoch)
      || !st.epoch_start.count(r.epoch))
    return;
  const double first =
    std::chrono::duration<double>(clock::now() - st.epoch_start[r.epoch]).count();
  const auto planned = st.planned_seconds.find(r.epoch);
  st.deadline[r.epoch] = learning::epoch_deadline(
    factor, first, planned == st.planned_seconds.end() ? 0.0 : planned->second);
  self->delayed_send(self, micros(st.deadline[r.epoch] - first), deadline_atom::value, r.epoch);
}

/// The deadline of `epoch` came: cuts the platforms still training it.
void deadline_passed(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  if (st.finished || st.evaluated.count(epoch) || st.evaluating.count(epoch) || st.complete(epoch))
    return;
  auto limit = st.deadline.find(epoch);
  if (limit == st.deadline.end() || !st.epoch_start.count(epoch))
    return;
  // Paused by the console, or the epoch's start moved by a pause: later.
  const double elapsed =
    std::chrono::duration<double>(clock::now() - st.epoch_start[epoch]).count();
  if (st.console.paused || elapsed < limit->second) {
    const double wait = st.console.paused ? 1.0 : limit->second - elapsed;
    self->delayed_send(self, micros(wait), deadline_atom::value, epoch);
    return;
  }
  std::string names;
  const auto& reported = st.reports[epoch];
  for (auto& [name, p] : st.platforms)
    if (p.up && p.first_epoch <= epoch && !reported.count(name)) {
      self->send(p.handle, cut_atom::value, epoch);
      names += " " + name;
    }
  if (names.empty())
    return;
  spdlog::info("balancer: epoch {} deadline ({:.2f} s) passed: cut{}", epoch + 1, limit->second,
               names);
  st.console.note("deadline", fmt::format("epoch {} deadline {:.1f} s: cut{}", epoch + 1,
                                          limit->second, names));
}

void check_epochs(self_ptr self) {
  auto& st = self->state;
  for (auto& [epoch, _] : st.reports)
    if (st.complete(epoch))
      evaluate_average(self, epoch);
}

std::string progress_line(const balancer_state& st) {
  uint32_t epoch = 0;
  double loss = 0;
  int n = 0;
  std::string parts;
  for (auto& [name, p] : st.platforms) {
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
  double acc = st.evaluated.empty() ? 0.0 : st.evaluated.rbegin()->second.averaged_accuracy;
  auto secs = static_cast<int>(st.elapsed());
  return fmt::format("epoch {}/{} |{} | loss {:.3f} | avg acc {:.4f} | {}:{:02d}", epoch + 1,
                     st.last_epoch + 1, parts, n ? loss / n : 0.0, acc, secs / 60, secs % 60);
}

// -- inspection console: snapshot and commands -------------------------------------

inspection::snapshot console_snapshot(const balancer_state& st,
                                      const std::map<std::string, double>& throughput,
                                      const std::string& via) {
  inspection::snapshot s;
  auto& h = s.cluster;
  const auto& cfg = st.args.cluster;
  h.id = cfg.id;
  h.strategy = config::to_string(cfg.strategy.name);
  h.schedule = cfg.strategy.asynchronous() ? "async" : "sync";
  h.run = st.run;
  h.state = !st.started ? "waiting" : st.finished ? "finished" : st.console.paused ? "paused"
                                                                               : "training";
  h.elapsed_seconds = st.started ? st.elapsed() : 0.0;
  h.epochs = st.last_epoch + 1;
  if (!st.evaluated.empty()) {
    h.evaluated_epoch = st.evaluated.rbegin()->first;
    h.averaged_accuracy = st.evaluated.rbegin()->second.averaged_accuracy;
  }
  h.balancer = cfg.balancer().name;
  h.via = via;
  for (auto& pc : cfg.platforms()) {
    inspection::platform_row row;
    row.name = pc.name;
    for (auto& n : cfg.nodes)
      for (auto& q : n.platforms)
        if (q.name == pc.name)
          row.node = n.name;
    auto i = st.platforms.find(pc.name);
    if (i == st.platforms.end()) {
      row.state = "waiting";  // not joined yet
      s.platforms.push_back(std::move(row));
      continue;
    }
    auto& p = i->second;
    row.node = p.node;
    row.state = !p.up ? "down" : st.console.restoring.count(pc.name) ? "restoring" : "up";
    (p.up ? h.platforms_up : h.platforms_down) += 1;
    row.paused = p.up && st.console.paused;
    row.epoch = p.progress.epoch;
    h.epoch = std::max(h.epoch, row.epoch);
    row.iterations = p.progress.iterations;
    row.samples = p.progress.samples;
    row.progress = p.progress.planned_samples
                     ? static_cast<double>(p.progress.samples) / p.progress.planned_samples
                     : 0.0;
    row.ratio = p.progress.ratio;
    row.train_loss = p.progress.train_loss;
    if (auto t = throughput.find(pc.name); t != throughput.end())
      row.throughput = t->second;
    inspection::add_completed_epochs(row, st.all_reports);
    if (auto c = st.console.checkpoints.find(pc.name); c != st.console.checkpoints.end()) {
      row.checkpoint_epochs = c->second.first;
      row.checkpoint_at = c->second.second;
    }
    s.platforms.push_back(std::move(row));
  }
  for (auto& n : cfg.nodes) {
    inspection::node_row row{n.name, n.host, n.port, "unknown", n.name == h.balancer, {}};
    bool any_up = false, any_down = false;
    for (auto& q : n.platforms) {
      row.platforms.push_back(q.name);
      if (auto i = st.platforms.find(q.name); i != st.platforms.end())
        (i->second.up ? any_up : any_down) = true;
    }
    row.state = row.balancer || any_up ? "up" : any_down ? "down" : "unknown";
    if (auto f = st.console.store_failures.find(n.name); f != st.console.store_failures.end())
      row.store = f->second;
    s.nodes.push_back(std::move(row));
  }
  s.topology = inspection::topology_of(st.all_reports);
  s.events = st.console.events.recent();
  return s;
}

/// Sends a control command (pause, resume, checkpoint) to every live
/// platform.
inspection::answer console_control(self_ptr self, messages::verb what) {
  auto& st = self->state;
  if (st.finished)
    return {false, "the run is over"};
  std::string names;
  size_t n = 0;
  for (auto& [name, entry] : st.platforms)
    if (entry.up) {
      console_send(self, name, entry.handle, what);
      names += (n++ ? ", " : "") + name;
    }
  if (what == messages::verb::pause && !st.console.paused) {
    st.console.paused = true;
    st.console.paused_at = clock::now();
  } else if (what == messages::verb::resume && st.console.paused) {
    st.console.paused = false;
    // The time paused is no epoch time (cluster.csv), as on the platforms.
    for (auto& [epoch, start] : st.epoch_start)
      if (!st.complete(epoch))
        start += clock::now() - std::max(st.console.paused_at, start);
  }
  const std::string verb = messages::to_string(what);
  auto text = fmt::format("{} sent to {} platform{}{}", verb, n, n == 1 ? "" : "s",
                          n ? " (" + names + ")" : std::string{});
  st.console.note(verb, text + " by the console");
  spdlog::info("balancer: console: {}", text);
  return {true, text};
}

caf::result<std::string> console_command(self_ptr self, const control& c,
                                         const std::string& via) {
  auto& st = self->state;
  switch (c.verb) {
    case messages::verb::snapshot: {
      // Predicted throughputs asked now, of every live platform's predictor.
      std::vector<std::pair<std::string, predictor_actor>> targets;
      for (auto& [name, entry] : st.platforms)
        if (entry.up && entry.predictor)
          targets.emplace_back(name, entry.predictor);
      auto rp = self->make_response_promise<std::string>();
      gather<prediction>(self, targets, defaults::console_prediction_timeout,
                         predict_atom::value, "prediction",
                         [self, rp, via](std::vector<prediction>& answers) mutable {
                           std::map<std::string, double> throughput;
                           for (auto& p : answers)
                             throughput[p.platform] = p.throughput;
                           rp.deliver(inspection::to_json(
                             console_snapshot(self->state, throughput, via)));
                         });
      return rp;
    }
    case messages::verb::history: {
      bool known = false;
      for (auto& p : st.args.cluster.platforms())
        known = known || p.name == c.argument;
      if (!known)
        return make_error(ec::unknown_platform, "no platform named '" + c.argument + "'");
      inspection::history h{c.argument, {}};
      for (auto& r : st.all_reports)
        if (r.platform == c.argument)
          h.epochs.push_back(r);
      std::stable_sort(h.epochs.begin(), h.epochs.end(),
                       [](auto& a, auto& b) { return a.epoch < b.epoch; });
      return inspection::to_json(h);
    }
    case messages::verb::pause:
    case messages::verb::resume:
    case messages::verb::checkpoint:
      return inspection::to_json(console_control(self, c.verb));
    default:
      return make_error(ec::bad_request, std::string{"the console cannot ask for "}
                                           + messages::to_string(c.verb));
  }
}

balancer_actor::behavior_type balancer(self_ptr self, balancer_args args) {
  auto& st = self->state;
  st.last_epoch = args.cluster.train.epochs - 1;
  st.evaluator = caf::actor_cast<caf::actor>(spawn_evaluator(
    self->system(), {args.cluster.train.model, args.cluster.seed, args.test_set, st.averaged_model}));
  self->link_to(st.evaluator);
  st.args = std::move(args);
  if (st.args.resume) {
    // Continuing a run: platforms that do not join within a few seconds
    // (their node is down) do not hold it back; they join again later.
    self->delayed_send(self, defaults::resume_grace, start_atom::value);
  }
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& [name, entry] : st.platforms)
      if (entry.up && entry.handle.address() == dm.source) {
        entry.up = false;
        st.console.restoring.erase(name);
        st.console.note("down", fmt::format("platform {} on node {} is down ({})", name,
                                            entry.node, caf::to_string(dm.reason)));
        if (!st.finished)
          spdlog::warn("balancer: platform {} on node {} is down ({}); {} platforms left", name,
                       entry.node, caf::to_string(dm.reason), st.up());
      }
    if (!st.finished)
      check_epochs(self);
  });
  return {
    [self](failed_atom, const std::string& node, const std::string& why) {
      auto& st = self->state;
      if (st.console.store_failures.emplace(node, why).second)
        st.console.note("store", fmt::format("node {}: the store cannot write ({}); its "
                                             "checkpoints are not being saved",
                                             node, why));
    },
    [self](join_atom, const std::string& name, const std::string& node, caf::actor handle,
           caf::actor predictor) {
      auto& st = self->state;
      auto expected = st.args.cluster.platforms();
      bool known = false;
      for (auto& p : expected)
        known = known || p.name == name;
      if (!known) {
        spdlog::warn("balancer: platform '{}' of node '{}' is not in the cluster file; ignored",
                     name, node);
        return;
      }
      auto h = caf::actor_cast<platform_actor>(handle);
      auto i = st.platforms.find(name);
      // The same platform again: nothing new while it is up; after it was
      // down (its node froze past cluster.peer_timeout and woke up) it
      // rejoins like a restarted one.
      if (i != st.platforms.end() && i->second.handle == h && i->second.up)
        return;
      bool again = i != st.platforms.end();
      self->monitor(h);
      console_joined(self, name, node, h, i != st.platforms.end());
      auto size = st.args.shard_sizes.find(name);
      auto& entry = st.platforms[name];
      entry = platform_entry{node, h, caf::actor_cast<predictor_actor>(predictor), true, {},
                             size == st.args.shard_sizes.end() ? 0 : size->second, {}};
      entry.progress.platform = name;
      if (st.started && !st.finished) {
        // Joins a run in progress (a restarted node): it takes part from the
        // next epoch (synchronous schedule), or at once with the epoch the
        // others are in (asynchronous).
        uint32_t now = 0;
        for (auto& [_, p] : st.platforms)
          now = std::max(now, p.progress.epoch);
        if (st.args.cluster.strategy.asynchronous()) {
          entry.first_epoch = now;
          messages::plan p;
          p.epoch = now;
          p.ratio = 1.0;
          p.last_epoch = st.last_epoch;
          self->send(h, plan_atom::value, p);
        } else {
          entry.first_epoch = st.planned_epoch() + 1;
        }
        spdlog::info("balancer: platform {} {} from node {}; training from epoch {}", name,
                     again ? "is back" : "joined", node, entry.first_epoch + 1);
        return;
      }
      spdlog::info("balancer: platform {} joined from node {} ({}/{})", name, node,
                   st.platforms.size(), expected.size());
      auto needed = st.args.cluster.quorum > 0 ? static_cast<size_t>(st.args.cluster.quorum)
                                               : expected.size();
      if (!st.started && st.platforms.size() >= needed)
        start(self);
    },
    [self](report_atom, epoch_report& r) {
      auto& st = self->state;
      auto i = st.platforms.find(r.platform);
      if (i != st.platforms.end()) {
        i->second.progress = r;
        auto p = i->second.predicted_seconds.find(r.epoch);
        if (p != i->second.predicted_seconds.end())
          r.predicted_seconds = p->second;
      }
      if (st.reports[r.epoch].count(r.platform))
        return;  // sent again (a balancer took over): already counted
      st.reports[r.epoch][r.platform] = r;
      st.epoch_end[r.epoch] = clock::now();
      st.all_reports.push_back(r);
      console_reported(st, r);
      arm_deadline(self, r);
      check_epochs(self);
    },
    [self](progress_atom, const epoch_report& r) {
      auto& st = self->state;
      auto i = st.platforms.find(r.platform);
      if (i != st.platforms.end())
        i->second.progress = r;
      st.console.restoring.erase(r.platform);
    },
    [self](tick_atom) {
      auto& st = self->state;
      if (st.finished)
        return;
      if (st.args.interactive) {
        std::fprintf(stderr, "\r\033[K%s", progress_line(st).c_str());
        std::fflush(stderr);
      } else if (clock::now() - st.last_line >= defaults::progress_log_interval) {
        st.last_line = clock::now();
        spdlog::info("{}", progress_line(st));
      }
      self->delayed_send(self, defaults::progress_interval, tick_atom::value);
    },
    [self](start_atom) {
      auto& st = self->state;
      if (st.started)
        return;
      if (st.platforms.empty()) {
        self->delayed_send(self, defaults::progress_interval, start_atom::value);
        return;
      }
      start(self);
    },
    [self](deadline_atom, uint32_t epoch) { deadline_passed(self, epoch); },
    [self](inspect_atom, const control& command, const std::string& via) {
      return console_command(self, command, via);
    },
  };
}

} // namespace

balancer_actor spawn_balancer(caf::actor_system& sys, balancer_args args) {
  return sys.spawn(balancer, std::move(args));
}

} // namespace eg::actors
