#include "actors/node/runtime.hpp"

#include "actors/balancer/balancer.hpp"
#include "system/corunners.hpp"
#include "system/cpu_limit.hpp"
#include "actors/interfaces.hpp"
#include "actors/node/metrics.hpp"
#include "actors/platform/mixer.hpp"
#include "actors/node/network.hpp"
#include "actors/node/node.hpp"
#include "actors/node/node_data.hpp"
#include "actors/platform/platform.hpp"
#include "actors/report_files.hpp"
#include "actors/stage.hpp"
#include "actors/store.hpp"
#include "data/load.hpp"
#include "algorithms/edgegossip/aggregator.hpp"
#include "messages/codec.hpp"
#include "messages/door.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "train/trainer.hpp"
#include "train/partition.hpp"
#include "algorithms/split/split.hpp"
#include "storage/store.hpp"

#include <ATen/Parallel.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <optional>
#include <malloc.h>
#include <csignal>
#include <filesystem>
#include <future>
#include <thread>
#include <zlib.h>

namespace eg::actors {

config::cluster_config as_one_process(const config::cluster_config& cfg) {
  // A CPU limit applies to a whole process: in one, it would limit every
  // node's platforms together.
  if (cfg.nodes.size() > 1)
    for (size_t i = 0; i < cfg.nodes.size(); ++i)
      if (cfg.nodes[i].cpu_limit > 0 || !cfg.nodes[i].cpu_schedule.empty())
        throw config::config_error(
          "nodes[" + std::to_string(i) + "]." +
          (cfg.nodes[i].cpu_limit > 0 ? "cpu_limit" : "cpu_schedule") + ": node '" +
          cfg.nodes[i].name + "' has a CPU limit, which applies to a whole process; cpu limits "
          "need one process per node (`edgegossip launch` or `edgegossip node`), not all " +
          std::to_string(cfg.nodes.size()) + " nodes in one");
  config::cluster_config one = cfg;
  config::node_config local;
  local.name = "local";
  local.host = "127.0.0.1";
  local.port = 0;
  if (cfg.nodes.size() == 1) {
    local.cpu_limit = cfg.nodes[0].cpu_limit;
    local.cpu_schedule = cfg.nodes[0].cpu_schedule;
  }
  for (auto& n : cfg.nodes) {
    for (auto& p : n.platforms)
      local.platforms.push_back(p);
    for (auto& c : n.corunners)
      local.corunners.push_back(c);
  }
  for (auto& n : cfg.nodes)
    if (!n.data_dir.empty())
      throw config::config_error(
        "node " + n.name + " has data of its own (nodes.data): each node reads its own "
        "directory, so start the nodes with `edgegossip launch` or `edgegossip node`, not in "
        "one process");
  one.nodes = {local};
  one.balancer_node = "local";
  for (auto& stage : one.stages)
    stage.node = "local";
  return one;
}

std::vector<double> resolved_shares(const config::cluster_config& cfg) {
  return resolve_shares(cfg.platforms());
}

void tune_allocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed threshold
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

namespace {

/// The node's port: CAF listens on loopback only, and the node's port is
/// its front door (messages/door.hpp), which hands CAF nothing from a
/// connection until it has passed the handshake. Throws when it cannot
/// listen.
std::unique_ptr<messages::front_door> open_front_door(caf::actor_system& sys,
                                                      const config::cluster_config& cfg,
                                                      const config::node_config& me,
                                                      const node_actor& node,
                                                      std::shared_ptr<admitted_names> admitted) {
  auto o = door_options_of(cfg, me.name, std::move(admitted));
  o.host = me.host;
  o.port = me.port;
  auto door = std::make_unique<messages::front_door>(std::move(o));
  door->start(publish(sys, node, "127.0.0.1", 0));
  spdlog::info("node {} listening on {}:{}{}", me.name, me.host, door->port(),
               cfg.tls.enabled() ? " (TLS)" : "");
  return door;
}

/// `cfg` with the nodes that joined it as this node's store keeps them
/// (node_members.cpp), after the cluster file's; none with `fresh`, or
/// where the store's list does not parse or fit (said in the log).
config::cluster_config with_stored_members(const config::cluster_config& cfg,
                                           const std::string& node, storage::store& db,
                                           bool fresh) {
  auto text = db.get(storage::family::runs, members_key);
  if (fresh || !text || text->empty())
    return cfg;
  auto out = cfg;
  try {
    for (auto& m : config::parse_members(*text, "the members kept in node " + node + "'s store")) {
      m.joined = true;
      auto same = std::find_if(out.nodes.begin(), out.nodes.end(),
                               [&](auto& n) { return n.name == m.name; });
      if (same == out.nodes.end())
        out.nodes.push_back(std::move(m));
      else if (same->joined)
        *same = std::move(m);  // (the cluster file now lists it: the file's entry stays)
    }
    config::validate(out);
  } catch (const config::config_error& e) {
    spdlog::warn("node {}: the nodes that joined the cluster, as its store keeps them, are left "
                 "out: {}",
                 node, e.what());
    return cfg;
  }
  std::string names;
  for (auto& n : out.nodes)
    if (n.joined)
      names += (names.empty() ? "" : ", ") + n.name;
  if (!names.empty())
    spdlog::info("node {}: nodes that joined the cluster before: {}", node, names);
  return out;
}

/// At the end of a node's run: its front door's counts (when it refused
/// anything), then the door and the routes closed.
struct doors_closer {
  std::unique_ptr<messages::front_door>& door;
  std::shared_ptr<messages::door_routes>& routes;
  ~doors_closer() {
    if (door) {
      auto s = door->stats();
      if (s.connections_refused + s.messages_refused > 0)
        spdlog::info("node port: {} connections admitted, {} refused, {} closed for an "
                     "oversized message",
                     s.connections_admitted, s.connections_refused, s.messages_refused);
      door->stop();
    }
    if (routes)
      routes->stop();
  }
};

/// The store key of a platform's aggregated points: they are reused while
/// the shard, the data (`data`: the directories read and the training data's
/// sums) and the aggregator's settings stay the same.
std::string aggregates_key(const std::string& platform, const config::cluster_config& cfg,
                           const std::vector<int64_t>& shard, const std::string& data) {
  auto settings = cfg.edgegossip.aggregator + "/" + std::to_string(cfg.edgegossip.aggregation_ratio)
                  + "/" + std::to_string(cfg.seed) + "/" + data;
  auto crc = crc32(0L, reinterpret_cast<const Bytef*>(settings.data()),
                   static_cast<uInt>(settings.size()));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(shard.data()),
              static_cast<uInt>(shard.size() * sizeof(int64_t)));
  return platform + "/" + std::to_string(shard.size()) + "-" + std::to_string(crc);
}

/// EdgeGossip's pre-training stage for the local platforms: aggregated
/// points from the store when the data and settings are unchanged, else
/// generated (platforms in parallel) and stored.
std::map<std::string, std::shared_ptr<const learning::aggregated_points>>
aggregate_local(const config::cluster_config& cfg, const std::vector<config::platform_config>& all,
                const learning::shards& shards, const learning::dataset& train,
                const std::string& data, const std::vector<std::string>& local,
                storage::store& db) {
  std::map<std::string, std::shared_ptr<const learning::aggregated_points>> out;
  std::vector<std::pair<size_t, std::future<learning::aggregated_points>>> jobs;
  auto opt = learning::aggregator_from_name(cfg.edgegossip.aggregator,
                                            cfg.edgegossip.aggregation_ratio, cfg.seed);
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::find(local.begin(), local.end(), all[i].name) == local.end())
      continue;
    auto key = aggregates_key(all[i].name, cfg, shards[i], data);
    if (auto saved = db.get(storage::family::aggregates, key)) {
      try {
        out[all[i].name] = std::make_shared<const learning::aggregated_points>(
          learning::deserialize_aggregated(*saved));
        spdlog::info("[{}] {} aggregated points reused from the store", all[i].name,
                     out[all[i].name]->size());
        continue;
      } catch (const std::exception& e) {
        spdlog::warn("[{}] stored aggregated points unusable ({}); generating again",
                     all[i].name, e.what());
      }
    }
    jobs.emplace_back(i, std::async(std::launch::async, [&train, &shards, i, opt] {
                        return learning::aggregate(train, shards[i], opt);
                      }));
  }
  for (auto& [i, job] : jobs) {
    const auto& name = all[i].name;
    auto a = job.get();
    spdlog::info("[{}] {} aggregated points ({}): reduction {:.2f} s, division {:.2f} s, "
                 "means {:.2f} s",
                 name, a.size(), cfg.edgegossip.aggregator, a.reduce_seconds, a.divide_seconds,
                 a.mean_seconds);
    try {
      db.put(storage::family::aggregates, aggregates_key(name, cfg, shards[i], data),
             learning::serialize(a));
    } catch (const storage::storage_error& e) {
      // A store that cannot write is reported by the store actor.
      spdlog::warn("[{}] aggregated points not stored: {}", name, e.what());
    }
    out[name] = std::make_shared<const learning::aggregated_points>(std::move(a));
  }
  return out;
}

/// SIGINT / SIGTERM are taken by a thread of their own (sigwait), which asks
/// the node to stop; no work happens in a signal handler.
class signal_watch {
public:
  signal_watch(bool enabled, caf::actor_system& sys, node_actor node) : enabled_(enabled) {
    if (!enabled_)
      return;
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    thread_ = std::thread([this, &sys, node] {
      timespec tick{0, 200'000'000};
      while (!over_) {
        if (sigtimedwait(&set_, nullptr, &tick) > 0) {
          received_ = true;
          spdlog::info("signal received: stopping cleanly");
          // From a local actor: the node takes control only from its cluster.
          caf::scoped_actor asker{sys};
          asker->send(node, control_atom::value, control{messages::verb::stop, {}});
        }
      }
    });
  }
  ~signal_watch() {
    over_ = true;
    if (thread_.joinable())
      thread_.join();
  }
  /// True once a signal asked the node to stop.
  bool received() const { return received_; }
  /// Blocks the signals in this thread and every thread it starts later.
  static void block() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }

private:
  bool enabled_;
  sigset_t set_;
  std::atomic<bool> over_{false};
  std::atomic<bool> received_{false};
  std::thread thread_;
};

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
                   i->first, e.what());
    }
  }
  return std::nullopt;
}

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
      a.fingerprint = fingerprint;
      a.resend_after = cfg.split.resend_after;
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

/// The node, for the store actor's report that the store cannot write: the
/// store starts before the node, so a report made before the node exists
/// waits for it. Called from the store actor's thread.
class failure_relay {
public:
  void report(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (node_)
      caf::anon_send(node_, failed_atom::value, why);
    else
      pending_ = why;
  }
  void connect(node_actor node) {
    std::lock_guard<std::mutex> lock(mutex_);
    node_ = std::move(node);
    if (pending_)
      caf::anon_send(node_, failed_atom::value, *pending_);
    pending_.reset();
  }
  /// Drops the node's handle (the store actor keeps the relay).
  void disconnect() {
    std::lock_guard<std::mutex> lock(mutex_);
    node_ = nullptr;
  }

private:
  std::mutex mutex_;
  node_actor node_;
  std::optional<std::string> pending_;
};

/// Once the run is over and the store flushed, the actor system is shut
/// down; should that hang (an actor that does not end), the process exits
/// after 30 s with the run's exit code instead of staying up: nothing is
/// left to save by then.
class shutdown_watchdog {
public:
  void arm(int exit_code) {
    thread_ = std::thread([this, exit_code] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [this] { return over_; })) {
        spdlog::error("shutting down the actor system takes more than 30 s: exiting");
        spdlog::default_logger()->flush();
        std::_Exit(exit_code);
      }
    });
  }
  ~shutdown_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      over_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool over_ = false;
  std::thread thread_;
};

} // namespace

namespace {

/// Bytes of the files below `dir` (what a scrape reads as the store's size).
uint64_t directory_bytes(const std::string& dir) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator i(dir, ec), end; !ec && i != end; i.increment(ec)) {
    std::error_code size_ec;
    if (i->is_regular_file(size_ec)) {
      const auto n = i->file_size(size_ec);
      if (!size_ec)
        total += n;
    }
  }
  return total;
}

/// The node's /metrics for Prometheus, where nodes.metrics_port is set;
/// null otherwise. Throws std::runtime_error naming the address when it
/// cannot listen.
std::shared_ptr<node_metrics> serve_metrics(const config::cluster_config& cfg,
                                            const config::node_config& me,
                                            const scheduled_cpu_limit* cpu,
                                            const std::string& db_dir,
                                            std::shared_ptr<store_health> health) {
  if (me.metrics_port == 0)
    return nullptr;
  metrics_sources src;
  src.cpu_limit_cores = [cpu] { return cpu ? cpu->limit().cores() : 0.0; };
  src.store_bytes = [db_dir] { return directory_bytes(db_dir); };
  src.checkpoints = [health] {
    const auto c = health->checkpoints();
    return checkpoint_figures{c.saved, c.failed, c.seconds, c.last_seconds};
  };
  auto m = std::make_shared<node_metrics>(
    me.host, me.metrics_port,
    metrics_identity{cfg.id, me.name, EDGEGOSSIP_VERSION, config::to_string(cfg.strategy.name),
                     cfg.train.model},
    std::move(src));
  m->peers(0, cfg.nodes.size() - 1);
  spdlog::info("node {}: metrics for Prometheus on http://{}:{}/metrics", me.name, me.host,
               m->port());
  return m;
}

} // namespace

run_outcome run_node(const config::cluster_config& given, const std::string& node_name,
                     const runtime_options& opts) {
  config::validate(given);
  tune_allocator();
  given.node(node_name);  // names an unknown node before anything is made
  // Before any thread starts (the store's first): every thread inherits the
  // mask, so SIGINT and SIGTERM only reach the node's signal watch.
  if (opts.handle_signals)
    signal_watch::block();
  auto db_dir = (std::filesystem::path(given.storage_dir) / node_name).string();
  std::filesystem::create_directories(given.storage_dir);
  std::shared_ptr<storage::store> db = storage::store::open(db_dir);
  // The nodes that joined the cluster while this node ran before.
  const auto cfg = with_stored_members(given, node_name, *db, opts.fresh);
  const auto& me = cfg.node(node_name);
  const bool hosts_balancer = cfg.balancer().name == node_name;

  int threads = 1;
  for (auto& p : me.platforms)
    threads = std::max(threads, p.threads);
  at::set_num_threads(threads);

  // A real CPU limit on this process (every thread it has and will have),
  // from the node's start, as a resource-limited container gives an edge
  // device; destroyed last, after the actor system.
  std::unique_ptr<scheduled_cpu_limit> cpu;
  if (me.cpu_limit > 0 || !me.cpu_schedule.empty()) {
    try {
      cpu = std::make_unique<scheduled_cpu_limit>(me.cpu_limit, me.cpu_schedule, cfg.cpu_limiter);
    } catch (const std::exception& e) {
      throw std::runtime_error("node " + node_name + " cannot limit its CPU: " + e.what());
    }
    if (me.cpu_limit > 0)
      spdlog::info("node {}: CPU limited to {} cores by {}, {} changes scheduled", node_name,
                   me.cpu_limit, cpu->limit().mechanism(), me.cpu_schedule.size());
    else
      spdlog::info("node {}: CPU not limited at the start, {} changes scheduled (by {})",
                   node_name, me.cpu_schedule.size(), cpu->limit().mechanism());
  }


  // A split run: this node's stages (the first stage loads the data).
  const bool split = cfg.split.enabled();
  std::vector<stage_args> stages;
  if (split)
    stages = local_stages(cfg, node_name, *db, opts.fresh, opts.data_dir);

  // Data: a node with data of its own (nodes.data or --data) trains its
  // platforms on exactly that, split among them; else every node reads the
  // cluster's data set, derives the same partition from the seed and keeps
  // the shards of its own platforms.
  std::shared_ptr<learning::dataset> train, test;
  learning::shards shards;
  auto all = cfg.platforms();
  std::map<std::string, std::shared_ptr<const learning::aggregated_points>> aggregated;
  auto all_shards = std::make_shared<std::map<std::string, std::vector<int64_t>>>();
  learning::model_shape model_shape;
  bool own_data = false;
  std::string data_stats;
  std::vector<std::string> nargs_classes;  // what this node answers when asked
  if (!split) {
    for (const auto& p : me.platforms)
      learning::training_device(p.device);
    auto read = load_with_cluster_classes(cfg, me, opts.data_dir, *db, opts.fresh,
                                          opts.handle_signals, nargs_classes);
    if (!read) {
      run_outcome stopped;
      stopped.stopped = true;
      return stopped;
    }
    auto& loaded = *read;
    own_data = loaded.own;
    data_stats = loaded.stats;
    // The shards before the training data moves out of `loaded`.
    shards = partition_shards(cfg, me, all, loaded);
    train = std::make_shared<learning::dataset>(std::move(loaded.train));
    if (loaded.test)
      test = std::make_shared<learning::dataset>(std::move(*loaded.test));
    model_shape = learning::shape_of(*train);
    // The model, before anything starts: a torchscript file that is not a
    // classifier for this data, or a model that cannot take its shape, is an
    // error naming the problem.
    learning::make_classifier(cfg.train.model, cfg.seed, model_shape);
    spdlog::info("node {}: {} training samples of {} ({}, {} classes); test data: {}", node_name,
                 train->size(), train->shape.to_string(), loaded.own ? "its own" : "the cluster's",
                 train->num_classes(), loaded.test_from);
    std::vector<std::string> local_names;
    for (auto& p : me.platforms)
      local_names.push_back(p.name);
    if (cfg.strategy.edgegossip())
      aggregated = aggregate_local(cfg, all, shards, *train, loaded.sources + loaded.stats,
                                   local_names, *db);
    for (size_t i = 0; i < all.size(); ++i)
      if (!loaded.own || !shards[i].empty())
        (*all_shards)[all[i].name] = shards[i];
  }

  shutdown_watchdog watchdog;  // destroyed after the actor system below
  caf::actor_system_config sys_cfg;
  configure_network(sys_cfg, cfg, node_name);  // heartbeats, peer timeout, TLS
  sys_cfg.set("scheduler.max-threads",
              static_cast<size_t>(std::max(2u, std::thread::hardware_concurrency())));
  // Platforms send themselves one message per iteration: yield after each
  // message so every actor gets its turn.
  sys_cfg.set("scheduler.max-throughput", size_t{1});
  caf::actor_system sys{sys_cfg};
  // Messages to and from other nodes carry this cluster's id (actors/wire.hpp).
  set_wire_identity(sys, {cfg.id, node_name});
  struct forget_identity {
    caf::actor_system& sys;
    ~forget_identity() { set_wire_identity(sys, {}); }
  } forget{sys};

  // A run of these settings that did not finish is resumed: the platforms
  // from their newest checkpoints of that run, the balancer (if it starts
  // here) from the run state.
  auto fingerprint = config::run_fingerprint(cfg);
  std::optional<storage::run_state> unfinished;
  if (!opts.fresh && !split) {
    std::string problem;
    unfinished = storage::load_run_state(*db, &problem);
    if (!problem.empty())
      spdlog::warn("node {}: {}; starting a new run", node_name, problem);
    if (unfinished && (unfinished->finished || unfinished->fingerprint != fingerprint)) {
      if (!unfinished->finished)
        spdlog::info("node {}: the unfinished run {} in the store has other settings; "
                     "starting a new run",
                     node_name, unfinished->run);
      unfinished.reset();
    }
  }

  node_args nargs;
  nargs.data_stats = data_stats;
  nargs.cluster_classes = std::move(nargs_classes);
  nargs.settings = node_settings::of(cfg);
  nargs.name = node_name;
  nargs.cluster_toml = config::to_toml(cfg);
  // Peers are dialled through their front doors (messages/door.hpp); the
  // doors let in the cluster's nodes, and those that join.
  auto admitted = std::make_shared<admitted_names>(cfg, node_name);
  nargs.settings.admitted = admitted;
  std::shared_ptr<messages::door_routes> routes;
  if (cfg.nodes.size() > 1 || me.port != 0) {  // (a single node with a port: others may join)
    routes = std::make_shared<messages::door_routes>(door_options_of(cfg, node_name, admitted));
    nargs.settings.routes = routes;
  }
  auto relay = std::make_shared<failure_relay>();
  auto health = std::make_shared<store_health>();
  nargs.metrics = serve_metrics(cfg, me, cpu.get(), db_dir, health);
  {
    store_options so;
    so.cluster_id = cfg.id;
    for (auto& p : me.platforms)
      so.platforms.push_back(p.name);
    so.on_failure = [relay](const std::string& why) { relay->report(why); };
    so.health = health;
    nargs.store = spawn_store(sys, db, std::move(so));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    bool mine = false;
    for (auto& p : me.platforms)
      mine = mine || p.name == all[i].name;
    if (!mine)
      continue;
    auto pa = platform_args::of(cfg, all[i], node_name);
    pa.train_set = train;
    pa.test_set = test;
    pa.shard = shards[i];
    pa.all_shards = all_shards;
    if (auto a = aggregated.find(all[i].name); a != aggregated.end())
      pa.aggregated = a->second;
    if (auto saved = db->get(storage::family::predictor, storage::key(all[i].name, 0)))
      pa.predictor_samples = *saved;
    if (unfinished)
      restore_platform(*db, *unfinished, cfg.id, pa, nargs.reports);
    pa.store = nargs.store;
    nargs.platforms.push_back(std::move(pa));
  }
  // Any node may come to host the balancer (see node.hpp); the one named in
  // the cluster file starts it now unless a run is to be continued.
  std::map<std::string, uint64_t> sizes;
  for (size_t i = 0; i < all.size(); ++i)
    sizes[all[i].name] = shards[i].size();
  nargs.balancer = balancer_args{balancer_settings::of(cfg, std::move(sizes)),
                                 train ? train->describe() : data::description{},
                                 {}, opts.interactive, fingerprint, std::nullopt};
  if (test && !split) {
    // The averaged model is tested on every node's test data. Nodes that all
    // read the cluster's data set hold the same test set: each tests its own
    // part (every n-th sample), so that together they test it once.
    auto tested = test;
    if (!own_data && me.joined)
      tested.reset();  // the cluster's test data: the file's nodes test it
    else if (!own_data && cfg.nodes.size() > 1) {
      int64_t n = 0, at = -1;  // (among the cluster file's nodes)
      for (auto& other : cfg.nodes)
        if (!other.joined) {
          if (other.name == node_name)
            at = n;
          ++n;
        }
      std::vector<int64_t> part;
      for (int64_t k = at; k < test->size(); k += n)
        part.push_back(k);
      tested = std::make_shared<learning::dataset>(test->subset(part));
    }
    if (tested && tested->size() > 0)
      nargs.tester = tester_args{cfg.train.model, cfg.seed, model_shape, tested,
                                 static_cast<uint64_t>(tested->size())};
  }
  nargs.start_balancer = hosts_balancer && !unfinished && !split;
  nargs.stages = std::move(stages);
  if (cfg.strategy.parameter_server() && !split) {
    server_args sa;
    sa.model = cfg.train.model;
    sa.shape = model_shape;
    sa.seed = cfg.seed;
    for (auto& p : all)
      sa.workers.push_back(p.name);
    sa.schedule = commit_settings_of(cfg.strategy);
    nargs.server = std::move(sa);
    nargs.start_server = cfg.server().name == node_name && !unfinished;
    nargs.load_server_checkpoint = [db] {
      return storage::load_latest_checkpoint(*db, std::string{storage::server_checkpoint});
    };
  }
  nargs.load_run_state = [db] { return storage::load_run_state(*db); };
  if (unfinished)
    spdlog::info("node {}: continuing run {} ({} epochs evaluated; --fresh starts a new run)",
                 node_name, unfinished->run, unfinished->epochs.size());
  auto store = nargs.store;
  auto node = spawn_node(sys, std::move(nargs));
  relay->connect(node);

  run_outcome outcome;
  {
    signal_watch signals(opts.handle_signals, sys, node);
    corunners load(me.corunners, (std::filesystem::path(cfg.storage_dir) / (node_name + "-corunners")).string());
    // Several nodes peer over the port; a single node with a port set
    // listens too, for the inspection console.
    std::unique_ptr<messages::front_door> door;
    if (cfg.nodes.size() > 1 || me.port != 0) {
      try {
        door = open_front_door(sys, cfg, me, node, admitted);
      } catch (const std::exception& e) {
        caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
        caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
        throw std::runtime_error("node " + node_name + ": " + e.what());
      }
    }
    doors_closer closing{door, routes};
    caf::scoped_actor self{sys};
    self->request(node, caf::infinite, wait_atom::value)
      .receive([&](std::string& r) { outcome.run = std::move(r); },
               [&](caf::error& err) {
                 spdlog::error("node {} ended abnormally: {}", node_name, sys.render(err));
               });
    outcome.stopped = signals.received();
    outcome.store = health->failure();
    if (!outcome.store && db->failure()) {
      // Failed after the store actor's last write (a background error).
      store_failure f;
      f.dir = db->dir();
      f.reason = *db->failure();
      f.cause = storage::failure_cause(f.reason);
      outcome.store = f;
    }
    watchdog.arm(outcome.store ? store_failure_exit_code
                 : outcome.stopped || !outcome.run.empty() ? 0 : 1);
  }
  relay->disconnect();
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
  return outcome;
}

std::string last_words(const std::string& node, const store_failure& f) {
  return "node " + node + ": " + f.summary() + "; exit code "
         + std::to_string(store_failure_exit_code);
}

} // namespace eg::actors
