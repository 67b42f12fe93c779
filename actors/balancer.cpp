#include "actors/balancer.hpp"

#include "actors/report_files.hpp"
#include "learning/dataset.hpp"
#include "learning/gossip.hpp"
#include "learning/model.hpp"
#include "learning/serialize.hpp"
#include "learning/trainer.hpp"
#include "messages/codec.hpp"

#include <caf/all.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;

struct platform_entry {
  std::string node;
  platform_actor handle;
  bool up = true;
  messages::epoch_report progress;  // latest progress or report
};

struct balancer_state {
  static inline const char* name = "balancer";
  balancer_args args;
  std::map<std::string, platform_entry> platforms;
  std::shared_ptr<learning::classifier> model;  // evaluates averaged models
  std::vector<std::string> names;
  std::vector<torch::Tensor> like;
  bool started = false;
  bool finished = false;
  std::string run;
  clock::time_point run_start;
  clock::time_point last_line;
  uint32_t last_epoch = 0;
  // Epochs: reports received and epoch start times.
  std::map<uint32_t, std::map<std::string, messages::epoch_report>> reports;
  std::map<uint32_t, clock::time_point> epoch_start;
  std::map<uint32_t, cluster_epoch> evaluated;
  std::set<uint32_t> evaluating;
  std::vector<messages::epoch_report> all_reports;

  messages::header header() const {
    return {args.cluster.id, messages::protocol_version, "balancer"};
  }

  uint32_t up() const {
    uint32_t n = 0;
    for (auto& [_, p] : platforms)
      n += p.up ? 1 : 0;
    return n;
  }

  bool complete(uint32_t epoch) const {
    auto i = reports.find(epoch);
    if (i == reports.end())
      return false;
    for (auto& [name, p] : platforms)
      if (p.up && i->second.count(name) == 0)
        return false;
    return true;
  }

  double elapsed() const {
    return std::chrono::duration<double>(clock::now() - run_start).count();
  }
};

using self_ptr = balancer_actor::stateful_pointer<balancer_state>;

std::string run_name(const std::string& cluster) {
  auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return cluster + "-" + buf;
}

void send_plan(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  st.epoch_start[epoch] = clock::now();
  messages::plan p;
  p.epoch = epoch;
  p.ratio = 1.0;  // GoSGD: every platform processes its whole shard
  p.last_epoch = st.last_epoch;
  auto buf = messages::encode({st.header(), p});
  for (auto& [name, entry] : st.platforms)
    if (entry.up)
      self->send(entry.handle, plan_atom::value, buf);
}

void start(self_ptr self) {
  auto& st = self->state;
  st.started = true;
  st.run = run_name(st.args.cluster.id);
  st.run_start = st.last_line = clock::now();
  spdlog::info("all {} platforms joined; training run {} ({} {}, {} epochs)",
               st.platforms.size(), st.run, st.args.cluster.strategy.name,
               st.args.cluster.strategy.schedule, st.args.cluster.train.epochs);
  self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
  send_plan(self, 0);
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
    learning::write_state_dict(*st.model, (dir / "model.pt").string());
    std::ofstream((dir / "config.toml").string()) << config::to_toml(st.args.cluster);
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
  for (auto& [name, entry] : st.platforms)
    if (entry.up)
      self->send(entry.handle, done_atom::value, st.run);
  self->send(st.args.node, done_atom::value, std::string{"balancer"}, st.run);
}

void epoch_evaluated(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  auto& e = st.evaluated[epoch];
  spdlog::info("epoch {}/{}: {:.1f} s, {} samples ({:.0f}/s), averaged model accuracy {:.4f}, "
               "{} platforms up",
               epoch + 1, st.last_epoch + 1, e.epoch_seconds, e.samples,
               e.epoch_seconds > 0 ? e.samples / e.epoch_seconds : 0.0, e.averaged_accuracy,
               e.platforms_up);
  bool all_done = true;
  for (uint32_t i = 0; i <= st.last_epoch; ++i)
    all_done = all_done && st.evaluated.count(i) > 0;
  if (all_done) {
    finish(self);
    return;
  }
  if (st.args.cluster.strategy.schedule == "sync" && epoch < st.last_epoch
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
  if (st.args.cluster.strategy.schedule == "async" && epoch > 0 && st.evaluated.count(epoch - 1))
    ce.epoch_seconds = ce.elapsed_seconds - st.evaluated[epoch - 1].elapsed_seconds;
  else
    ce.epoch_seconds = std::chrono::duration<double>(clock::now() - from).count();
  for (auto& [_, r] : st.reports[epoch])
    ce.samples += r.samples;
  ce.platforms_up = st.up();
  struct gather {
    cluster_epoch ce;
    size_t pending = 0;
    std::vector<bytes> buffers;
  };
  auto g = std::make_shared<gather>();
  g->ce = ce;
  auto done = [self, g, epoch] {
    auto& st = self->state;
    std::vector<std::vector<torch::Tensor>> models;
    for (auto& buf : g->buffers) {
      try {
        auto env = messages::decode(buf, st.args.cluster.id);
        auto& w = std::get<messages::weights>(env.payload);
        // Copy out of the buffer: the average outlives this scope in the model.
        std::vector<torch::Tensor> ts;
        for (auto& t : learning::from_views(w.tensors, st.names, st.like))
          ts.push_back(t.clone());
        models.push_back(std::move(ts));
      } catch (const std::exception& e) {
        spdlog::warn("balancer: ignoring weights that cannot be averaged: {}", e.what());
      }
    }
    if (!models.empty()) {
      auto avg = learning::average(models);
      torch::NoGradGuard guard;
      for (size_t i = 0; i < avg.size(); ++i)
        st.like[i].copy_(avg[i]);
      auto eval = learning::evaluate(*st.model, *st.args.test_set);
      g->ce.averaged_loss = eval.loss;
      g->ce.averaged_accuracy = eval.accuracy;
    }
    st.evaluating.erase(epoch);
    st.evaluated[epoch] = g->ce;
    epoch_evaluated(self, epoch);
  };
  for (auto& [name, entry] : st.platforms)
    if (entry.up)
      ++g->pending;
  if (g->pending == 0) {
    done();
    return;
  }
  for (auto& [name, entry] : st.platforms) {
    if (!entry.up)
      continue;
    self->request(entry.handle, std::chrono::seconds(30), weights_atom::value)
      .then(
        [g, done](bytes& buf) {
          g->buffers.push_back(std::move(buf));
          if (--g->pending == 0)
            done();
        },
        [g, done, name = name](caf::error& err) {
          spdlog::warn("balancer: no weights from {}: {}", name, caf::to_string(err));
          if (--g->pending == 0)
            done();
        });
  }
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

balancer_actor::behavior_type balancer(self_ptr self, balancer_args args) {
  auto& st = self->state;
  st.last_epoch = args.cluster.train.epochs - 1;
  st.model = learning::make_classifier(args.cluster.train.model, args.cluster.seed);
  st.names = learning::parameter_names(*st.model);
  st.like = learning::parameters(*st.model);
  st.args = std::move(args);
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& [name, entry] : st.platforms)
      if (entry.up && entry.handle.address() == dm.source) {
        entry.up = false;
        if (!st.finished)
          spdlog::warn("balancer: platform {} on node {} is down ({}); {} platforms left", name,
                       entry.node, caf::to_string(dm.reason), st.up());
      }
    if (!st.finished)
      check_epochs(self);
  });
  return {
    [self](join_atom, const std::string& name, const std::string& node, caf::actor handle) {
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
      if (i != st.platforms.end() && i->second.handle == h)
        return;
      self->monitor(h);
      st.platforms[name] = platform_entry{node, h, true, {}};
      st.platforms[name].progress.platform = name;
      spdlog::info("balancer: platform {} joined from node {} ({}/{})", name, node,
                   st.platforms.size(), expected.size());
      if (!st.started && st.platforms.size() == expected.size())
        start(self);
    },
    [self](report_atom, const bytes& buf) {
      auto& st = self->state;
      try {
        auto env = messages::decode(buf, st.args.cluster.id);
        auto& r = std::get<messages::epoch_report>(env.payload);
        auto i = st.platforms.find(r.platform);
        if (i != st.platforms.end())
          i->second.progress = r;
        st.reports[r.epoch][r.platform] = r;
        st.all_reports.push_back(r);
      } catch (const std::exception& e) {
        spdlog::warn("balancer: refused a report: {}", e.what());
        return;
      }
      check_epochs(self);
    },
    [self](progress_atom, const bytes& buf) {
      auto& st = self->state;
      try {
        auto env = messages::decode(buf, st.args.cluster.id);
        auto& r = std::get<messages::epoch_report>(env.payload);
        auto i = st.platforms.find(r.platform);
        if (i != st.platforms.end())
          i->second.progress = r;
      } catch (const std::exception& e) {
        spdlog::debug("balancer: refused a progress message: {}", e.what());
      }
    },
    [self](tick_atom) {
      auto& st = self->state;
      if (st.finished)
        return;
      if (st.args.interactive) {
        std::fprintf(stderr, "\r\033[K%s", progress_line(st).c_str());
        std::fflush(stderr);
      } else if (std::chrono::duration<double>(clock::now() - st.last_line).count() >= 10.0) {
        st.last_line = clock::now();
        spdlog::info("{}", progress_line(st));
      }
      self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
    },
  };
}

} // namespace

balancer_actor spawn_balancer(caf::actor_system& sys, balancer_args args) {
  return sys.spawn(balancer, std::move(args));
}

} // namespace eg::actors
