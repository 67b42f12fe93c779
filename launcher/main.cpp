// edgegossip: decentralized gossip training across heterogeneous machines.
//
//   edgegossip run     [--config F] [options]   the whole cluster in this process
//   edgegossip node    --config F --node NAME   one node of a cluster
//   edgegossip node    --join HOST:PORT --name NAME   a node joining a running cluster
//   edgegossip launch  --config F               every node of F as its own process here
//   edgegossip console HOST:PORT                watch and steer a running cluster

#include "actors/node/join.hpp"
#include "common/error.hpp"
#include "actors/node/runtime.hpp"
#include "bench/bench.hpp"
#include "config/config.hpp"
#include "launcher/console.hpp"
#include "launcher/launch.hpp"
#include "models/dataset.hpp"
#include "storage/store.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <unistd.h>

namespace {

using eg::config::cluster_config;

/// Options shared by run, node and launch: the cluster file and overrides.
struct common_options {
  std::string config_file;
  std::vector<std::string> overrides;
  bool verbose = false;
  bool fresh = false;

  void add_to(CLI::App& app, bool config_required) {
    auto* opt = app.add_option("-c,--config", config_file, "cluster file (TOML)");
    if (config_required)
      opt->required();
    app.add_option("--set", overrides,
                   "override a key of the cluster file, e.g. --set train.epochs=3 "
                   "(repeatable)");
    app.add_flag("-v,--verbose", verbose, "debug logging");
    app.add_flag("--fresh", fresh,
                 "start a new run even if the store holds an unfinished one of the same "
                 "settings (which is otherwise continued from its checkpoints)");
  }

  cluster_config load() const {
    auto cfg = config_file.empty() ? eg::config::default_config()
                                   : eg::config::load(config_file);
    for (auto& o : overrides)
      eg::config::apply_override(cfg, o);
    eg::config::validate(cfg);
    return cfg;
  }
};

void setup_logging(bool verbose, bool terminal) {
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
  // On a terminal, each log line first clears the progress line under it.
  spdlog::set_pattern(terminal ? "\r\033[K[%H:%M:%S.%e] %^%l%$ %v" : "[%H:%M:%S.%e] %l %v");
}

std::string self_path(const char* argv0) {
  char buf[4096];
  auto n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return argv0;
  buf[n] = '\0';
  return buf;
}

/// The list subcommand: the strategies, topologies and models this build
/// knows (config/registry.hpp), each with its line; the returned function
/// runs it when it was chosen (exit code 0) and answers -1 otherwise.
std::function<int()> add_list(CLI::App& app) {
  auto* cmd = app.add_subcommand("list", "the strategies, topologies and models a cluster file "
                                         "may name (strategy.name, strategy.topology, "
                                         "train.model)");
  return [cmd] {
    if (!*cmd) return -1;
    using eg::config::strategy_family;
    std::printf("strategies (strategy.name):\n");
    for (const auto& name : eg::config::strategies().names()) {
      const auto& t = eg::config::strategies().at(name);
      const char* family = t.family == strategy_family::gossip     ? "gossip"
                           : t.family == strategy_family::push_sum ? "push-sum"
                                                                    : "parameter server";
      std::printf("  %-12s %-17s %s\n", name.c_str(), family, t.summary.c_str());
    }
    std::printf("topologies (strategy.topology):\n");
    for (const auto& name : eg::config::topologies().names())
      std::printf("  %-12s %s\n", name.c_str(), eg::config::topologies().at(name).c_str());
    std::printf("models (train.model):\n");
    for (const auto& name : eg::config::models().names())
      std::printf("  %-12s %s\n", name.c_str(), eg::config::models().at(name).c_str());
    std::printf("  %-12s %s\n", "torchscript:PATH", "a model scripted in Python (docs/MODELS.md)");
    return 0;
  };
}

/// The console subcommand; the returned function runs it when it was
/// chosen (its exit code) and answers -1 otherwise.
std::function<int()> add_console(CLI::App& app) {
  struct options {
    eg::launcher::console_options console;
    std::string config_file;
  };
  auto o = std::make_shared<options>();
  auto* cmd = app.add_subcommand("console", "attach to any node of a running cluster: live "
                                            "view of every platform, commands at a prompt");
  cmd->add_option("address", o->console.address, "HOST:PORT of a node of the cluster")
    ->required();
  auto* secret = cmd->add_option("--secret", o->console.secret, "the cluster secret");
  auto* id = cmd->add_option("--cluster", o->console.cluster_id,
                             "the cluster's id (cluster.id; default edgegossip)");
  cmd->add_option("-c,--config", o->config_file,
                  "cluster file to take the cluster id, secret and TLS files from "
                  "(cluster.tls: the console's certificate is the one \"{node}\" names as "
                  "\"console\")")
    ->excludes(secret)
    ->excludes(id);
  cmd->add_flag("--once", o->console.once, "print one snapshot and exit");
  cmd->add_flag("--json", o->console.json, "with --once or --command: print the JSON");
  cmd->add_option("--command", o->console.command,
                  "run one command and exit: pause, resume, checkpoint, history NAME");
  cmd->add_option("--interval", o->console.interval, "seconds between refreshes")
    ->check(CLI::Range(0.1, 3600.0));
  return [cmd, o]() -> int {
    if (!*cmd)
      return -1;
    if (!o->config_file.empty()) {
      auto cluster = eg::config::load(o->config_file);
      o->console.secret = cluster.secret;
      o->console.cluster_id = cluster.id;
      o->console.tls = cluster.tls;
    }
    return eg::launcher::run_console(o->console);
  };
}

/// What glibc and OpenBLAS read once, when the process starts, so setting
/// them means starting again with the variables set (once: the restarted
/// process finds them set):
/// - `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`: transparent huge pages
///   (madvise(MADV_HUGEPAGE)) for the memory malloc maps. Large models need
///   it: CAF's read buffer and each message it receives are fresh mallocs
///   that otherwise fault in every 4 KiB page (bench transport: 250 MB went
///   from 0.10 to 0.45 of a raw socket through the middleman). Not where the
///   machine has transparent huge pages off, or with EDGEGOSSIP_NO_HUGE_PAGES.
/// - `OPENBLAS_NUM_THREADS=1`: LibTorch calls the system BLAS for fully
///   connected layers; OpenBLAS would run each call on a pool of one thread
///   per core while every platform is a thread of its own already (the
///   default run took 2.5x longer). Unless the variable is set.
void restart_with_settings(char** argv) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  bool huge_pages = !std::getenv("EDGEGOSSIP_NO_HUGE_PAGES")
                    && !(tunables && std::strstr(tunables, "glibc.malloc.hugetlb"));
  if (huge_pages) {
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode;
    huge_pages = std::getline(thp, mode) && mode.find("[never]") == std::string::npos;
  }
  const bool blas_threads = !std::getenv("OPENBLAS_NUM_THREADS");
  if (!huge_pages && !blas_threads)
    return;
  const std::optional<std::string> before =
    tunables ? std::optional<std::string>(tunables) : std::nullopt;
  if (huge_pages) {
    std::string value = "glibc.malloc.hugetlb=1";
    if (before && !before->empty())
      value = *before + ":" + value;
    setenv("GLIBC_TUNABLES", value.c_str(), 1);
  }
  if (blas_threads)
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
  execv("/proc/self/exe", argv);
  // Not re-executed (no /proc?): go on as we are, without the variables.
  if (before)
    setenv("GLIBC_TUNABLES", before->c_str(), 1);
  else
    unsetenv("GLIBC_TUNABLES");
  if (blas_threads)
    unsetenv("OPENBLAS_NUM_THREADS");
}

/// A node's exit code: 0 when its run finished or was stopped, 1 when it
/// ended otherwise, 2 when the cluster refused one of its platforms (its
/// data's shape or classes, or its run settings; said in the last line), 3
/// when its store could not write (whichever way the run
/// ended; said in the last line), 4 when its run stopped with an error (a
/// split run's stage, or every platform of the node, ran away for good;
/// said in the last line).
int exit_code(const std::string& node, const eg::actors::run_outcome& outcome) {
  if (outcome.store) {
    spdlog::error("{}", eg::actors::last_words(node, *outcome.store));
    spdlog::default_logger()->flush();
    return eg::actors::store_failure_exit_code;
  }
  if (!outcome.refusal.empty()) {
    spdlog::error("node {}: {}: fix this node's data or settings and start it again; exit code {}",
                  node, outcome.refusal, eg::actors::refused_exit_code);
    spdlog::default_logger()->flush();
    return eg::actors::refused_exit_code;
  }
  if (!outcome.failure.empty()) {
    spdlog::error("node {}: {}; exit code {}", node, outcome.failure,
                  eg::actors::run_failure_exit_code);
    spdlog::default_logger()->flush();
    return eg::actors::run_failure_exit_code;
  }
  return outcome.stopped || !outcome.run.empty() ? 0 : 1;
}

} // namespace

/// `edgegossip node --join HOST:PORT --name NAME ...`: the options of a node
/// joining a running cluster (none of them without --join, and --join
/// without --node), read into `join`. Answers the --join option.
CLI::Option* add_join_options(CLI::App& node, CLI::Option* node_opt,
                              eg::actors::join_request& join) {
  auto* join_opt = node.add_option(
    "--join", join.address,
    "HOST:PORT of any node of a running cluster: join it (no cluster file; the settings come "
    "from that node)");
  auto* join_name = node.add_option("--name", join.name,
                                     "with --join: this node's name (its identity: keep it "
                                     "across restarts)");
  std::vector<CLI::Option*> join_only{
    join_name,
    node.add_option("--secret", join.secret,
                     "with --join: the cluster secret (default: $EDGEGOSSIP_SECRET, which keeps "
                     "it off the command line)"),
    node.add_option("--cluster", join.cluster_id,
                     "with --join: the cluster's id (cluster.id; default: $EDGEGOSSIP_CLUSTER, else "
                     "learnt from the node it dials)"),
    node.add_option("--host", join.host,
                     "with --join: the address this node listens on and the others dial "
                     "(default: the one this machine reaches the --join node from)"),
    node.add_option("--port", join.port,
                     "with --join: this node's port (default: as before a restart, else the "
                     "--join node's port on another host, else a free one)"),
    node.add_option("--lane-port", join.lane_port,
                     "with --join: its weights lane's port (default: port + 1)"),
    node.add_option("--metrics-port", join.metrics_port,
                     "with --join: serve Prometheus' /metrics on this port (default: none)"),
    node.add_option("--platforms", join.platforms,
                     "with --join: platforms on this node, NAME0, NAME1, ... (default 1)")
      ->check(CLI::Range(1, 64)),
    node.add_option("--threads", join.threads,
                     "with --join: torch threads of each platform (default 1)")
      ->check(CLI::Range(1, 256))};
  join_opt->excludes(node_opt);
  for (auto* o : join_only)
    o->needs(join_opt);
  return join_opt;
}

/// `edgegossip node --join`: asks the cluster for its settings, then runs
/// this node in it; its exit code.
int run_joining(eg::actors::join_request join, const common_options& node_opts,
                const std::string& node_data, const eg::actors::runtime_options& o) {
  if (join.name.empty())
    throw eg::config::config_error("--join needs --name: this node's name");
  if (!node_opts.config_file.empty())
    throw eg::config::config_error(
      "--join takes the cluster's settings from the node it dials: no --config");
  if (join.secret.empty())
    if (const char* env = std::getenv("EDGEGOSSIP_SECRET"))
      join.secret = env;
  if (join.cluster_id.empty())  // (else learnt from the node it dials)
    if (const char* env = std::getenv("EDGEGOSSIP_CLUSTER"))
      join.cluster_id = env;
  join.data_dir = node_data;
  join.overrides = node_opts.overrides;
  join.fresh = node_opts.fresh;
  auto cfg = eg::actors::join_cluster(join);
  if (!cfg)
    return 0;  // stopped while asking
  // (its own data directory is in its entry of the cluster file now)
  auto outcome = eg::actors::run_node(*cfg, join.name, o);
  return exit_code(join.name, outcome);
}

/// `edgegossip launch`: every node of the file as a process of its own.
int run_launch(const common_options& launch_opts, const char* argv0) {
  auto cfg = launch_opts.load();
  std::vector<std::string> names;
  for (auto& n : cfg.nodes)
    names.push_back(n.name);
  std::vector<std::string> extra;
  for (auto& o : launch_opts.overrides) {
    extra.push_back("--set");
    extra.push_back(o);
  }
  if (launch_opts.verbose)
    extra.push_back("--verbose");
  if (launch_opts.fresh)
    extra.push_back("--fresh");
  return eg::launcher::launch_nodes(self_path(argv0), launch_opts.config_file, names, extra);
}

int main(int argc, char** argv) {
  restart_with_settings(argv);
  CLI::App app{"edgegossip: gossip training across heterogeneous edge machines"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "edgegossip " EDGEGOSSIP_VERSION);

  common_options run_opts;
  auto* run = app.add_subcommand("run", "train the whole cluster in this process (with no "
                                        "options: 4 platforms, LeNet-5, Fashion-MNIST, GoSGD, "
                                        "5 epochs)");
  run_opts.add_to(*run, false);
  std::optional<uint32_t> epochs;
  std::optional<std::string> strategy, schedule, output;
  run->add_option("--epochs", epochs, "epochs to train (train.epochs)");
  run->add_option("--strategy", strategy,
                  "training strategy (strategy.name; `edgegossip list`): gosgd");
  run->add_option("--schedule", schedule, "sync (epoch barrier) or async (strategy.schedule)");
  run->add_option("--output", output, "directory of run directories (output.dir)");

  common_options node_opts;
  std::string node_name;
  auto* node = app.add_subcommand("node", "run one node of a cluster (of a cluster file, or "
                                          "joining a running cluster with --join)");
  node_opts.add_to(*node, false);
  auto* node_opt = node->add_option("-n,--node", node_name, "name of the node in the cluster file");
  std::string node_data;
  node->add_option("--data", node_data,
                   "this node's own data directory (its platforms train on it alone), in place "
                   "of the cluster file's");
  eg::actors::join_request join;
  auto* join_opt = add_join_options(*node, node_opt, join);

  common_options launch_opts;
  auto* launch = app.add_subcommand("launch", "start every node of a cluster file on this "
                                              "machine, each as its own process");
  launch_opts.add_to(*launch, true);

  auto run_bench = eg::bench::add_subcommand(app);
  auto run_console = add_console(app);
  auto run_list = add_list(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (*run) {
      for (auto& [flag, key] : {std::pair{&strategy, "strategy.name"},
                                std::pair{&schedule, "strategy.schedule"},
                                std::pair{&output, "output.dir"}})
        if (*flag)
          run_opts.overrides.push_back(std::string(key) + "=\"" + **flag + "\"");
      if (epochs)
        run_opts.overrides.push_back("train.epochs=" + std::to_string(*epochs));
      auto cfg = eg::actors::as_one_process(run_opts.load());
      bool terminal = isatty(STDERR_FILENO);
      setup_logging(run_opts.verbose, terminal);
      auto outcome = eg::actors::run_node(cfg, "local", {terminal, true, run_opts.fresh, {}});
      return exit_code("local", outcome);
    }
    if (*node) {
      setup_logging(node_opts.verbose, false);
      eg::actors::runtime_options o{false, true, node_opts.fresh, {}};
      if (*join_opt)
        return run_joining(join, node_opts, node_data, o);
      if (node_opts.config_file.empty() || node_name.empty())
        throw eg::config::config_error(
          "node: give --config FILE and --node NAME (a node of the file), or --join HOST:PORT "
          "and --name NAME (a node joining a running cluster)");
      auto cfg = node_opts.load();
      cfg.node(node_name);  // names an unknown node before anything starts
      o.data_dir = node_data;
      auto outcome = eg::actors::run_node(cfg, node_name, o);
      return exit_code(node_name, outcome);
    }
    if (int rc = run_bench(); rc >= 0)
      return rc;
    if (int rc = run_console(); rc >= 0)
      return rc;
    if (int rc = run_list(); rc >= 0)
      return rc;
    if (*launch)
      return run_launch(launch_opts, argv[0]);
  } catch (const eg::config::config_error& e) {
    std::fprintf(stderr, "edgegossip: %s\n", e.what());
    return 2;
  } catch (const eg::learning::data_error& e) {
    std::fprintf(stderr, "edgegossip: data set: %s\n", e.what());
    return 2;
  } catch (const eg::storage::storage_error& e) {
    std::fprintf(stderr, "edgegossip: storage: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // Input the user can correct (a model that does not fit the data, a
    // name nothing registered) exits 2 as a bad file does; anything else 1,
    // with its code beside the cause.
    const auto code = eg::code_of(e);
    const bool input = code == eg::errc::bad_config || code == eg::errc::bad_data
                       || code == eg::errc::mismatch;
    std::fprintf(stderr, "edgegossip: %s\n", input ? e.what() : eg::describe(e).c_str());
    return input ? 2 : 1;
  }
  return 0;
}
