#pragma once
// Benchmarks reachable as `edgegossip bench NAME`. Each runs its baseline in
// the same run, prints its figures and ends with a one-line summary.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace eg::bench {

/// Adds `bench NAME [options]` to the command line; the function returned runs
/// the benchmark chosen and returns its exit code, or -1 if `bench` was not given.
std::function<int()> add_subcommand(CLI::App& app);

struct options {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t samples = 0;  ///< 0: the benchmark's default
  int threads = 0;      ///< 0: every core
  std::string out_dir = "bench-results";
  /// framework, aggregation: the models measured (default: lenet5, alexnet,
  /// squeezenet, mobilenetv2).
  std::vector<std::string> models{"lenet5", "alexnet", "squeezenet", "mobilenetv2"};
  /// framework: "cpu", or "cuda" / "cuda:N": one platform on that device
  /// against a bare loop there.
  std::string device = "cpu";
  /// framework on a device: the batch sizes measured.
  std::vector<int64_t> batches{64, 512};
};

/// Training throughput inside the actor system (1, 2 and 4 platforms in one
/// process, gossip on) against a bare LibTorch loop of the same model, batch
/// and threads, for each model of options::models. With options::device a
/// GPU: one platform there (alone, and beside a CPU platform it gossips
/// with) against a bare loop on the same device, for each batch of
/// options::batches.
int framework(const options& opt);

struct tta_options {
  /// "static" (emulated slowdowns 1 1 3 5), "shifting" (slowdowns that move
  /// between platforms), "skewed" (label skew), "corunners" (node
  /// processes with real CPU limits and stress-ng co-runners) or "wan"
  /// (node processes on hosts of their own behind slow, unequal links).
  std::string profile = "static";
  std::string config_file;   ///< a cluster file instead of the profile's cluster
  /// Averaged-model test accuracies; the highest is the headline target
  /// (default: the profile's, e.g. 0.85 0.86 0.87).
  std::vector<double> targets;
  double target = 0;         ///< > 0: targets target - 0.02, - 0.01, target
  uint32_t epochs = 12;      ///< the same for every strategy
  int repeat = 1;            ///< seeds cluster.seed .. cluster.seed + repeat - 1
  std::vector<std::string> strategies{"gosgd", "gosgd-async", "edgegossip"};
  std::vector<std::string> overrides;  ///< --set key=value
  /// > 0: a strategy's node processes still running after this many seconds
  /// of wall time are stopped, and the run is measured from the epochs they
  /// ended (a strategy whose rounds wait on slow links, e.g. dense SGP on
  /// `wan`). Profiles of node processes only.
  double wall_limit = 0;
};

/// Time to accuracy of GoSGD (epoch-synchronous and asynchronous) and
/// EdgeGossip on the same cluster, data, seed and heterogeneity profile.
int tta(const options& opt, const tta_options& t);

struct traffic_options {
  /// "gosgd", "sgp", "sparse-push:DENSITY", "scsp:DENSITY" (the push-sum
  /// family on the exponential graph), or any other strategy.name.
  std::vector<std::string> strategies{"gosgd",
                                      "sgp",
                                      "sparse-push:0.01",
                                      "sparse-push:0.03/8",
                                      "scsp:0.03/8"};
  double alpha = 0.1;          ///< Dirichlet concentration of the non-IID setting
  /// The IID target and, optionally, the non-IID one (default: 0.85, and
  /// 0.02 below dense SGP's final non-IID accuracy).
  std::vector<double> target;
  int repeat = 1;              ///< seeds cluster.seed .. cluster.seed + repeat - 1
  uint32_t epochs = 12;        ///< the same for every strategy
  bool processes = true;       ///< also sgp and one sparse-push density as node processes
  /// Which data settings run: "both" (IID, then label skew), "iid" or
  /// "non-iid".
  std::string settings = "both";
  std::vector<std::string> overrides;  ///< --set key=value, for every run
};

/// Bytes to target accuracy of GoSGD, SGP, Sparse-Push and SCSP on 8
/// platforms with IID and label-skewed data, against dense SGP; then the
/// bytes on the weights lane between node processes against the count in one
/// process.
int traffic(const options& opt, const traffic_options& t);

struct transport_options {
  bool peer = false;  ///< hidden: be the second process (echo actor, raw socket server)
  int rounds = 0;     ///< bursts per model size (0: 20 / 10 / 6 / 3)
};

/// Model weights between two node processes on 127.0.0.1 (CAF middleman and
/// the Cap'n Proto codec) for 0.25, 4, 40 and 250 MB, against a plain TCP
/// socket copy of the same bytes; round-trip latency for LeNet-5.
int transport(const options& opt, const transport_options& t);

struct aggregation_options {
  std::vector<std::string> combinations{"svd-kmeans", "isvd-lsh", "hash-kmeans"};
  std::vector<int64_t> ratios{5, 10, 20};
  int64_t accuracy_ratio = 10;  ///< ratio of the aggregated points trained on alone
  int accuracy_epochs = 10;
};

/// Input data aggregator: generation time per combination and ratio, the
/// per-epoch cost of processing aggregated points as a share of a training
/// epoch, and the accuracy of a model trained on the aggregated points alone.
int aggregation(const options& opt, const aggregation_options& a);

struct predictor_options {
  /// LeNet-5 iterations (batch 64) per epoch: one platform's shard of the
  /// default cluster (15,000 points), 0.7 s on an idle core.
  int64_t iterations = 234;
  int epochs_per_level = 3;     ///< epochs under each co-runner level
  double settle_seconds = 2.0;  ///< after a level changes, before its first epoch
  uint64_t seed = 1;            ///< order of the evaluation pass
  /// A directory a run wrote (predictor.csv, observations.csv): replay it
  /// through the predictor as it is now instead of measuring.
  std::string replay;
};

/// Performance predictor: mean absolute percentage error of the predicted
/// epoch time while stress-ng co-runners change, and its cost.
int predictor(const options& opt, const predictor_options& p);

struct scale_options {
  std::vector<int> platforms{16, 256, 1024};  ///< platforms in one process, one run each
  int nodes = 8;                ///< node processes on 127.0.0.1 (0: skip)
  int platforms_per_node = 1;
  uint32_t epochs = 5;
  int64_t batch = 8;            ///< small, so 1,024 platforms train several iterations an epoch
  double exchange_probability = 0.2;
  int64_t test_samples = 1000;  ///< per evaluation of a platform's model
  int child_platforms = 0;      ///< hidden: run one in-process size in this (child) process
};

/// Platforms per process and node processes on 127.0.0.1 with logistic
/// regression: memory per platform, messages per second, and the spread of
/// the platforms' models over time.
int scale(const options& opt, const scale_options& s);

struct split_options {
  std::string model = "conv8";  ///< a splittable model (algorithms/split/split.hpp)
  uint32_t epochs = 3;
  int64_t batch = 64;
  double lr = 0.01;
  double momentum = 0.9;
  int64_t in_flight = 4;  ///< all modes but backprop: batches in the pipeline at once
  int64_t stage_lr_warmup = 0;  ///< all modes but backprop: stage_options::lr_warmup
  std::string stage_lr_warmup_rule = "linear";  ///< "linear" or "delay" (split.lr_warmup_rule)
  int64_t sg_hidden = 0;  ///< synthetic-gradient modules' hidden width (0: their default)
  int64_t sg_conv_layers = 0;  ///< after convolutions: 0 an MLP, 2 or 3 5x5 convolutions
  int repeat = 1;         ///< seeds seed .. seed + repeat - 1
  uint64_t seed = 1;
  double target = 0.85;   ///< time to this test accuracy
  std::vector<int64_t> cuts2{4};     ///< 2 stages: cut after these layers
  std::vector<int64_t> cuts3{2, 4};  ///< 3 stages
  std::vector<double> unequal2{1, 4};     ///< 2 unequal stages' slowdowns
  std::vector<double> unequal3{1, 2, 4};  ///< 3 unequal stages' slowdowns
  /// 4 stages: cut after these layers (empty: no 4-stage setups).
  std::vector<int64_t> cuts4;
  std::vector<double> unequal4{1, 2, 4, 4};  ///< 4 unequal stages' slowdowns
  /// The split modes to measure (learning::stage_mode names); backprop is
  /// the baseline the others are compared with.
  std::vector<std::string> modes{"backprop", "synthetic"};
  /// Only the setups whose name contains this ("": all), e.g. "unequal".
  std::string only;
  /// Also the unequal setups cut where the machines' speeds say
  /// (learning::balanced_cuts over each layer's measured time).
  bool cut_by_speed = false;
  /// With cut_by_speed: the machines also ordered along the pipeline by
  /// the same times (learning::balanced_placement) instead of kept in the
  /// order of --unequalN.
  bool place_by_speed = false;
  /// With cut_by_speed, what the cuts are planned on: "stages" (each run
  /// of layers timed as a stage of the planning mode: learning::
  /// measure_stage_costs) or "layers" (each layer timed alone, summed).
  std::string plan_from = "stages";
  /// The order the stages serve their batches in: "arrival" or "1f1b"
  /// (split.schedule).
  std::string schedule = "arrival";
};
/// One model trained whole, split with backpropagation, and split with
/// synthetic gradients, on 2 and 3 stages of equal and unequal speed: test
/// accuracy after the same epochs, training time, time to a target, bytes
/// between stages, idle shares; a plot of accuracy against time.
int split(const options& opt, const split_options& s);

/// The data layer on Fashion-MNIST's training images written as a PNG image
/// folder: the image-folder reader's decoding rate against a bare stbi_load
/// loop, start-up from a warm cache, resident memory per sample, and LeNet-5
/// training throughput from byte storage against float32 tensors normalised
/// beforehand. options: data_dir (Fashion-MNIST), samples (images, default
/// 60,000), threads.
int data(const options& opt);

/// The top-k selection of a sparse message (learning::top_k) against
/// torch::topk with the indices sorted, on each model of options::models
/// (Fashion-MNIST's shape) at densities 0.01, 0.02, 0.03 and 0.1: both
/// must take the same magnitudes; microseconds and their ratio.
int topk(const options& opt);

} // namespace eg::bench
