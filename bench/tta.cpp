// `edgegossip bench tta`: the headline benchmark. The strategies run one after
// another on the same cluster, data, seed and heterogeneity profile; for
// each, the training time until the averaged model reaches each target test
// accuracy, the mean of those times, the accuracy after the same number of
// epochs and at the same training time (the EdgeGossip paper's Fig. 5 and
// its 2.70x / 0.78-point claim). `--repeat N` runs seeds 1..N and reports
// the median and range of every figure.

#include "bench/bench.hpp"
#include "bench/common.hpp"
#include "bench/wan.hpp"

#include "actors/node/runtime.hpp"
#include "config/config.hpp"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <map>
#include <sstream>

namespace eg::bench {
namespace {

namespace fs = std::filesystem;

struct point {
  uint32_t epoch = 0;
  double seconds = 0;  // training clock
  double accuracy = 0;
  double prediction_error = -1;  // EdgeGossip: the balancer's, mean over platforms (-1: none)
  double megabytes = 0;          // sent by every platform through this epoch (cumulative)
  double samples = 0;            // trained by every platform through this epoch (cumulative)
  // What every node's weights lane sent through this epoch (cumulative):
  // the gossip and every model the balancer's average moved.
  double lane_megabytes = 0;
};

/// One platform over a run (metrics.csv): what it trained and how fast.
struct platform_figures {
  std::string name;
  uint64_t samples = 0;
  double seconds = 0;             // training time, summed over its epochs
  double first_ratio = 0, last_ratio = 0;  // r_i of its first and last epochs
  double samples_per_second() const { return seconds > 0 ? samples / seconds : 0; }
};

struct outcome {
  std::string strategy;
  std::vector<platform_figures> platforms;  // filled for clusters with a GPU platform
  std::vector<point> curve;
  std::vector<double> time_to;  // per target; -1: not reached
  double mean_time = -1;        // mean of time_to; -1: a target not reached
  double final_accuracy = 0;
  double equal_time_accuracy = 0;  // at the shortest run's training time
  double last_accuracy = 0;        // mean of the last three epochs
  double prediction_error = -1;    // mean over the planned epochs (-1: none)
  double wall_seconds = 0;
  double megabytes_to = -1;        // sent by every platform until the headline target
  double megabytes = 0;            // sent in the whole run
  double lane_megabytes_to = -1;   // every node's lane until the headline target
  double lane_megabytes = 0;       // every node's lane in the whole run
  /// The platforms' summed throughput (samples per second of each one's
  /// epochs, emulated slowdowns and co-runners included).
  double pooled_samples_per_second = 0;
  bool device = false;  // a GPU platform: its figures are printed
  double limit_seconds = -1;  // the seed's pooled-compute limit (-1: none)
  bool stopped = false;       // its nodes were stopped at tta_options::wall_limit
};

/// The pooled-compute limit of one seed: one model trained by plain SGD
/// (one platform, all the data, no slowdown), the samples it needed to the
/// headline target, at the platforms' summed throughput.
struct compute_limit {
  double samples_to = -1;         // samples to the target (-1: not reached)
  double samples_per_second = 0;  // the platforms' summed throughput
  double seconds() const {
    return samples_to > 0 && samples_per_second > 0 ? samples_to / samples_per_second : -1;
  }
};

std::vector<point> read_curve(const fs::path& csv) {
  std::ifstream in(csv);
  if (!in)
    throw std::runtime_error("cannot read " + csv.string());
  std::string line;
  std::getline(in, line);
  const auto cols = csv_cells(line);
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < cols.size(); ++i)
      if (cols[i] == name)
        return i;
    throw std::runtime_error("no column " + name + " in " + csv.string());
  };
  auto e = col("epoch"), t = col("training_seconds"), a = col("averaged_accuracy"),
       pe = col("prediction_error"), n = col("samples");
  std::vector<point> out;
  double samples = 0;
  while (std::getline(in, line)) {
    auto cells = csv_cells(line);
    samples += std::stod(cells[n]);
    const double accuracy = std::stod(cells[a]);
    if (std::isnan(accuracy))
      continue;  // no average this epoch (train.average_every), or no node tested it
    out.push_back({static_cast<uint32_t>(std::stoul(cells[e])), std::stod(cells[t]), accuracy,
                   std::stod(cells[pe]), 0, samples});
  }
  return out;
}

/// A run directory's platform metrics: the balancer's metrics.csv, every
/// report that reached it (the run as cluster.csv tells it), or where it
/// wrote none, each node's own NODE-metrics.csv. Never both: each holds the
/// same reports.
std::vector<fs::path> metrics_files(const fs::path& run_dir) {
  if (fs::exists(run_dir / "metrics.csv"))
    return {run_dir / "metrics.csv"};
  std::vector<fs::path> out;
  for (auto& entry : fs::directory_iterator(run_dir)) {
    const auto name = entry.path().filename().string();
    if (name.size() > 12 && name.compare(name.size() - 12, 12, "-metrics.csv") == 0)
      out.push_back(entry.path());
  }
  return out;
}

/// Per epoch, the MB of `column` in the run's metrics `files`
/// (metrics_files), cumulated into each point's `field`: added over the
/// platforms, or with `per_node` over the nodes, each the largest of its
/// platforms', for a column that is the node's (its weights lane's
/// traffic, which each platform of the node reports).
void add_megabytes(std::vector<point>& curve, const std::vector<fs::path>& files,
                   const std::string& column, double point::*field, bool per_node) {
  std::map<uint32_t, double> sent;
  for (auto& file : files) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    const auto cols = csv_cells(line);
    auto find = [&](const std::string& name) {
      auto i = std::find(cols.begin(), cols.end(), name);
      if (i == cols.end())
        throw std::runtime_error("no " + name + " column in " + file.string());
      return static_cast<size_t>(i - cols.begin());
    };
    const size_t e = find("epoch"), b = find(column), n = find("node");
    std::map<std::pair<uint32_t, std::string>, double> node;  // (epoch, node): MB
    while (std::getline(in, line)) {
      auto cells = csv_cells(line);
      if (cells.size() <= std::max({e, b, n}))
        continue;
      const auto epoch = static_cast<uint32_t>(std::stoul(cells[e]));
      const double v = std::stod(cells[b]) / 1e6;
      if (per_node) {
        auto& mb = node[{epoch, cells[n]}];
        mb = std::max(mb, v);
      } else {
        sent[epoch] += v;
      }
    }
    for (auto& [key, mb] : node)
      sent[key.first] += mb;
  }
  double total = 0;
  auto it = sent.begin();
  for (auto& p : curve) {
    for (; it != sent.end() && it->first <= p.epoch; ++it)
      total += it->second;
    p.*field = total;
  }
}

/// Each platform's figures from a run's metrics.csv (platform, node, epoch,
/// ratio, wall_seconds, compute_seconds, samples, ...).
std::vector<platform_figures> read_platforms(const fs::path& csv) {
  std::ifstream in(csv);
  if (!in)
    throw std::runtime_error("cannot read " + csv.string());
  std::string line;
  std::getline(in, line);
  std::vector<platform_figures> out;
  while (std::getline(in, line)) {
    auto cells = csv_cells(line);
    if (cells.size() < 7)
      throw std::runtime_error("a short row in " + csv.string());
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const platform_figures& f) { return f.name == cells[0]; });
    if (it == out.end()) {
      out.push_back({cells[0]});
      it = std::prev(out.end());
      it->first_ratio = std::stod(cells[3]);
    }
    it->last_ratio = std::stod(cells[3]);
    it->seconds += std::stod(cells[4]);
    it->samples += static_cast<uint64_t>(std::stoull(cells[6]));
  }
  return out;
}

/// The training time at which the curve first reaches `target`, linearly
/// interpolated between the epoch before and the epoch that crossed it (an
/// epoch of GoSGD lasts several seconds: the crossing epoch's end alone
/// overstates by up to one epoch); -1 when never reached.
double value_to(const std::vector<point>& curve, double target, double point::*value) {
  double t_before = 0, a_before = 0;
  for (auto& p : curve) {
    if (p.accuracy >= target) {
      if (p.accuracy <= a_before)
        return p.*value;
      return t_before + (p.*value - t_before) * (target - a_before) / (p.accuracy - a_before);
    }
    t_before = p.*value;
    a_before = p.accuracy;
  }
  return -1;
}

double time_to(const std::vector<point>& curve, double target) {
  return value_to(curve, target, &point::seconds);
}

/// The accuracy a user had at training time `t`: that of the newest epoch
/// evaluated by then (0 before the first).
double accuracy_at(const std::vector<point>& curve, double t) {
  double a = 0;
  for (auto& p : curve)
    if (p.seconds <= t + 1e-9)
      a = p.accuracy;
  return a;
}

// --- profiles ----------------------------------------------------------------------

/// The `wan` profile's links: node i's host behind an uplink of rates[i] Mbit/s
/// (delayed where the kernel has netem); host `change_host`'s rate becomes
/// `change_to` `change_at` seconds into each run.
struct wan_links {
  std::vector<double> rates;
  double delay_ms = 0;
  size_t change_host = 0;
  double change_at = 0;
  double change_to = 0;
};

struct profile {
  std::string name;
  std::string description;
  config::cluster_config cfg;
  bool processes = false;      // one node process per node (else one process)
  std::vector<double> targets; // the last is the headline target
  std::optional<wan_links> wan;  // node processes on hosts of their own, slow links
};

/// Four platforms, LeNet-5, Fashion-MNIST, emulated slowdowns 1, 1, 3, 5.
config::cluster_config four_platforms(const std::string& id) {
  auto cfg = config::default_config();
  cfg.id = id;
  const double slow[] = {1, 1, 3, 5};
  for (size_t i = 0; i < cfg.nodes[0].platforms.size() && i < 4; ++i)
    cfg.nodes[0].platforms[i].slowdown = slow[i];
  return cfg;
}

/// The default cluster's four platforms as four node processes a..d of one
/// platform each, node i at hosts[i]:ports[i] with its platform's emulated
/// slowdown and its CPU limit (0: none); the balancer on a.
config::cluster_config four_node_processes(const std::string& id, const std::string hosts[4],
                                           const uint16_t ports[4], const double slowdowns[4],
                                           const double cpu_limits[4]) {
  auto cfg = config::default_config();
  cfg.id = id;
  auto platforms = cfg.nodes[0].platforms;
  cfg.nodes.clear();
  const char* names[] = {"a", "b", "c", "d"};
  for (size_t i = 0; i < 4 && i < platforms.size(); ++i) {
    config::node_config n;
    n.name = names[i];
    n.host = hosts[i];
    n.port = ports[i];
    n.cpu_limit = cpu_limits[i];
    auto pc = platforms[i];
    pc.slowdown = slowdowns[i];
    n.platforms.push_back(pc);
    cfg.nodes.push_back(n);
  }
  cfg.balancer_node = "a";
  return cfg;
}

profile make_profile(const std::string& name) {
  profile p;
  p.name = name;
  p.targets = {0.85, 0.86, 0.87};
  if (name == "static") {
    p.description = "4 platforms, emulated slowdowns 1 1 3 5, IID";
    p.cfg = four_platforms("bench-tta");
  } else if (name == "shifting") {
    // The load moves between the platforms every 8 s of the run, through
    // four arrangements of four distinct slowdowns (the fastest becomes the
    // slowest and the slowest the fastest), cycling for as long as a run
    // lasts.
    p.description = "4 platforms, emulated slowdowns 1 2 4 8 moving between them every 8 s, IID";
    p.cfg = four_platforms("bench-tta-shifting");
    const double arrangements[4][4] = {{1, 2, 4, 8}, {8, 4, 2, 1}, {2, 8, 1, 4}, {4, 1, 8, 2}};
    const double phase = 8;
    auto& ps = p.cfg.nodes[0].platforms;
    for (size_t i = 0; i < ps.size() && i < 4; ++i) {
      ps[i].slowdown = arrangements[0][i];
      ps[i].interference.clear();
      for (int k = 1; k * phase <= 1800; ++k)
        ps[i].interference.push_back({k * phase, arrangements[k % 4][i]});
    }
  } else if (name == "skewed") {
    p.description = "4 platforms, emulated slowdowns 1 1 3 5, label skew (Dirichlet alpha 0.1)";
    p.cfg = four_platforms("bench-tta-skewed");
    p.cfg.data.partition = "dirichlet";
    p.cfg.data.alpha = 0.1;
    p.targets = {0.55, 0.60, 0.65};
  } else if (name == "gpu") {
    // A mixed cluster: the first platform trains on the GPU, the other three
    // on one CPU core each; no emulated slowdown, the GPU is the fast one.
    p.description = "4 platforms: one on the GPU (cuda), three on one CPU core each, IID";
    p.cfg = config::default_config();
    p.cfg.id = "bench-tta-gpu";
    auto& ps = p.cfg.nodes[0].platforms;
    for (size_t i = 0; i < ps.size(); ++i) {
      ps[i].slowdown = 1;
      ps[i].threads = 1;
      ps[i].interference.clear();
    }
    if (!ps.empty()) {
      ps[0].name = "gpu";
      ps[0].device = "cuda";
    }
  } else if (name == "corunners") {
    // Four node processes of one platform each, with real CPU limits
    // (cgroup quotas, or a duty cycle where cgroups are not writable) and
    // real stress-ng co-runners; no emulated slowdown. The co-runners start
    // as children of their node and share its limit, like a job beside the
    // training on a small edge box.
    p.description = "4 node processes, CPU limits 0.8 0.8 0.25 0.15 cores, stress-ng co-runners "
                    "on b (on and off every 20 s) and c (from 30 s), IID";
    p.processes = true;
    const std::string hosts[] = {"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"};
    // Ten apart: each node's weights lane takes its port + 1.
    const uint16_t ports[] = {47431, 47441, 47451, 47461};
    const double none[] = {1, 1, 1, 1}, limits[] = {0.8, 0.8, 0.25, 0.15};
    p.cfg = four_node_processes("bench-tta-corunners", hosts, ports, none, limits);
    for (int k = 0; k < 30; ++k)
      p.cfg.nodes[1].corunners.push_back({"cpu", 1, 5.0 + 40.0 * k, 25.0 + 40.0 * k});
    p.cfg.nodes[2].corunners.push_back({"cpu", 1, 30.0, 0.0});
  } else if (name == "wan") {
    // Four node processes, each on a host of its own (a network namespace)
    // behind an uplink of its own rate, limited by a token bucket;
    // the compute is the static profile's (emulated slowdowns 1 1 3 5), so
    // the fast machine b sits behind the slowest link, and c's link falls
    // from 20 to 2 Mbit/s 60 s into each run.
    p.processes = true;
    wan_links links;
    links.rates = {100, 5, 20, 10};
    links.delay_ms = 20;
    links.change_host = 2;
    links.change_at = 60;
    links.change_to = 2;
    p.description = "4 node processes on hosts of their own (network namespaces), uplinks of 100 5 "
                    "20 10 Mbit/s (c's falls to 2 at 60 s), 20 ms delay where the kernel "
                    "has netem, emulated slowdowns 1 1 3 5, IID";
    const std::string hosts[] = {"10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"};
    const uint16_t ports[] = {47501, 47501, 47501, 47501};  // each host its own address
    const double slow[] = {1, 1, 3, 5}, none[] = {0, 0, 0, 0};
    p.cfg = four_node_processes("bench-tta-wan", hosts, ports, slow, none);
    p.wan = links;
  } else {
    throw config::config_error("bench tta: unknown profile '" + name
                               + "' (static, shifting, skewed, corunners, wan or gpu)");
  }
  return p;
}

// --- one run -----------------------------------------------------------------------

outcome run_strategy(const profile& prof, config::cluster_config cfg, const std::string& s,
                     const fs::path& dir, double wall_limit) {
  apply_strategy(cfg, s, "bench tta");
  cfg.output_dir = (dir / ("runs-" + file_name_of(s))).string();
  fs::remove_all(cfg.output_dir);
  fs::create_directories(cfg.output_dir);
  config::validate(cfg);
  auto start = std::chrono::steady_clock::now();
  fs::path csv;
  bool stopped = false;
  if (prof.wan) {
    // Fresh hosts and links for every run (the rate change is the run's).
    wan_hosts hosts("egwan", "10.77.0", prof.wan->rates, prof.wan->delay_ms);
    std::vector<std::vector<std::string>> prefixes;
    for (size_t i = 0; i < cfg.nodes.size() && i < hosts.size(); ++i)
      prefixes.push_back(hosts.prefix(i));
    std::mutex m;
    std::condition_variable cv;
    bool over = false;
    std::thread change([&] {
      std::unique_lock<std::mutex> lock(m);
      if (!cv.wait_for(lock, std::chrono::duration<double>(prof.wan->change_at),
                       [&] { return over; }) && prof.wan->change_host < hosts.size()) {
        hosts.set_rate(prof.wan->change_host, prof.wan->change_to);
        std::printf("    (%.0f s: node %s's link now %g Mbit/s)\n", prof.wan->change_at,
                    cfg.nodes.at(prof.wan->change_host).name.c_str(), prof.wan->change_to);
        std::fflush(stdout);
      }
    });
    struct stop_change {
      std::mutex& m;
      std::condition_variable& cv;
      bool& over;
      std::thread& t;
      ~stop_change() {
        {
          std::lock_guard<std::mutex> lock(m);
          over = true;
        }
        cv.notify_all();
        t.join();
      }
    } stop{m, cv, over, change};
    try {
      stopped = run_processes(cfg, cfg.output_dir, "bench tta", prefixes, wall_limit);
    } catch (const std::runtime_error& e) {
      // A node cut off by its link (it ends on its own, with an error,
      // once it finds itself in a minority) is what such links do: the run
      // is measured from what the balancer's node wrote, and said.
      std::printf("    (%s; the run is measured as the balancer saw it)\n", e.what());
      std::fflush(stdout);
    }
  } else if (prof.processes) {
    stopped = run_processes(cfg, cfg.output_dir, "bench tta", {}, wall_limit);
  }
  if (prof.processes) {
    for (auto& entry : fs::directory_iterator(cfg.output_dir))
      if (entry.is_directory() && fs::exists(entry.path() / "cluster.csv"))
        csv = entry.path() / "cluster.csv";
    if (csv.empty() && !stopped)
      throw std::runtime_error("bench tta: the nodes wrote no cluster.csv below "
                               + cfg.output_dir);
  } else {
    auto run = actors::run_node(cfg, "local", {}).run;
    csv = fs::path(cfg.output_dir) / run / "cluster.csv";
  }
  outcome o;
  o.strategy = s;
  o.stopped = stopped;
  o.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Stopped at the wall limit before its first epoch ended: no curve.
  if (!csv.empty())
    o.curve = read_curve(csv);
  for (const auto& n : cfg.nodes)
    for (const auto& p : n.platforms)
      o.device = o.device || p.device != "cpu";
  const auto metrics = csv.empty() ? std::vector<fs::path>{} : metrics_files(csv.parent_path());
  add_megabytes(o.curve, metrics, "bytes_sent", &point::megabytes, false);
  add_megabytes(o.curve, metrics, "link_bytes_sent", &point::lane_megabytes, true);
  o.megabytes = o.curve.empty() ? 0 : o.curve.back().megabytes;
  o.lane_megabytes = o.curve.empty() ? 0 : o.curve.back().lane_megabytes;
  for (auto& file : metrics)
    for (auto& f : read_platforms(file))
      o.platforms.push_back(f);
  for (auto& f : o.platforms)
    o.pooled_samples_per_second += f.samples_per_second();
  double sum = 0;
  bool all = true;
  for (double target : prof.targets) {
    o.time_to.push_back(time_to(o.curve, target));
    all = all && o.time_to.back() >= 0;
    sum += o.time_to.back();
  }
  o.mean_time = all && !prof.targets.empty() ? sum / static_cast<double>(prof.targets.size()) : -1;
  if (!prof.targets.empty()) {
    o.megabytes_to = value_to(o.curve, prof.targets.back(), &point::megabytes);
    o.lane_megabytes_to = value_to(o.curve, prof.targets.back(), &point::lane_megabytes);
  }
  o.final_accuracy = o.curve.empty() ? 0 : o.curve.back().accuracy;
  // Under label skew the averaged model's accuracy swings by points from
  // one epoch to the next: the mean of the last three is steadier.
  double last = 0, errors = 0;
  size_t n = 0, predicted = 0;
  for (size_t i = o.curve.size(); i-- > 0 && n < 3; ++n)
    last += o.curve[i].accuracy;
  o.last_accuracy = n ? last / static_cast<double>(n) : 0;
  for (auto& p : o.curve)
    if (p.prediction_error >= 0) {
      errors += p.prediction_error;
      ++predicted;
    }
  o.prediction_error = predicted ? errors / static_cast<double>(predicted) : -1;
  return o;
}

/// The pooled-compute limit's model: one platform (the first node's first,
/// without slowdown, co-runners or CPU limit) trains all the data by plain
/// SGD, in this process; the samples it needed to `target`.
double plain_sgd_samples_to(config::cluster_config cfg, const fs::path& dir, double target) {
  cfg.nodes.resize(1);
  auto& n = cfg.nodes.front();
  n.corunners.clear();
  n.cpu_limit = 0;
  n.cpu_schedule.clear();
  auto p = n.platforms.front();
  p.share = 0;
  p.slowdown = 1;
  p.interference.clear();
  p.data_dir.clear();
  n.platforms = {p};
  cfg.balancer_node = n.name;
  cfg.quorum = 0;
  cfg.strategy = config::strategy_config{};
  cfg = actors::as_one_process(cfg);
  cfg.output_dir = (dir / "runs-plain-sgd").string();
  fs::remove_all(cfg.output_dir);
  fs::create_directories(cfg.output_dir);
  config::validate(cfg);
  auto run = actors::run_node(cfg, "local", {}).run;
  auto curve = read_curve(fs::path(cfg.output_dir) / run / "cluster.csv");
  return value_to(curve, target, &point::samples);
}

void plot(const std::vector<outcome>& results, const fs::path& dir, double target,
          const std::string& title) {
  auto data = dir / "tta.csv";
  {
    std::ofstream out(data);
    out << "strategy,epoch,training_seconds,averaged_accuracy,megabytes_sent\n";
    for (auto& r : results)
      for (auto& p : r.curve)
        out << r.strategy << ',' << p.epoch << ',' << p.seconds << ',' << p.accuracy << ','
            << p.megabytes << '\n';
  }
  auto script = dir / "tta.gp";
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 900,560 noenhanced\n"
       << "set output '" << (dir / "tta.png").string() << "'\n"
       << "set title '" << title << "'\n"
       << "set xlabel 'training time (s)'\nset ylabel 'averaged-model test accuracy'\n"
       << "set key bottom right\nset grid\nset datafile separator ','\n"
       << "set arrow from graph 0, first " << target << " to graph 1, first " << target
       << " nohead dashtype 2\n"
       << "plot";
    for (size_t i = 0; i < results.size(); ++i) {
      auto file = dir / ("tta-" + file_name_of(results[i].strategy) + ".csv");
      std::ofstream part(file);
      for (auto& p : results[i].curve)
        part << p.seconds << ',' << p.accuracy << ',' << std::max(p.megabytes, 1e-3) << '\n';
      gp << (i ? ", " : " ") << "'" << file.string() << "' using 1:2 with linespoints title '"
         << results[i].strategy << "'";
    }
    gp << "\n";
    // The same curves against the bytes sent (every platform's, cumulative;
    // log scale: strategies differ by orders of magnitude).
    gp << "set output '" << (dir / "tta-bytes.png").string() << "'\n"
       << "set xlabel 'MB sent by every platform (log scale)'\nset logscale x\nplot";
    for (size_t i = 0; i < results.size(); ++i)
      gp << (i ? ", " : " ") << "'"
         << (dir / ("tta-" + file_name_of(results[i].strategy) + ".csv")).string()
         << "' using 3:2 with linespoints title '" << results[i].strategy << "'";
    gp << "\n";
  }
  auto cmd = "gnuplot '" + script.string() + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0)
    std::printf("(gnuplot failed: no plot; the figures are in %s)\n", data.string().c_str());
}

/// The profile of `t`, or its cluster file, with the targets, overrides and
/// epochs of `t` applied to its cluster.
profile configured_profile(const tta_options& t) {
  auto prof = make_profile(t.profile);
  if (!t.config_file.empty()) {
    prof.cfg = config::load(t.config_file);
    prof.description = "cluster file " + t.config_file;
    prof.processes = t.profile == "corunners" || prof.cfg.nodes.size() > 1;
    prof.wan.reset();  // the file's hosts, not the profile's
  }
  if (!t.targets.empty())
    prof.targets = t.targets;
  else if (t.target > 0)
    prof.targets = {t.target - 0.02, t.target - 0.01, t.target};
  std::sort(prof.targets.begin(), prof.targets.end());
  auto& base = prof.cfg;
  // The clock measures training: platforms do not evaluate their own models
  // (the balancer evaluates the averaged model between epochs, off the
  // clock). `--set train.evaluate_every=1` puts it back.
  base.train.evaluate_every = 0;
  for (auto& o : t.overrides)
    config::apply_override(base, o);
  base.train.epochs = t.epochs;
  if (!prof.processes)
    base = actors::as_one_process(base);
  return prof;
}

/// What each platform trained: its share of all samples against its share
/// of the cluster's speed (samples/s, summed over platforms).
void print_platforms(const outcome& o) {
  double speed = 0;
  uint64_t samples = 0;
  for (const auto& f : o.platforms) {
    speed += f.samples_per_second();
    samples += f.samples;
  }
  for (const auto& f : o.platforms)
    std::printf("    %-8s %9.0f samples/s (%5.1f %% of the cluster's), trained %8llu "
                "samples (%5.1f %%), r %.3f in its first epoch, %.3f in its last\n",
                f.name.c_str(), f.samples_per_second(),
                speed > 0 ? 100 * f.samples_per_second() / speed : 0.0,
                static_cast<unsigned long long>(f.samples),
                samples ? 100.0 * static_cast<double>(f.samples) / samples : 0.0,
                f.first_ratio, f.last_ratio);
}

/// Every strategy of `t` on `cfg` (one seed) in `dir`: a line each, its
/// rows in `all` and the seed's plot.
std::vector<outcome> run_seed(const profile& prof, const tta_options& t,
                              const config::cluster_config& cfg, const fs::path& dir,
                              double headline, std::ofstream& all) {
  std::vector<outcome> results;
  for (auto& s : t.strategies) {
    auto o = run_strategy(prof, cfg, s, dir, t.wall_limit);
    const auto ended = o.curve.empty() ? 0u : o.curve.back().epoch + 1;  // epochs count from 0
    std::printf("  seed %llu %-12s %4.0f s wall%s; accuracy after %u epochs %.4f; %.2f %s; "
                "%.2f MB sent in all\n",
                static_cast<unsigned long long>(cfg.seed), s.c_str(), o.wall_seconds,
                o.stopped ? (", stopped at the wall limit of " + fixed(t.wall_limit, 0) + " s")
                              .c_str()
                          : "",
                o.stopped ? ended : t.epochs, o.final_accuracy, headline,
                o.time_to.back() < 0 ? "not reached"
                                     : ("after " + fixed(o.time_to.back(), 1) + " s and "
                                        + fixed(o.megabytes_to, 2) + " MB").c_str(),
                o.megabytes);
    if (o.lane_megabytes > 0)
      std::printf("    on the nodes' weights lanes (gossip and the models of the balancer's "
                  "average): %s MB to %.2f, %.2f MB in all\n",
                  o.lane_megabytes_to < 0 ? "n/a" : fixed(o.lane_megabytes_to, 2).c_str(),
                  headline, o.lane_megabytes);
    if (o.device)
      print_platforms(o);
    std::fflush(stdout);
    results.push_back(std::move(o));
  }
  // The pooled-compute limit: plain SGD's samples to the target at the
  // best summed throughput a strategy's platforms showed.
  compute_limit limit;
  for (auto& r : results)
    limit.samples_per_second = std::max(limit.samples_per_second, r.pooled_samples_per_second);
  limit.samples_to = plain_sgd_samples_to(cfg, dir, headline);
  std::printf("  seed %llu plain SGD, one model: %s samples to %.2f; at the platforms' summed "
              "%.0f samples/s: %s (the pooled-compute limit)\n",
              static_cast<unsigned long long>(cfg.seed),
              limit.samples_to < 0 ? "n/a" : fixed(limit.samples_to, 0).c_str(), headline,
              limit.samples_per_second,
              limit.seconds() < 0 ? "n/a" : (fixed(limit.seconds(), 1) + " s").c_str());
  std::fflush(stdout);
  for (auto& r : results)
    r.limit_seconds = limit.seconds();
  // Accuracy at equal training time: when the shortest run ended.
  double equal = std::numeric_limits<double>::infinity();
  // A run stopped at the wall limit did not end: it does not set it.
  for (auto& r : results)
    if (!r.curve.empty() && !r.stopped)
      equal = std::min(equal, r.curve.back().seconds);
  for (auto& r : results) {
    r.equal_time_accuracy = accuracy_at(r.curve, equal);
    all << prof.name << ',' << cfg.seed << ',' << r.strategy << ',' << r.time_to.back() << ','
        << r.mean_time << ',' << r.final_accuracy << ',' << r.last_accuracy << ',' << equal << ','
        << r.equal_time_accuracy << ',' << r.prediction_error << ',' << r.megabytes_to << ','
        << r.megabytes << ',' << r.limit_seconds << ',' << r.lane_megabytes_to << ','
        << r.lane_megabytes << '\n';
  }
  plot(results, dir, headline,
       "tta, profile " + prof.name + ", seed " + std::to_string(cfg.seed));
  return results;
}

/// The outcome of strategy `s` among `rs`, or null.
const outcome* find_strategy(const std::vector<outcome>& rs, const std::string& s) {
  for (auto& r : rs)
    if (r.strategy == s)
      return &r;
  return nullptr;
}

/// How many times faster `time` is than `base_time` (-1: either undefined).
double speedup(double base_time, double time) {
  return base_time > 0 && time > 0 ? base_time / time : -1.0;
}

/// One strategy's figures over the seeds, and against GoSGD and
/// asynchronous GoSGD of the same seeds.
struct comparison {
  spread headline_time, mean_time, final_acc, last_acc, vs_gosgd, vs_async, mean_vs_gosgd,
    mean_vs_async, diff_final, diff_last, diff_equal, prediction, megabytes_to, bytes_vs_gosgd,
    of_limit, lane_megabytes_to;
};

comparison compare(const std::vector<std::vector<outcome>>& seeds, const std::string& s) {
  comparison c;
  for (auto& rs : seeds) {
    auto* r = find_strategy(rs, s);
    auto* g = find_strategy(rs, "gosgd");
    auto* a = find_strategy(rs, "gosgd-async");
    c.headline_time.add(r->time_to.back(), r->time_to.back() >= 0);
    c.megabytes_to.add(r->megabytes_to, r->megabytes_to >= 0);
    if (r->lane_megabytes > 0)
      c.lane_megabytes_to.add(r->lane_megabytes_to, r->lane_megabytes_to >= 0);
    if (r->limit_seconds > 0 && r->time_to.back() > 0)
      c.of_limit.add(r->limit_seconds / r->time_to.back());
    else
      c.of_limit.add(-1, false);
    c.mean_time.add(r->mean_time, r->mean_time >= 0);
    c.final_acc.add(r->final_accuracy);
    c.last_acc.add(r->last_accuracy);
    if (r->prediction_error >= 0)
      c.prediction.add(100 * r->prediction_error);
    if (g) {
      double x = speedup(g->time_to.back(), r->time_to.back());
      c.vs_gosgd.add(x, x > 0);
      x = speedup(g->mean_time, r->mean_time);
      c.mean_vs_gosgd.add(x, x > 0);
      c.diff_final.add(100 * (r->final_accuracy - g->final_accuracy));
      x = g->megabytes_to > 0 && r->megabytes_to > 0 ? g->megabytes_to / r->megabytes_to : -1;
      c.bytes_vs_gosgd.add(x, x > 0);
      c.diff_last.add(100 * (r->last_accuracy - g->last_accuracy));
      c.diff_equal.add(100 * (r->equal_time_accuracy - g->equal_time_accuracy));
    }
    if (a) {
      double x = speedup(a->time_to.back(), r->time_to.back());
      c.vs_async.add(x, x > 0);
      x = speedup(a->mean_time, r->mean_time);
      c.mean_vs_async.add(x, x > 0);
    }
  }
  return c;
}

/// Prints strategy `s`'s figures over the seeds; appends its part of the
/// summary line to `summary`.
void print_strategy(const std::vector<std::vector<outcome>>& seeds, const std::string& s,
                    const tta_options& t, double headline, const std::string& targets_text,
                    std::string& summary) {
  const auto c = compare(seeds, s);
  std::printf("%s:\n", s.c_str());
  std::printf("  time to %.2f            %s\n", headline, c.headline_time.show("%.1f", " s").c_str());
  std::printf("  MB sent to %.2f         %s\n", headline, c.megabytes_to.show("%.2f").c_str());
  if (!c.lane_megabytes_to.values.empty() || c.lane_megabytes_to.missing)
    std::printf("  MB on the lanes to %.2f %s (the gossip and the average's models)\n", headline,
                c.lane_megabytes_to.show("%.2f").c_str());
  std::printf("  of the pooled-compute limit %s (the limit's time over the strategy's)\n",
              c.of_limit.show("%.2f").c_str());
  std::printf("  mean time to %-10s %s\n", targets_text.c_str(), c.mean_time.show("%.1f", " s").c_str());
  size_t stopped = 0;
  for (auto& rs : seeds)
    if (auto* r = find_strategy(rs, s); r && r->stopped)
      ++stopped;
  if (stopped)
    std::printf("  accuracy at its end      %s (stopped at the wall limit in %zu of %zu seeds)\n",
                c.final_acc.show("%.4f").c_str(), stopped, seeds.size());
  else
    std::printf("  accuracy after %2u epochs %s\n", t.epochs, c.final_acc.show("%.4f").c_str());
  std::printf("  mean of the last 3       %s\n", c.last_acc.show("%.4f").c_str());
  if (!c.prediction.values.empty())
    std::printf("  predicted epoch times off by %s (the balancer's, mean over epochs)\n",
                c.prediction.show("%.1f", " %").c_str());
  if (s != "gosgd") {
    std::printf("  vs gosgd: %s sooner to %.2f, %s sooner on the mean; %s pts after %u "
                "epochs (%s on the last 3), %s pts at equal training time\n",
                c.vs_gosgd.show("%.2f", "x").c_str(), headline,
                c.mean_vs_gosgd.show("%.2f", "x").c_str(), c.diff_final.show("%+.2f").c_str(),
                t.epochs, c.diff_last.show("%+.2f").c_str(), c.diff_equal.show("%+.2f").c_str());
    std::printf("  vs gosgd: %s fewer bytes to %.2f\n", c.bytes_vs_gosgd.show("%.1f", "x").c_str(),
                headline);
    if (s != "gosgd-async" && find_strategy(seeds.front(), "gosgd-async"))
      std::printf("  vs gosgd-async: %s sooner to %.2f, %s sooner on the mean\n",
                  c.vs_async.show("%.2f", "x").c_str(), headline,
                  c.mean_vs_async.show("%.2f", "x").c_str());
    summary += " " + s + " " + c.vs_gosgd.show("%.2f", "x") + " (mean of targets "
               + c.mean_vs_gosgd.show("%.2f", "x") + ") vs gosgd"
               + (s != "gosgd-async" && find_strategy(seeds.front(), "gosgd-async")
                    ? ", " + c.vs_async.show("%.2f", "x") + " vs gosgd-async"
                    : std::string{})
               + ", " + c.diff_final.show("%+.2f") + " pts;";
  }
}

} // namespace

int tta(const options& opt, const tta_options& t) {
  auto prof = configured_profile(t);
  if (t.wall_limit > 0 && !prof.processes)
    throw config::config_error("bench tta: --wall-limit stops node processes: profile '"
                               + t.profile + "' runs in one process (corunners, wan or a "
                               "cluster file of several nodes have processes)");
  if (prof.wan) {
    try {
      wan_hosts probe("egwan", "10.77.0", prof.wan->rates, prof.wan->delay_ms);
      if (!probe.delayed() && prof.wan->delay_ms > 0) {
        std::printf("tta: profile wan: the kernel has no netem here: links are rate-limited, "
                    "not delayed\n");
        prof.wan->delay_ms = 0;
      }
    } catch (const wan_unavailable& e) {
      std::printf("tta: profile wan skipped: %s\n", e.what());
      return 0;
    }
  }
  auto& base = prof.cfg;
  const double headline = prof.targets.back();
  auto root = fs::absolute(fs::path(opt.out_dir) / "tta" / prof.name);
  fs::create_directories(root);
  base.storage_dir = (root / "data").string();
  std::string targets_text;
  for (double x : prof.targets)
    targets_text += (targets_text.empty() ? "" : ", ") + fixed(x, 2);
  std::printf("tta: profile %s: %s; %s, %u epochs, targets %s, seeds %llu..%llu\n",
              prof.name.c_str(), prof.description.c_str(), base.train.model.c_str(), t.epochs,
              targets_text.c_str(), static_cast<unsigned long long>(base.seed),
              static_cast<unsigned long long>(base.seed + t.repeat - 1));
  std::fflush(stdout);

  // Per seed, per strategy.
  std::vector<std::vector<outcome>> seeds;
  const uint64_t first_seed = base.seed;
  std::ofstream all(root / "tta-seeds.csv");
  all << "profile,seed,strategy,time_to_headline,mean_time_to_targets,final_accuracy,"
         "last3_accuracy,equal_time,accuracy_at_equal_time,prediction_error,megabytes_to_headline,"
         "megabytes,pooled_compute_limit_seconds,lane_megabytes_to_headline,lane_megabytes\n";
  for (int k = 0; k < t.repeat; ++k) {
    auto cfg = base;
    cfg.seed = first_seed + static_cast<uint64_t>(k);
    auto dir = root / ("seed-" + std::to_string(cfg.seed));
    fs::create_directories(dir);
    // Each seed starts without history: EdgeGossip's predictors learn from
    // the runs before theirs in this seed (the paper's history), not from
    // another seed's.
    fs::remove_all(base.storage_dir);
    seeds.push_back(run_seed(prof, t, cfg, dir, headline, all));
  }

  // The figures of each strategy against GoSGD and asynchronous GoSGD, per
  // seed, then their median and range over the seeds.
  std::printf("\nprofile %s, %d seed(s): median [min .. max]; speed-ups are GoSGD's (or async "
              "GoSGD's) time over the strategy's; n/a: a target not reached\n",
              prof.name.c_str(), t.repeat);
  std::string summary;
  for (auto& s : t.strategies)
    print_strategy(seeds, s, t, headline, targets_text, summary);
  std::printf("figures: %s, plots: %s/seed-N/tta.png\n", (root / "tta-seeds.csv").string().c_str(),
              root.string().c_str());
  std::printf("summary: profile %s, %d seed(s), time to %.2f (median [range]):%s\n",
              prof.name.c_str(), t.repeat, headline, summary.c_str());
  return 0;
}

} // namespace eg::bench
