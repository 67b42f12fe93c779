// `edgegossip bench NAME`: the command line of every benchmark, kept here so
// that adding a benchmark touches bench/ only.

#include "bench/bench.hpp"
#include "config/config.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

namespace eg::bench {

struct cli_state {
  options opt;
  tta_options tta_opt;
  traffic_options traffic_opt;
  std::vector<double> target;
  bool no_processes = false;
  transport_options transport_opt;
  aggregation_options aggregation_opt;
  predictor_options predictor_opt;
  scale_options scale_opt;
  split_options split_opt;
  std::string name;
};

/// The options of transport, aggregation, predictor, scale and split, and
/// those every benchmark shares (models, device, samples, threads, data,
/// output).
void add_other_options(CLI::App* bench, cli_state& state) {
  auto* st = &state;
  bench->add_option("--rounds", st->transport_opt.rounds,
                    "transport: bursts per model size (default 20 / 10 / 6 / 3)");
  bench->add_flag("--transport-peer", st->transport_opt.peer)->group("");  // the second process
  bench->add_option("--combinations", st->aggregation_opt.combinations,
                    "aggregation: aggregator combinations (default: all three)");
  bench->add_option("--ratios", st->aggregation_opt.ratios,
                    "aggregation: aggregation ratios (default 5 10 20)");
  bench->add_option("--iterations", st->predictor_opt.iterations,
                    "predictor: LeNet-5 iterations per epoch (default 234: a platform's shard of the default cluster)");
  bench->add_option("--epochs-per-level", st->predictor_opt.epochs_per_level,
                    "predictor: epochs under each co-runner level (default 3)");
  bench->add_option("--replay", st->predictor_opt.replay,
                    "predictor: replay a recorded run (the directory of its predictor.csv and "
                    "observations.csv) through the predictor as it is now");
  bench->add_option("--platforms", st->scale_opt.platforms,
                    "scale: platforms in one process, one run each (default 16 256 1024)");
  bench->add_option("--nodes", st->scale_opt.nodes,
                    "scale: node processes on 127.0.0.1 (default 8; 0 skips)");
  bench->add_option("--scale-platforms", st->scale_opt.child_platforms)->group("");
  bench->add_option("--model", st->split_opt.model, "split: model to split (lenet5, conv8, vgg11; default conv8)")
    ->check(CLI::IsMember({"lenet5", "conv8", "vgg11"}));
  bench->add_option("--in-flight", st->split_opt.in_flight,
                    "split: batches in the pipeline at once in every mode but backprop (default 4; 0: "
                    "for each setup, as many as fill its stages, from their predicted times: "
                    "PipeDream's NOAM)")
    ->check(CLI::Range(0, 64));
  bench->add_option("--stage-lr-warmup", st->split_opt.stage_lr_warmup,
                    "split: steps over which each stage's learning rate rises linearly to its value, "
                    "in every mode but backprop (default 0: off)")
    ->check(CLI::NonNegativeNumber);
  bench->add_option("--stage-lr-warmup-rule", st->split_opt.stage_lr_warmup_rule,
                    "split: how the warm-up scales a step: linear (from 0, the default) or delay "
                    "(PipeMare's rule: lr / d^(1 - s/N) for a gradient d steps late, one on time "
                    "at the full rate)")
    ->check(CLI::IsMember({"linear", "delay"}));
  bench->add_option("--modes", st->split_opt.modes,
                    "split: modes to measure (default backprop synthetic; also delayed, stashed, "
                    "predicted, corrected); each is compared with backprop")
    ->check(CLI::IsMember({"backprop", "synthetic", "delayed", "corrected", "stashed",
                           "predicted"}));
  bench->add_option("--only", st->split_opt.only,
                    "split: only the setups whose name contains this (e.g. 'unequal', '2 stages')");
  bench->add_option("--sg-hidden", st->split_opt.sg_hidden,
                    "split: hidden width of the synthetic-gradient modules (default: theirs, 256)")
    ->check(CLI::Range(1, 4096));
  bench->add_option("--sg-conv-layers", st->split_opt.sg_conv_layers,
                    "split: modules after convolutions: 0 an MLP (default), 2 or 3 5x5 "
                    "same-padded convolutions")
    ->check(CLI::IsMember({0, 2, 3}));
  auto* cut_by_speed =
    bench->add_flag("--cut-by-speed", st->split_opt.cut_by_speed,
                    "split: also the unequal setups cut where each layer's measured time and the "
                    "stages' slowdowns balance the stages");
  bench->add_flag("--place-by-speed", st->split_opt.place_by_speed,
                  "split: with --cut-by-speed, also order the machines along the pipeline by "
                  "those times (a slow machine may take the first layers)")
    ->needs(cut_by_speed);
  bench->add_option("--schedule", st->split_opt.schedule,
                    "split: the order the stages serve batches in: arrival (as they come, the "
                    "default) or 1f1b (PipeDream's one forward, one backward: the same steps in "
                    "every run of a seed)")
    ->check(CLI::IsMember({"arrival", "1f1b"}));
  bench->add_option("--plan-from", st->split_opt.plan_from,
                    "split: with --cut-by-speed, plan on the stages' costs (each run of layers "
                    "timed as a stage of the mode, with its step, stash and loss: the default) or "
                    "the layers' (each timed alone, summed)")
    ->check(CLI::IsMember({"stages", "layers"}))
    ->needs(cut_by_speed);
  bench->add_option("--cuts2", st->split_opt.cuts2, "split: 2 stages, cut after this layer");
  bench->add_option("--cuts3", st->split_opt.cuts3, "split: 3 stages, cut after these layers");
  bench->add_option("--unequal2", st->split_opt.unequal2,
                    "split: slowdowns of 2 unequal stages (default 1 4)");
  bench->add_option("--cuts4", st->split_opt.cuts4,
                    "split: also 4 stages, cut after these 3 layers (default: none)");
  bench->add_option("--unequal4", st->split_opt.unequal4,
                    "split: slowdowns of 4 unequal stages (default 1 2 4 4)");
  bench->add_option("--unequal3", st->split_opt.unequal3,
                    "split: slowdowns of 3 unequal stages (default 1 2 4)");
  bench->add_option("--models", st->opt.models,
                    "framework, aggregation, topk: models to measure (default lenet5 alexnet "
                    "squeezenet mobilenetv2)")
    ->check(CLI::IsMember({"lenet5", "logreg", "alexnet", "conv8", "squeezenet", "mobilenetv2"}));
  bench->add_option("--device", st->opt.device,
                    "framework: cpu (default), or cuda / cuda:N: a platform on that GPU against "
                    "a bare loop there");
  bench->add_option("--batches", st->opt.batches,
                    "framework on a GPU: batch sizes (default 64 512)")
    ->check(CLI::PositiveNumber);
  bench->add_option("--samples", st->opt.samples,
                    "samples per measurement (split: training images; framework: default 60000 "
                    "for lenet5, 6000 for the larger models)");
  bench->add_option("--threads", st->opt.threads, "cores to use (default: all)");
  bench->add_option("--data", st->opt.data_dir, "Fashion-MNIST directory");
  bench->add_option("--out", st->opt.out_dir, "directory for results and plots");
}

/// Runs the benchmark the command line named (-1: `bench` was not given).
int run_bench(const std::shared_ptr<cli_state>& st, CLI::App* bench, CLI::Option* epochs,
              CLI::Option* strategies, CLI::Option* repeat) {
  if (!*bench)
    return -1;
  spdlog::set_pattern("[%H:%M:%S.%e] %l %v");
  spdlog::set_level(spdlog::level::warn);
  if (st->name == "tta") {
    if (st->target.size() > 1)
      throw config::config_error("bench tta: --target takes one headline target");
    if (!st->target.empty())
      st->tta_opt.target = st->target.front();
    return tta(st->opt, st->tta_opt);
  }
  if (st->name == "traffic") {
    auto& t = st->traffic_opt;
    if (epochs->count() > 0)
      t.epochs = st->tta_opt.epochs;
    if (strategies->count() > 0)
      t.strategies = st->tta_opt.strategies;
    if (repeat->count() > 0)
      t.repeat = st->tta_opt.repeat;
    t.target = st->target;
    t.overrides = st->tta_opt.overrides;
    t.processes = !st->no_processes;
    return traffic(st->opt, t);
  }
  if (st->name == "aggregation")
    return aggregation(st->opt, st->aggregation_opt);
  if (st->name == "scale") {
    if (epochs->count() > 0)
      st->scale_opt.epochs = st->tta_opt.epochs;
    return scale(st->opt, st->scale_opt);
  }
  if (st->name == "predictor")
    return predictor(st->opt, st->predictor_opt);
  if (st->name == "split") {
    auto& s = st->split_opt;
    if (epochs->count() > 0)
      s.epochs = st->tta_opt.epochs;
    if (repeat->count() > 0)
      s.repeat = st->tta_opt.repeat;
    if (!st->target.empty())
      s.target = st->target.front();
    return split(st->opt, s);
  }
  if (st->name == "transport")
    return transport(st->opt, st->transport_opt);
  if (st->name == "data")
    return data(st->opt);
  if (st->name == "topk")
    return topk(st->opt);
  return framework(st->opt);
}

std::function<int()> add_subcommand(CLI::App& app) {
  auto st = std::make_shared<cli_state>();
  auto* bench = app.add_subcommand("bench", "run a benchmark: tta (time to accuracy of GoSGD "
                                            "and EdgeGossip), traffic (bytes to accuracy of GoSGD, SGP, "
                                            "Sparse-Push and SCSP), framework (actor system against a "
                                            "bare loop), transport (weights between two "
                                            "processes against a raw socket), aggregation (input data "
                                            "aggregator costs and accuracy), predictor (prediction "
                                            "error under co-runners), scale (platforms per "
                                            "process, node processes), split (one model across "
                                            "stages: whole, backprop, synthetic gradients), data "
                                            "(image decoding, warm-cache start-up, memory per "
                                            "sample, training from bytes), topk (the selection "
                                            "of a sparse message against torch::topk)");
  bench->add_option("name", st->name, "benchmark to run")
    ->required()
    ->check(CLI::IsMember({"tta", "traffic", "framework", "transport", "aggregation", "predictor",
                           "scale", "split", "data", "topk"}));
  bench->add_option("-c,--config", st->tta_opt.config_file,
                    "tta: cluster file (default: 4 platforms, slowdowns 1 1 3 5)");
  bench->add_option("--profile", st->tta_opt.profile,
                    "tta: heterogeneity profile: static (slowdowns 1 1 3 5), shifting (load "
                    "moving between platforms), skewed (label skew), corunners (node processes, "
                    "real CPU limits and stress-ng), wan (node processes on hosts of their own "
                    "behind links of 100 5 20 10 Mbit/s, one falling during the run; needs "
                    "root), gpu (one platform on the GPU, three on a CPU core each; needs a "
                    "CUDA build); default static")
    ->check(CLI::IsMember({"static", "shifting", "skewed", "corunners", "wan", "gpu"}));
  auto* repeat = bench->add_option("--repeat", st->tta_opt.repeat,
                    "tta, traffic, split: seeds 1..N (tta, traffic: from cluster.seed), median (and range) of every figure")
    ->check(CLI::Range(1, 100));
  bench->add_option("--targets", st->tta_opt.targets,
                    "tta: target test accuracies; the highest is the headline (default: the "
                    "profile's, e.g. 0.85 0.86 0.87)");
  bench->add_option("--target", st->target,
                    "tta: headline target; the targets are it, it - 0.01 and it - 0.02; "
                    "traffic: the IID target (default 0.85) and optionally the non-IID one "
                    "(default: dense SGP's final accuracy - 0.02)")
    ->expected(1, 2);
  bench->add_option("--wall-limit", st->tta_opt.wall_limit,
                    "tta: seconds of wall time after which a strategy's node processes are "
                    "stopped and its run measured from the epochs they ended (profiles of node "
                    "processes: corunners, wan, a cluster file of several nodes)")
    ->check(CLI::NonNegativeNumber);
  auto* epochs = bench->add_option("--epochs", st->tta_opt.epochs,
                                   "tta: epochs of every strategy (default 12); traffic: "
                                   "the same (default 12); scale: epochs of every run (default 5)");
  auto* strategies = bench->add_option("--strategies", st->tta_opt.strategies,
                                       "tta: strategies to compare; traffic: gosgd, sgp, "
                                       "sparse-push:DENSITY, scsp:DENSITY, a push-sum one "
                                       "with /H to gossip every H steps, edgegossip+G... "
                                       "EdgeGossip over the push-sum strategy G (default gosgd sgp "
                                       "sparse-push:0.01 sparse-push:0.03/8 scsp:0.03/8)");
  bench->add_option("--set", st->tta_opt.overrides,
                    "tta, traffic: override a key, e.g. --set cluster.seed=2");
  bench->add_option("--alpha", st->traffic_opt.alpha,
                    "traffic: Dirichlet alpha of the non-IID setting (default 0.1)")
    ->check(CLI::PositiveNumber);
  bench->add_option("--settings", st->traffic_opt.settings,
                    "traffic: the data settings to run: both (IID, then label skew; default), "
                    "iid or non-iid")
    ->check(CLI::IsMember({"both", "iid", "non-iid"}));
  bench->add_flag("--no-processes", st->no_processes,
                  "traffic: skip the node processes (sgp and one sparse-push density over the "
                  "weights lane)");
  add_other_options(bench, *st);
  return [st, bench, epochs, strategies, repeat]() -> int {
    return run_bench(st, bench, epochs, strategies, repeat);
  };
}

} // namespace eg::bench
