#pragma once
// The cluster configuration: built-in defaults, then a TOML cluster file, then
// `--set key=value` overrides from the command line. No torch, no CAF here.

#include "common/error.hpp"
#include "config/registry.hpp"

#include <cstdint>
#include <ostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace eg::config {

/// A configuration that cannot be used; what() names the key (and the line
/// where the TOML parser gives one). Launchers exit with code 2 on it.
class config_error : public failure<errc::bad_config> {
public:
  using failure::failure;
};

// -- enumerations: parsed once here; elsewhere compared as values --------------

enum class schedule : uint8_t { sync, async };  ///< epoch barrier, or none
/// How gossip travels between nodes: the weights lane, or CAF messages.
enum class transport : uint8_t { lane, middleman };
/// What a node does when its store cannot write.
enum class store_failure_action : uint8_t { continue_training, stop };
/// What a platform trains on when r_i < 1: highest-loss aggregated subsets,
/// or a random share.
enum class selection : uint8_t { loss, random };
/// How a merge mixes two models: by gossip weight, or by gossip weight
/// times each one's share r of its data.
enum class merge_rule : uint8_t { gossip, rate };

/// The name of each value, as in cluster files ("gosgd-async", "continue" ...).
const std::vector<const char*>& names_of(schedule);
const std::vector<const char*>& names_of(transport);
const std::vector<const char*>& names_of(store_failure_action);
const std::vector<const char*>& names_of(selection);
const std::vector<const char*>& names_of(merge_rule);
template <class E, class = decltype(names_of(E{}))>
const char* to_string(E value) {
  return names_of(E{})[static_cast<size_t>(value)];
}
template <class E, class = decltype(names_of(E{}))>
std::ostream& operator<<(std::ostream& os, E value) {
  return os << to_string(value);
}

/// Emulated and real heterogeneity of one platform (README, "Cluster files";
/// Han et al., IEEE TPDS 2021).
struct interference_step {
  double at_seconds = 0;  ///< from the start of training
  double slowdown = 1;    ///< slowdown factor from then on
};

struct platform_config {
  std::string name;        ///< unique in the cluster, e.g. "p0"
  int threads = 1;         ///< torch intra-op threads of this platform's node
  double share = 0;        ///< fraction of the training set; 0 = equal split of what is left
  double slowdown = 1;     ///< works this many times slower (idles in proportion to compute)
  std::vector<interference_step> interference;  ///< slowdown changes over time
  /// "cpu", or "cuda" / "cuda:N" for a GPU (needs a build against a CUDA
  /// LibTorch; the node refuses to start otherwise).
  std::string device = "cpu";
  /// The platform's own data directory: it trains on exactly that (its
  /// node's other platforms split the node's data). Empty: a part of its
  /// node's data.
  std::string data_dir;
  /// Its format ("" = the node's, else data.format) and test data (added to
  /// its node's test data).
  std::string data_format;
  std::string test_dir;
};

/// A real co-running load on the node's machine: stress-ng workers started
/// `at_seconds` after the node starts and stopped at `until_seconds` (0: at
/// the end of the run), like the paper's MapReduce co-runners.
struct corunner_config {
  std::string kind = "cpu";  ///< "cpu", "disk" (hdd) or "network" (sock, on loopback)
  int workers = 1;
  double at_seconds = 0;
  double until_seconds = 0;
};

/// A change of a node's CPU limit: from `at_seconds` after the node starts,
/// its process gets `cores` (0: no limit from then on).
struct cpu_step {
  double at_seconds = 0;
  double cores = 0;
};

struct node_config {
  std::string name;                ///< unique in the cluster
  std::string host = "127.0.0.1";  ///< address the node listens on and peers dial
  uint16_t port = 0;               ///< 0: pick a free port (single-node runs)
  std::vector<platform_config> platforms;
  std::vector<corunner_config> corunners;
  /// A real limit on the CPU time of the node's process (all its threads
  /// together), in cores: 0.5 is half of one core. 0: none; else at least
  /// 0.01. A limit above the machine's cores limits nothing. Enforced by
  /// system/cpu_limit.hpp as cluster_config::cpu_limiter says; needs the
  /// node in a process of its own.
  double cpu_limit = 0;
  std::vector<cpu_step> cpu_schedule;  ///< the limit changes over time
  /// The node's own data directory (its platforms split it among them);
  /// empty: the cluster's data.dir, partitioned among every platform.
  /// `edgegossip node --data DIR` overrides it.
  std::string data_dir;
  /// Its format ("" = data.format) and test data ("" = data.test_dir rules).
  std::string data_format;
  std::string test_dir;
  /// Where its weights lane listens (transport = "lane"): -1 (unset) = the
  /// node's port + 1 (a free one where the node's port is 0); 0 = any free
  /// port. lane_port_of() gives it.
  int lane_port = -1;
  /// Where it serves Prometheus' /metrics on its host; 0 = not served.
  uint16_t metrics_port = 0;
  /// It joined a running cluster (`edgegossip node --join`) instead of being
  /// listed in the cluster file: it comes after the file's nodes in every
  /// order (dialling, the balancer's succession), takes no part in the
  /// cluster's data partition and does not change the run's fingerprint.
  bool joined = false;
};

/// The port node `n`'s weights lane listens on (0: any free one).
uint16_t lane_port_of(const node_config& n);

struct data_config {
  std::string name = "fashion-mnist";
  std::string dir = "/usr/share/datasets/fashion-mnist";
  /// "auto", "idx", "cifar", "image-folder", "csv", "npy" or "torch"
  /// (data/readers.hpp).
  std::string format = "auto";
  /// The test data: empty = the data directory's own test split (its test/
  /// or validation/ folder, or the format's test files).
  std::string test_dir;
  /// > 0: hold out this share of each node's training data as its test data
  /// (where it has none of its own).
  double validation = 0;
  /// The cluster's classes by output; empty: the balancer node's data's.
  std::vector<std::string> classes;
  /// Images of another size than the cluster's are resized (else refused).
  bool resize = true;
  /// A sample that cannot be read: "skip" (counted, warned) or "fail".
  std::string on_bad_sample = "skip";
  /// CSV: the label column by name or number; empty: label/class/target/y,
  /// else the last.
  std::string label_column;
  /// Random crop and horizontal flip of training images, seeded.
  bool augment = false;
  std::string partition = "iid";   ///< "iid" or "dirichlet" (label skew)
  double alpha = 0.5;              ///< Dirichlet concentration for "dirichlet"
  int64_t train_samples = 0;       ///< 0: the whole training set; else the first N
  int64_t test_samples = 0;        ///< 0: the whole test set; else the first N
};

struct train_config {
  /// A model of config::models() ("lenet5", "logreg", "mlp", "alexnet",
  /// "conv8", "squeezenet", "mobilenetv2"), or "torchscript:PATH" (a model
  /// scripted in Python).
  std::string model = "lenet5";
  double lr = 0.01;
  double momentum = 0.9;
  int64_t batch = 64;
  uint32_t epochs = 5;
  int64_t max_iterations = 0;      ///< per platform per epoch; 0 = no cap
  /// Each platform evaluates its own model on the test set after every this
  /// many epochs (and after the last); 0 = never. Monitoring, not training:
  /// `bench tta` sets 0 for every strategy, so that its training clock holds
  /// training only (it evaluates the averaged model between epochs).
  int64_t evaluate_every = 1;
  /// The balancer averages the platforms' models, and every node tests the
  /// average, after every this many epochs and after the last; 0 = after
  /// the last only. In between an epoch ends with the platforms' reports:
  /// no model moves (an average moves every platform's model across its
  /// link once: AlexNet's 3.6 MB hold an epoch's end 15 s on a 2 Mbit/s
  /// uplink), and push-sum's weights are put right at the next average.
  int64_t average_every = 1;
  /// The learning rate by epoch: "constant" (`lr` throughout) or "cosine"
  /// (learning::scheduled_lr: from `lr` in the first epoch down to nearly 0
  /// in the last).
  std::string lr_schedule = "constant";
  /// Epochs over which the learning rate rises linearly, step by step, from
  /// nearly 0 to the schedule's (learning::warmup_factor); 0: none.
  double lr_warmup = 0;
  /// A gossip platform whose training loss is not a finite number, or
  /// whose average passes 10 x a uniform guess's (its model ran away), goes
  /// back to its newest checkpoint of the run (where it began, before its
  /// first) with its learning rate x rollback_lr_factor; after
  /// max_rollbacks it leaves the run, as a platform whose node died does.
  int64_t max_rollbacks = 4;
  double rollback_lr_factor = 0.5;
};

struct strategy_config {
  /// The training mode, one of config::strategies(): "gosgd"
  /// (epoch-synchronous unless the schedule says otherwise), "gosgd-async"
  /// (GoSGD, asynchronous schedule), "edgegossip" (GoSGD gossip plus the
  /// predictor, balancer and accuracy-aware trainer), "sgp" (push-sum SGD),
  /// "sparse-push" (push-sum with top-k messages), "scsp" (Sparse-Push with
  /// skew compensation), and the parameter server's "bsp", "ssp", "async",
  /// "adacomm" and "adsp" (docs/ALGORITHMS.md).
  std::string name = "gosgd";
  /// EdgeGossip only: the gossip under its plans, "gosgd" (the paper's) or
  /// one of the push-sum family, "sgp", "sparse-push" or "scsp" (the
  /// balancer's shares with Sparse-Push's messages; docs/ALGORITHMS.md,
  /// "EdgeGossip over push-sum").
  std::string gossip = "gosgd";
  config::schedule schedule = schedule::sync;
  /// Who sends to whom: "uniform" (`out_peers` peers drawn uniformly at
  /// random among the live ones every iteration; GoSGD's rule with 1),
  /// "exponential" (the directed, time-varying 1-peer exponential graph of
  /// SGP), "ring" (directed) or "full" (every live peer): one of
  /// config::topologies().
  std::string topology = "uniform";
  /// GoSGD's p. More exchange pulls platforms toward stale models: in the
  /// default run the averaged model reached 0.868 / 0.864 / 0.854 / 0.843 /
  /// 0.827 after 5 epochs with p = 0.02 / 0.05 / 0.1 / 0.2 / 1 (README).
  double exchange_probability = 0.05;
  /// Peers per message round of the "uniform" topology.
  int64_t out_peers = 1;
  /// Sparse-Push and SCSP: the share of each tensor's entries a message
  /// carries (top-k by magnitude, at least one entry a tensor).
  double density = 0.01;
  /// Sparse-Push and SCSP: the consensus step gamma (docs/ALGORITHMS.md,
  /// "Sparse-Push"); 1 with density 1 is push-sum on a fixed graph.
  double consensus_step = 1;
  /// Sparse-Push and SCSP: values on the wire as "sign" (one bit a value and
  /// a binary16 scale a tensor), "float8" (E5M2: one byte, 2 mantissa bits),
  /// "float16" or "float32"; what rounding leaves out stays in the edge's
  /// residual and goes with a later message. Signs sent 8x fewer value
  /// bytes than float8 for the same accuracy within the seeds' spread
  /// (bench/README.md, "traffic").
  std::string sparse_values = "sign";
  /// SCSP: how much of the previous steps the correction keeps (beta of
  /// its leaky integral of what the messages moved the model by).
  double drift_memory = 0.98;
  /// SCSP: how far the correction answers the messages' pull (g: a share
  /// g / (1 + g) of a platform's steady drift is taken out of its steps).
  double drift_gain = 2.5;
  /// Push-sum family: tau of tau-overlap SGP. Before its step k + 1 a
  /// platform waits for the messages its in-neighbours sent at iteration
  /// k + 1 - tau (at most `defaults::overlap_wait` for a silent one); 0
  /// waits for nobody (fully asynchronous push-sum). -1 (the default): 1
  /// for SGP, Sparse-Push and SCSP on their own and for EdgeGossip over
  /// SGP; 0 for EdgeGossip over Sparse-Push or SCSP, whose plans give every
  /// platform the same rounds in the same time and whose epoch barrier
  /// bounds how far one runs ahead: a wait there only adds the scheduling
  /// noise of the slowest. Dense messages need the wait: without it they
  /// queue faster than the lanes deliver them, the weight they carry is
  /// held by no platform, and steps taken on little weight barely count
  /// (docs/ALGORITHMS.md, "EdgeGossip over push-sum").
  int64_t overlap = -1;
  /// Push-sum family: local steps per gossip round. A platform sends after
  /// every `gossip_every`-th step only (the steps between are local SGD), and
  /// the topology's schedule and the overlap wait count these rounds. 1:
  /// after every step, as in SGP.
  int64_t gossip_every = 1;
  /// Parameter server: the node that hosts it ("": the balancer's node).
  std::string server;
  /// Parameter server: local steps between two commits of bsp, ssp and
  /// async; ADACOMM's tau_0; ADSP's before its first check (the ADSP
  /// authors' 40).
  int64_t commit_steps = 40;
  /// SSP: how many commits a worker may run ahead of the slowest live one
  /// (1 commit = commit_steps = 40 steps, the authors' SSP baseline's 40).
  int64_t staleness = 1;
  /// ADSP: the check period Gamma in seconds (also ADACOMM's period of
  /// checks) and the least time between two commits. 0: measured from the
  /// workers' steps (Gamma 1.5 commit_steps steps of the median worker, the
  /// least interval Gamma / 6: the paper's 60 s and 10 s for workers whose
  /// step takes about a second); a min_interval of 0 with a check_period
  /// set is check_period / 6.
  double check_period = 0;
  double min_interval = 0;
  /// ADSP: the training loss the scheduler's reward is the time to (the
  /// fitted loss curve's; the paper's 0.7 is CIFAR-10's).
  double target_loss = 0.35;

  /// What the registry says of `name` (config::strategies()); throws
  /// std::invalid_argument for a name it does not hold.
  const strategy_traits& traits() const { return strategies().at(name); }
  /// True for the parameter-server strategies.
  bool parameter_server() const { return traits().family == strategy_family::parameter_server; }
  /// True when platforms run without an epoch barrier (gosgd-async, every
  /// parameter-server strategy but BSP, or any with schedule "async").
  bool asynchronous() const { return schedule == schedule::async || traits().asynchronous; }
  /// True when the predictor, balancer and accuracy-aware trainer are on.
  bool edgegossip() const { return traits().balanced; }
  /// The gossip's arithmetic: `gossip` under EdgeGossip, else `name`.
  const std::string& rule() const { return edgegossip() ? gossip : name; }
  /// True when the gossip is of the push-sum family (weights that sum to
  /// the platforms): sgp, sparse-push, scsp, or EdgeGossip over one of them.
  bool push_sum() const {
    return strategies().at(rule()).family == strategy_family::push_sum;
  }
  /// The tau of the overlap wait in force: `overlap`, or for -1 its
  /// default (0 under EdgeGossip with sparse messages, else 1).
  int64_t overlap_tau() const {
    if (overlap >= 0)
      return overlap;
    return edgegossip() && strategies().at(gossip).sparse ? 0 : 1;
  }
};

/// EdgeGossip's parameters (docs/ALGORITHMS.md, "EdgeGossip"; Han et al., IEEE TPDS 2021).
struct edgegossip_config {
  std::string aggregator = "svd-kmeans";  ///< "svd-kmeans", "isvd-lsh" or "hash-kmeans"
  int64_t aggregation_ratio = 10;          ///< points per aggregated point
  /// What a platform trains on when r_i < 1: "loss" (the accuracy-aware
  /// trainer: highest-loss aggregated subsets) or "random" (a random r_i of
  /// the shard; the balancer alone).
  config::selection selection = selection::loss;
  /// How a merge mixes two models: "gossip" (GoSGD's rule, by gossip
  /// weight) or "rate" (by gossip weight times the share r of its data each
  /// platform trains per epoch, so a platform on a small share pulls its
  /// peers less; the gossip weights still add up as GoSGD's do).
  merge_rule merge = merge_rule::rate;
  double p_threshold = 0.001;              ///< a platform slower than this has failed
  double f_threshold = 0.1;                ///< failed share that triggers exception handling
  /// The epoch deadline (synchronous schedule): once the first platform has
  /// finished an epoch, a platform still training after `deadline` times
  /// the longer of that time and the planned epoch time ends its epoch
  /// there, so a platform that slowed down after the plan (its co-runners
  /// came, its CPU quota fell) holds the others back by at most that much.
  /// 0: off (Algorithm 1's plan alone).
  double deadline = 1.5;
  /// Plans count the network: each platform's epoch is its training and
  /// its messages on its link (the predictor's seconds per byte of its
  /// node's weights lane, times the bytes of its last epoch), so a platform
  /// behind a slow link gets a share it can train and send in time
  /// (docs/ALGORITHMS.md, "Plans that count the network"). Platforms
  /// without a lane (one process) have no link to count. false: compute
  /// alone, the paper's Algorithm 1.
  bool count_network = true;
  /// The share r each platform trains in its first epoch, before the
  /// predictor has seen it train: that epoch measures the platforms, and
  /// under push-sum's rounds (or GoSGD's on one slow link) the fastest wait
  /// for the slowest through it. 1: the whole shard, as in the paper.
  double first_epoch_share = 0.25;
};

/// TLS for every node connection (libcaf_openssl) and the weights lane:
/// PEM files; all three set, or none (plain TCP).
struct tls_config {
  std::string certificate;  ///< this node's certificate (chain), signed by `ca`
  std::string key;          ///< its private key
  std::string ca;           ///< the cluster's CA: peers must present a certificate it signed
  bool enabled() const { return !certificate.empty(); }
};

/// One model split across machines (docs/SPLIT.md): its layers cut into
/// contiguous stages, each on a node.
struct split_config {
  /// "off" (gossip training of platforms), "backprop" (the true gradient
  /// flows down; every stage waits), "synthetic" (every stage but the last
  /// updates at once from its synthetic-gradient module), "delayed"
  /// (pipelined backpropagation: the true gradient, a few batches late),
  /// "stashed" (the same with PipeDream's weight stashing: the gradient at
  /// the parameters the forward pass ran on, no second forward pass),
  /// "predicted" (stashed, the forward pass on the parameters predicted for
  /// when its gradient is applied) or
  /// "corrected" (synthetic at once, corrected by the true gradient when it
  /// comes). learning::stage_mode; docs/SPLIT.md says which to pick.
  std::string mode = "off";
  std::string model = "conv8";  ///< "lenet5", "conv8" or "vgg11"
  int64_t in_flight = 4;        ///< all modes but backprop: batches in the pipeline at once
  /// All modes but backprop: the order a stage serves its batches in.
  /// "arrival": as they come; "1f1b": PipeDream's one forward, one backward
  /// (stage K of the pipeline holds at most in_flight - K batches, a
  /// forward while it holds fewer, else a backward, waiting for the one it
  /// needs), so a seed's run trains the same in every run
  /// (actors::stage_args::forward_limit).
  std::string schedule = "arrival";
  /// All modes but backprop: steps over which each stage's learning rate
  /// rises linearly to train.lr (learning::stage_options::lr_warmup; 0: off);
  /// a stage's checkpoint keeps its steps, so a restarted node goes on.
  int64_t lr_warmup = 0;
  /// How the warm-up scales a step: "linear" (from 0, every step alike) or
  /// "delay" (PipeMare's rule: lr / d^(1 - step/lr_warmup) for a gradient d
  /// of the stage's steps late; one on time at the full rate).
  /// learning::stage_options::lr_warmup_by_delay.
  std::string lr_warmup_rule = "linear";
  int64_t sg_hidden = 64;       ///< hidden units of the synthetic-gradient modules
  double sg_lr = 3e-4;          ///< their Adam learning rate
  bool sg_conditioned = true;   ///< cDNI: the modules see the labels
  /// Modules for convolutional activations: 0, an MLP on the flattened
  /// activation; 2 or 3, that many 5x5 same-padded convolutions (DNI's).
  int64_t sg_conv_layers = 0;
  /// Batches not done after this many seconds without progress (a message
  /// lost on the way) are sent again.
  double resend_after = 30;
  /// Stages watch their gradients and the loss (learning::runaway_guard);
  /// when one runs away, every stage goes back to its last checkpoint with
  /// its learning rate x rollback_lr_factor, and the epoch starts again;
  /// after max_rollbacks the run stops with an error.
  bool runaway_guard = true;
  int64_t max_rollbacks = 4;
  double rollback_lr_factor = 0.5;
  /// A model whose loss has not gone below a uniform guess's in this many
  /// optimizer steps is stuck (dead units, a rate too high to start at) and
  /// rolled back the same way; 0: never.
  int64_t stuck_after = 2000;
  bool enabled() const { return mode != "off"; }
};

/// A stage of a split model: the next `layers` layers of the model, on `node`.
struct stage_config {
  std::string node;
  int64_t layers = 1;
  double slowdown = 1;  ///< works this many times slower, as a platform's slowdown
};

struct cluster_config {
  std::string id = "edgegossip";   ///< messages from another cluster id are refused
  uint64_t seed = 1;
  std::string balancer_node;       ///< node hosting the balancer; "" = first node
  std::string storage_dir = "edgegossip-data";  ///< one RocksDB per node below it
  std::string output_dir = "runs"; ///< run directories (metrics CSV, final model)
  std::string secret;              ///< optional cluster secret required to join
  /// How gossip messages travel between nodes: "lane" (the weights lane,
  /// messages/lane.hpp) or "middleman" (CAF messages, as everything else).
  config::transport transport = transport::lane;
  /// How a node's cpu_limit is enforced: "cgroup" (a child cgroup with a CPU
  /// quota, cgroup v2 or else v1's cpu controller), "cpulimit" (the cpulimit
  /// program stops and continues the process) or "auto" (cgroup, else cpulimit).
  std::string cpu_limiter = "auto";
  /// Platforms that must have joined for a new run to start (0: all of
  /// them); the others join the running run when their nodes start.
  int64_t quorum = 0;
  /// Nodes a side of a cut network must reach (itself included) to start or
  /// continue the balancer or the parameter server; 0: more than half of the
  /// nodes, an even split going to the side of cluster.balancer's node. The
  /// other side's platforms wait for it, so that a run never splits in two.
  int64_t majority = 0;
  /// Liveness: every node connection carries a heartbeat this often
  /// (seconds); a peer from which nothing arrived for `peer_timeout` seconds
  /// is down for gossip and for the epoch barrier, as a node whose process
  /// ended (CAF's middleman.heartbeat-interval / connection-timeout).
  double heartbeat_interval = 1.0;
  double peer_timeout = 6.0;
  /// Gossip over a slow link: at most `gossip_queue` messages wait for each
  /// peer, and one that waited `gossip_max_wait` seconds is skipped (and
  /// counted) instead of sent late.
  int64_t gossip_queue = 4;
  double gossip_max_wait = 2.0;
  /// What a node does when its store cannot write (disk full, read-only,
  /// removed): "continue" training without checkpoints, or "stop" the run.
  /// Either way the node exits with code 3 naming the store.
  store_failure_action on_store_failure = store_failure_action::continue_training;
  tls_config tls;
  data_config data;
  train_config train;
  strategy_config strategy;
  edgegossip_config edgegossip;
  split_config split;
  std::vector<node_config> nodes;
  /// The stages of a split model, first to last (split.mode not "off").
  std::vector<stage_config> stages;



  /// The node of that name; throws config_error naming it when absent.
  const node_config& node(const std::string& name) const;
  /// The node hosting the balancer.
  const node_config& balancer() const;
  /// The node hosting the parameter server (strategy.server, else the
  /// balancer's).
  const node_config& server() const;
  /// The nodes' names, in file order.
  std::vector<std::string> node_names() const;
  /// All platforms of the cluster, in node order.
  std::vector<platform_config> platforms() const;
  /// The platforms of the nodes listed in the cluster file (not of those
  /// that joined), in node order: the cluster's data partition.
  std::vector<platform_config> file_platforms() const;
};

/// The node of that name among `nodes` (of cluster `cluster_id`); throws
/// config_error naming it when absent.
const node_config& find_node(const std::vector<node_config>& nodes, const std::string& name,
                             const std::string& cluster_id);
/// The names of `nodes`, in their order.
std::vector<std::string> node_names(const std::vector<node_config>& nodes);

/// The embedded default: one node "local" with 4 platforms p0..p3, LeNet-5,
/// Fashion-MNIST IID, GoSGD epoch-synchronous, 5 epochs.
cluster_config default_config();

/// Parses a TOML document (`origin` names it in errors) on top of the
/// defaults; throws config_error naming the key and line.
cluster_config parse(const std::string& toml_text, const std::string& origin);

/// Reads and parses a cluster file; throws config_error naming the path.
cluster_config load(const std::string& path);

/// Applies one `key=value` override (dotted keys as in the file, e.g.
/// `train.epochs=3`, `strategy.name=gosgd`); throws config_error.
void apply_override(cluster_config& cfg, const std::string& assignment);

/// Checks every field (ranges, enumerations, unique names, shares summing to
/// at most 1, balancer node exists ...); throws config_error naming the key.
void validate(const cluster_config& cfg);

/// The configuration as a TOML document (written into run directories).
std::string to_toml(const cluster_config& cfg);

/// One node as a `[[nodes]]` TOML section (a joining node's description;
/// the members a node learnt, concatenated, in its store).
std::string member_toml(const node_config& node);
/// The `[[nodes]]` sections of a TOML document that holds nothing else,
/// each checked as in a cluster file; throws config_error naming `origin`.
std::vector<node_config> parse_members(const std::string& toml_text, const std::string& origin);

/// A short digest of the settings a run's checkpoints depend on (cluster id,
/// seed, data, model and optimizer, strategy, platforms and their shares; not
/// the number of epochs, addresses, directories or heterogeneity, CPU limits
/// included). A node
/// resumes saved checkpoints only for a run with the same fingerprint.
std::string run_fingerprint(const cluster_config& cfg);

/// The settings a node's platforms must share with the cluster to join its
/// run, as "key=value" lines: the model, the strategy and its gossip and
/// schedule by name, then the run's fingerprint (every other setting the
/// run depends on). A platform carries its node's to the balancer.
std::string join_settings(const cluster_config& cfg);

/// What differs between the cluster's join_settings (`cluster`) and a
/// joining platform's (`theirs`), in words a user can act on ("train.model
/// is mlp there, lenet5 in the cluster"; where only the fingerprint
/// differs, that the other run settings do); "" when they agree, or when
/// either is empty (a node that does not say).
std::string join_settings_differences(const std::string& cluster, const std::string& theirs);

/// The whole cluster of `cfg` as a single node "local" hosting every
/// platform and the balancer (what `edgegossip run` executes).
cluster_config as_one_process(const cluster_config& cfg);

} // namespace eg::config
