#include "actors/node/resume.hpp"
#include "common/error.hpp"

#include "actors/node/node_data.hpp"
#include "actors/report_files.hpp"
#include "algorithms/split/split.hpp"
#include "models/dataset.hpp"
#include "storage/store.hpp"

#include <spdlog/spdlog.h>

#include <optional>

namespace eg::actors {

/// Resuming `run`: the platform's newest good checkpoint saved since the
/// run started, its last report and its earlier reports (for the node's
/// metrics file). Damaged checkpoints are reported and skipped.
void restore_platform(const storage::store& db, const storage::run_state& run,
                      const std::string& cluster_id, platform_args& pa,
                      std::vector<messages::epoch_report>& reports) {
  const auto& name = pa.platform.name;
  std::vector<std::string> problems;
  auto c = storage::load_latest_checkpoint(db, name, &problems);
  for (auto& p : problems)
    spdlog::warn("[{}] {}", name, p);
  if (!c || c->saved_unix + 1.0 < run.started_unix) {
    spdlog::info("[{}] no checkpoint of run {}: it starts afresh", name, run.run);
    return;
  }
  for (auto& [key, value] : db.scan(storage::family::metrics, name + "/")) {
    std::string problem;
    auto r = storage::decode_report(value, cluster_id, problem);
    if (!r) {
      spdlog::warn("[{}] saved report {} unusable: {}", name, key, problem);
      continue;
    }
    if (r->epoch >= c->epoch)
      continue;  // from an older run, or after the checkpoint
    reports.push_back(*r);
    if (r->epoch + 1 == c->epoch)
      pa.last_report = *r;
  }
  spdlog::info("[{}] resuming run {} from its checkpoint after epoch {}", name, run.run,
               c->epoch);
  pa.restore = std::make_shared<const storage::checkpoint>(std::move(*c));
}

namespace {

/// The newest usable checkpoint of stage `index` in this node's store for
/// the run of `fingerprint`; damaged ones are reported and skipped.
std::optional<stage_checkpoint> latest_stage_checkpoint(const storage::store& db, size_t index,
                                                        const std::string& fingerprint) {
  auto saved = db.scan(storage::family::checkpoints, stage_name(index) + "/");
  for (auto i = saved.rbegin(); i != saved.rend(); ++i) {
    try {
      auto c = decode_stage_checkpoint(i->second);
      if (c.fingerprint != fingerprint)
        return std::nullopt;  // the newest is of other settings: a new run
      return c;
    } catch (const std::exception& e) {
      spdlog::warn("stage {}: checkpoint {} unusable ({}); trying an older one", stage_name(index),
                   i->first, eg::describe(e));
    }
  }
  return std::nullopt;
}

} // namespace

/// A split run: the stages this node hosts, each with its layers, its
/// trainer and, resuming, its newest checkpoint; the first stage with the
/// data and the run.
std::vector<stage_args> local_stages(const config::cluster_config& cfg, const std::string& node_name,
                                     const storage::store& db, bool fresh,
                                     const std::string& data_dir) {
  const auto& model = cfg.split.model;
  // Every stage is built for the data's shape: a node hosting one reads the
  // data (the first stage trains on it).
  std::optional<loaded_data> data;
  for (auto& sc : cfg.stages)
    if (sc.node == node_name && !data)
      data = load_node_data(cfg, cfg.node(node_name), data_dir, cfg.data.classes);
  const auto shape = data ? learning::shape_of(data->train) : learning::model_shape{};
  const int64_t layers = learning::layer_count(model);
  int64_t given = 0;
  for (auto& stage : cfg.stages)
    given += stage.layers;
  if (given != layers)
    throw config::config_error("stages: the stages take " + std::to_string(given) + " layers, but "
                               + model + " has " + std::to_string(layers) + " (" +
                               [&] {
                                 std::string names;
                                 for (auto& n : learning::layer_names(model))
                                   names += (names.empty() ? "" : ", ") + n;
                                 return names;
                               }() + ")");
  learning::stage_options o;
  o.sgd.lr = cfg.train.lr;
  o.sgd.momentum = cfg.train.momentum;
  o.mode = learning::parse_stage_mode(cfg.split.mode);
  o.max_in_flight = cfg.split.in_flight + 2;
  o.lr_warmup = cfg.split.lr_warmup;
  o.lr_warmup_by_delay = cfg.split.lr_warmup_rule == "delay";
  o.synthetic.hidden = cfg.split.sg_hidden;
  o.synthetic.lr = cfg.split.sg_lr;
  o.synthetic.conditioned = cfg.split.sg_conditioned;
  o.synthetic.conv_layers = cfg.split.sg_conv_layers;
  const auto fingerprint = config::run_fingerprint(cfg);
  std::vector<stage_args> out;
  int64_t first = 0;
  for (size_t k = 0; k < cfg.stages.size(); ++k) {
    const auto& sc = cfg.stages[k];
    const int64_t last = first + sc.layers - 1;
    if (sc.node == node_name) {
      stage_args a;
      a.index = k;
      a.trainer = std::make_shared<learning::stage_trainer>(
        learning::make_stage(model, first, last, cfg.seed, shape), o, cfg.seed + 1 + k);
      a.slowdown = sc.slowdown;
      if (cfg.split.schedule == "1f1b")
        a.forward_limit = one_forward_one_backward_limit(cfg.split.in_flight, k);
      a.fingerprint = fingerprint;
      a.resend_after = cfg.split.resend_after;
      a.runaway.enabled = cfg.split.runaway_guard;
      a.runaway.max_rollbacks = cfg.split.max_rollbacks;
      a.runaway.slow = cfg.split.rollback_lr_factor;
      a.runaway.stuck_after = cfg.split.stuck_after;
      if (!fresh)
        a.restore = latest_stage_checkpoint(db, k, fingerprint);
      if (a.restore && a.restore->epochs_done >= cfg.train.epochs)
        a.restore.reset();  // that run is over: every stage starts a new one
      if (k == 0) {
        a.train_set = std::make_shared<learning::dataset>(data->train);
        if (!data->test)
          throw data::data_error("a split run evaluates on test data: " + data->test_from);
        a.test_set = std::make_shared<learning::dataset>(*data->test);
        a.batch = cfg.train.batch;
        a.in_flight = cfg.split.in_flight;
        a.seed = cfg.seed;
        // Test batches small enough for the lane: an early cut's activations
        // are large.
        a.test_batch = 250;
        a.epochs = cfg.train.epochs;
        a.run = a.restore ? a.restore->run : new_run_name(cfg.id);
      }
      spdlog::info("node {}: stage {} holds layers {}..{} of {} ({})", node_name, k, first + 1,
                   last + 1, model, cfg.split.mode);
      out.push_back(std::move(a));
    }
    first = last + 1;
  }
  return out;
}

} // namespace eg::actors
