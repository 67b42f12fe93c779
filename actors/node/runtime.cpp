#include "actors/node/runtime.hpp"
#include "common/error.hpp"
#include "actors/node/process_guards.hpp"
#include "actors/node/join.hpp"
#include "actors/node/resume.hpp"

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

using runtime_detail::doors_closer;
using runtime_detail::failure_relay;
using runtime_detail::shutdown_watchdog;
using runtime_detail::signal_watch;

std::vector<double> resolved_shares(const config::cluster_config& cfg) {
  return resolve_shares(cfg.platforms());
}

void tune_allocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed threshold
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

void tune_scheduler(caf::actor_system_config& cfg) {
  // (CAF's defaults: 100 spins stealing every 10th, then 500 looks 50 us
  // apart stealing every 5th, then sleeps of 10 ms stealing after each.)
  cfg.set("work-stealing.aggressive-poll-attempts", size_t{100});
  cfg.set("work-stealing.aggressive-steal-interval", size_t{10});
  cfg.set("work-stealing.moderate-poll-attempts", size_t{10});
  cfg.set("work-stealing.moderate-steal-interval", size_t{1});
  cfg.set("work-stealing.moderate-sleep-duration", caf::timespan{std::chrono::milliseconds(1)});
  cfg.set("work-stealing.relaxed-steal-interval", size_t{1});
  cfg.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(10)});
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
    metrics_identity{cfg.id, me.name, EDGEGOSSIP_VERSION, cfg.strategy.name,
                     cfg.train.model},
    std::move(src));
  m->peers(0, cfg.nodes.size() - 1);
  spdlog::info("node {}: metrics for Prometheus on http://{}:{}/metrics", me.name, me.host,
               m->port());
  return m;
}

} // namespace

namespace {

/// A real CPU limit on this process (every thread it has and will have),
/// from the node's start, as a resource-limited container gives an edge
/// device (null: none set).
std::unique_ptr<scheduled_cpu_limit> limit_cpu(const config::cluster_config& cfg,
                                               const config::node_config& me) {
  if (me.cpu_limit <= 0 && me.cpu_schedule.empty())
    return nullptr;
  std::unique_ptr<scheduled_cpu_limit> cpu;
  try {
    cpu = std::make_unique<scheduled_cpu_limit>(me.cpu_limit, me.cpu_schedule, cfg.cpu_limiter);
  } catch (const std::exception& e) {
    throw system_failure("node " + me.name + " cannot limit its CPU: " + e.what());
  }
  if (me.cpu_limit > 0)
    spdlog::info("node {}: CPU limited to {} cores by {}, {} changes scheduled", me.name,
                 me.cpu_limit, cpu->limit().mechanism(), me.cpu_schedule.size());
  else
    spdlog::info("node {}: CPU not limited at the start, {} changes scheduled (by {})", me.name,
                 me.cpu_schedule.size(), cpu->limit().mechanism());
  return cpu;
}

/// What a node's platforms train on and test with.
struct training_data {
  std::shared_ptr<learning::dataset> train, test;
  learning::shards shards;  ///< every platform's, in cluster-file order
  std::map<std::string, std::shared_ptr<const learning::aggregated_points>> aggregated;
  /// Every platform's shard by name (exception handling adopts failed ones).
  std::shared_ptr<std::map<std::string, std::vector<int64_t>>> all_shards =
    std::make_shared<std::map<std::string, std::vector<int64_t>>>();
  learning::model_shape model_shape;
  bool own = false;          ///< the node's own data (nodes.data or --data)
  std::string stats;         ///< its statistics, for the cluster's normalisation
  std::vector<std::string> classes;  ///< what this node answers when asked
  std::string shape;                 ///< and the samples' shape with them ("": none)
};

/// A node with data of its own (nodes.data or --data) trains its platforms
/// on exactly that, split among them; else every node reads the cluster's
/// data set, derives the same partition from the seed and keeps the shards
/// of its own platforms. Nullopt: the node was stopped while it waited for
/// the cluster's class list.
std::optional<training_data> read_training_data(const config::cluster_config& cfg,
                                                const config::node_config& me,
                                                const runtime_options& opts,
                                                storage::store& db) {
  for (const auto& p : me.platforms)
    learning::training_device(p.device);
  training_data d;
  auto read = load_with_cluster_classes(cfg, me, opts.data_dir, db, opts.fresh,
                                        opts.handle_signals, d.classes, d.shape);
  if (!read)
    return std::nullopt;
  auto& loaded = *read;
  auto all = cfg.platforms();
  d.own = loaded.own;
  d.stats = loaded.stats;
  // The shards before the training data moves out of `loaded`.
  d.shards = partition_shards(cfg, me, all, loaded);
  d.train = std::make_shared<learning::dataset>(std::move(loaded.train));
  if (loaded.test)
    d.test = std::make_shared<learning::dataset>(std::move(*loaded.test));
  d.model_shape = learning::shape_of(*d.train);
  // The model, before anything starts: a torchscript file that is not a
  // classifier for this data, or a model that cannot take its shape, is an
  // error naming the problem.
  learning::make_classifier(cfg.train.model, cfg.seed, d.model_shape);
  spdlog::info("node {}: {} training samples of {} ({}, {} classes); test data: {}", me.name,
               d.train->size(), d.train->shape.to_string(),
               loaded.own ? "its own" : "the cluster's", d.train->num_classes(),
               loaded.test_from);
  std::vector<std::string> local_names;
  for (auto& p : me.platforms)
    local_names.push_back(p.name);
  if (cfg.strategy.edgegossip())
    d.aggregated = aggregate_local(cfg, all, d.shards, *d.train, loaded.sources + loaded.stats,
                                   local_names, db);
  for (size_t i = 0; i < all.size(); ++i)
    if (!loaded.own || !d.shards[i].empty())
      (*d.all_shards)[all[i].name] = d.shards[i];
  return d;
}

/// A run of these settings that did not finish, to resume: the platforms
/// from their newest checkpoints of that run, the balancer (if it starts
/// here) from the run state. Nullopt: none, or one of other settings.
std::optional<storage::run_state> unfinished_run(const storage::store& db,
                                                 const std::string& fingerprint,
                                                 const std::string& node_name) {
  std::string problem;
  auto unfinished = storage::load_run_state(db, &problem);
  if (!problem.empty())
    spdlog::warn("node {}: {}; starting a new run", node_name, problem);
  if (unfinished && (unfinished->finished || unfinished->fingerprint != fingerprint)) {
    if (!unfinished->finished)
      spdlog::info("node {}: the unfinished run {} in the store has other settings; "
                   "starting a new run",
                   node_name, unfinished->run);
    unfinished.reset();
  }
  return unfinished;
}

/// This node's platforms, each with its shard, aggregated points, saved
/// predictor samples and (resuming) checkpoint.
void add_platforms(node_args& nargs, const config::cluster_config& cfg,
                   const config::node_config& me, const training_data& d,
                   const storage::store& db, const std::optional<storage::run_state>& unfinished) {
  auto all = cfg.platforms();
  for (size_t i = 0; i < all.size(); ++i) {
    bool mine = false;
    for (auto& p : me.platforms)
      mine = mine || p.name == all[i].name;
    if (!mine)
      continue;
    auto pa = platform_args::of(cfg, all[i], me.name);
    pa.train_set = d.train;
    pa.test_set = d.test;
    pa.shard = d.shards[i];
    pa.all_shards = d.all_shards;
    if (auto a = d.aggregated.find(all[i].name); a != d.aggregated.end())
      pa.aggregated = a->second;
    if (auto saved = db.get(storage::family::predictor, storage::key(all[i].name, 0)))
      pa.predictor_samples = *saved;
    if (unfinished)
      restore_platform(db, *unfinished, cfg.id, pa, nargs.reports);
    pa.store = nargs.store;
    nargs.platforms.push_back(std::move(pa));
  }
}

/// The averaged model is tested on every node's test data. Nodes that all
/// read the cluster's data set hold the same test set: each tests its own
/// part (every n-th sample), so that together they test it once.
std::optional<tester_args> tester_of(const config::cluster_config& cfg,
                                     const config::node_config& me, const training_data& d) {
  if (!d.test)
    return std::nullopt;
  auto tested = d.test;
  if (!d.own && me.joined)
    tested.reset();  // the cluster's test data: the file's nodes test it
  else if (!d.own && cfg.nodes.size() > 1) {
    int64_t n = 0, at = -1;  // (among the cluster file's nodes)
    for (auto& other : cfg.nodes)
      if (!other.joined) {
        if (other.name == me.name)
          at = n;
        ++n;
      }
    std::vector<int64_t> part;
    for (int64_t k = at; k < d.test->size(); k += n)
      part.push_back(k);
    tested = std::make_shared<learning::dataset>(d.test->subset(part));
  }
  if (!tested || tested->size() == 0)
    return std::nullopt;
  return tester_args{cfg.train.model, cfg.seed, d.model_shape, tested,
                     static_cast<uint64_t>(tested->size())};
}

/// Parameter-server strategies: the server any node may come to host.
server_args server_of(const config::cluster_config& cfg, const learning::model_shape& shape) {
  server_args sa;
  sa.model = cfg.train.model;
  sa.shape = shape;
  sa.seed = cfg.seed;
  for (auto& p : cfg.platforms())
    sa.workers.push_back(p.name);
  sa.schedule = commit_settings_of(cfg.strategy);
  return sa;
}

/// read_training_data; where this node's own data is unusable (its file or
/// directory, a class outside the list, another shape than the cluster's),
/// the cluster hears it before the error goes on, so that the run does not
/// wait for this node's platforms.
std::optional<training_data> read_or_tell_cluster(const config::cluster_config& cfg,
                                                  const config::node_config& me,
                                                  const runtime_options& opts,
                                                  storage::store& db) {
  try {
    return read_training_data(cfg, me, opts, db);
  } catch (const std::exception& e) {
    const auto code = eg::code_of(e);
    if (code == errc::bad_data || code == errc::bad_config || code == errc::mismatch)
      tell_cluster_node_cannot_start(cfg, me.name, e.what(), std::chrono::seconds(10));
    throw;
  }
}

/// The process's part of the node, while its actors run: signals, the
/// co-runners, the front door; then waits for the node to end and says how
/// it went (arming the shutdown watchdog with the exit code).
run_outcome serve_until_done(caf::actor_system& sys, const config::cluster_config& cfg,
                             const config::node_config& me, const runtime_options& opts,
                             const node_actor& node, const store_actor& store,
                             std::shared_ptr<admitted_names> admitted,
                             std::shared_ptr<messages::door_routes> routes,
                             const store_health& health, const storage::store& db,
                             const std::string& run_failure, const std::string& refusal,
                             shutdown_watchdog& watchdog) {
  run_outcome outcome;
  signal_watch signals(opts.handle_signals, sys, node);
  corunners load(me.corunners,
                 (std::filesystem::path(cfg.storage_dir) / (me.name + "-corunners")).string());
  // Several nodes peer over the port; a single node with a port set
  // listens too, for the inspection console.
  std::unique_ptr<messages::front_door> door;
  if (cfg.nodes.size() > 1 || me.port != 0) {
    try {
      door = open_front_door(sys, cfg, me, node, std::move(admitted));
    } catch (const std::exception& e) {
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
      throw failure<errc::network_failed>("node " + me.name + ": " + e.what());
    }
  }
  doors_closer closing{door, routes, watchdog};
  caf::scoped_actor self{sys};
  self->request(node, caf::infinite, wait_atom::value)
    .receive([&](std::string& r) { outcome.run = std::move(r); },
             [&](caf::error& err) {
               spdlog::error("node {} ended abnormally: {}", me.name, sys.render(err));
             });
  outcome.stopped = signals.received();
  // The first stage or the node wrote it before the node's answer ended
  // the wait above.
  outcome.failure = run_failure;
  outcome.refusal = refusal;
  outcome.store = health.failure();
  if (!outcome.store && db.failure()) {
    // Failed after the store actor's last write (a background error).
    store_failure f;
    f.dir = db.dir();
    f.reason = *db.failure();
    f.cause = storage::failure_cause(f.reason);
    outcome.store = f;
  }
  watchdog.arm(outcome.store ? store_failure_exit_code
               : !outcome.refusal.empty() ? refused_exit_code
               : !outcome.failure.empty() ? run_failure_exit_code
               : outcome.stopped || !outcome.run.empty() ? 0 : 1);
  return outcome;
}

/// The store actor over the node's RocksDB; its failure reaches the node
/// through `relay`, its checkpoints' figures `health`.
store_actor spawn_node_store(caf::actor_system& sys, const config::cluster_config& cfg,
                             const config::node_config& me,
                             std::shared_ptr<storage::store> db,
                             std::shared_ptr<failure_relay> relay,
                             std::shared_ptr<store_health> health) {
  store_options so;
  so.cluster_id = cfg.id;
  for (auto& p : me.platforms)
    so.platforms.push_back(p.name);
  so.on_failure = [relay](const std::string& why) { relay->report(why); };
  so.health = std::move(health);
  return spawn_store(sys, std::move(db), std::move(so));
}

/// Ends the node's actors and waits for every actor (the census names one
/// that does not end); the actor system's modules (the middleman's
/// connections, its threads) stop after, when it is destroyed.
void end_actors(caf::actor_system& sys, node_actor node, store_actor store,
                shutdown_watchdog& watchdog) {
  watchdog.step("waiting for the node's actors to end");
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
  node = nullptr;
  store = nullptr;
  sys.await_all_actors_done();
  // Everything is saved by now. CAF's network layer has been seen to hang
  // in its stop for good after a partition healed (a connection attempt to
  // a peer it cannot reach, it seems): not waited for beyond a few seconds.
  watchdog.step("every actor has ended, what the store wrote stays; CAF's network layer is "
                "still stopping",
                std::chrono::seconds(5));
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

  int threads = 1;
  for (auto& p : me.platforms)
    threads = std::max(threads, p.threads);
  at::set_num_threads(threads);
  auto cpu = limit_cpu(cfg, me);  // destroyed last, after the actor system

  // A split run: this node's stages (the first stage loads the data).
  const bool split = cfg.split.enabled();
  std::vector<stage_args> stages;
  auto run_failure = std::make_shared<std::string>(), refusal = std::make_shared<std::string>();
  training_data data;
  if (split) {
    stages = local_stages(cfg, node_name, *db, opts.fresh, opts.data_dir);
    for (auto& s : stages)
      s.failure = run_failure;
  } else {
    auto read = read_or_tell_cluster(cfg, me, opts, *db);
    if (!read) {
      run_outcome stopped;
      stopped.stopped = true;
      return stopped;
    }
    data = std::move(*read);
  }

  shutdown_watchdog watchdog;  // destroyed after the actor system below
  caf::actor_system_config sys_cfg;
  configure_network(sys_cfg, cfg, node_name);  // heartbeats, peer timeout, TLS
  sys_cfg.set("scheduler.max-threads",
              static_cast<size_t>(std::max(2u, std::thread::hardware_concurrency())));
  // Platforms send themselves one message per iteration: yield after each
  // message so every actor gets its turn.
  sys_cfg.set("scheduler.max-throughput", size_t{1});
  tune_scheduler(sys_cfg);
  caf::actor_system sys{sys_cfg};
  // Messages to and from other nodes carry this cluster's id (actors/wire.hpp).
  set_wire_identity(sys, {cfg.id, node_name});
  struct forget_identity {
    caf::actor_system& sys;
    ~forget_identity() { set_wire_identity(sys, {}); }
  } forget{sys};

  auto fingerprint = config::run_fingerprint(cfg);
  std::optional<storage::run_state> unfinished;
  if (!opts.fresh && !split)
    unfinished = unfinished_run(*db, fingerprint, node_name);

  node_args nargs;
  nargs.data_stats = data.stats;
  nargs.cluster_classes = std::move(data.classes);
  nargs.cluster_shape = data.shape;
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
  nargs.store = spawn_node_store(sys, cfg, me, db, relay, health);
  add_platforms(nargs, cfg, me, data, *db, unfinished);
  // Any node may come to host the balancer (see node.hpp); the one named in
  // the cluster file starts it now unless a run is to be continued.
  std::map<std::string, uint64_t> sizes;
  auto all = cfg.platforms();
  for (size_t i = 0; i < all.size() && i < data.shards.size(); ++i)
    sizes[all[i].name] = data.shards[i].size();
  nargs.balancer = balancer_args{balancer_settings::of(cfg, std::move(sizes)),
                                 data.train ? data.train->describe() : data::description{},
                                 {}, opts.interactive, fingerprint, std::nullopt, {}};
  if (!split)
    nargs.tester = tester_of(cfg, me, data);
  nargs.start_balancer = cfg.balancer().name == node_name && !unfinished && !split;
  nargs.stages = std::move(stages);
  nargs.failure = run_failure;
  nargs.refusal = refusal;
  if (cfg.strategy.parameter_server() && !split) {
    nargs.server = server_of(cfg, data.model_shape);
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
  auto outcome =
    serve_until_done(sys, cfg, me, opts, node, store, admitted, routes, *health, *db,
                     *run_failure, *refusal, watchdog);
  relay->disconnect();
  end_actors(sys, std::move(node), std::move(store), watchdog);
  return outcome;
}

std::string last_words(const std::string& node, const store_failure& f) {
  return "node " + node + ": " + f.summary() + "; exit code "
         + std::to_string(store_failure_exit_code);
}

} // namespace eg::actors
