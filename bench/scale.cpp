// `edgegossip bench scale`: how many platforms one process hosts with a
// small model (logistic regression on Fashion-MNIST) while GoSGD still
// reaches consensus, and a cluster of several node processes on 127.0.0.1
// started the way `edgegossip launch` starts them. For each size: peak
// memory (RSS) per platform, gossip messages per second, and the spread of
// the platforms' models over the epochs (the standard deviation and range
// of their own test accuracies; consensus = the spread shrinks while the
// averaged model's accuracy rises). Each in-process size runs in its own
// child process (this binary, a hidden option), so its memory is its own.

#include "bench/bench.hpp"
#include "bench/common.hpp"
#include "bench/ports.hpp"

#include "actors/node/runtime.hpp"
#include "config/config.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace eg::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

/// Resident memory of a process in bytes (0 if it is gone).
double rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return 1024.0 * std::stod(line.substr(6));
  return 0;
}

/// The children of a process (Linux 3.5+ with CONFIG_PROC_CHILDREN).
std::vector<pid_t> children(pid_t pid) {
  std::vector<pid_t> out;
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t c; f >> c;)
    out.push_back(c);
  return out;
}

/// Samples the summed RSS of some processes ten times a second; keeps the peak.
class rss_watch {
public:
  explicit rss_watch(std::function<std::vector<pid_t>()> pids)
      : pids_(std::move(pids)), thread_([this] { run(); }) {}
  ~rss_watch() { stop(); }
  void stop() {
    over_ = true;
    if (thread_.joinable())
      thread_.join();
  }
  double peak() const { return peak_; }
  size_t most_processes() const { return most_; }

private:
  void run() {
    while (!over_) {
      double sum = 0;
      auto ps = pids_();
      for (pid_t p : ps)
        sum += rss_bytes(p);
      peak_ = std::max(peak_.load(), sum);
      most_ = std::max(most_.load(), ps.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::function<std::vector<pid_t>()> pids_;
  std::atomic<bool> over_{false};
  std::atomic<double> peak_{0};
  std::atomic<size_t> most_{0};
  std::thread thread_;
};

using row = std::map<std::string, std::string>;

std::vector<row> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("bench scale: no " + path.string());
  std::string line;
  std::getline(in, line);
  auto cols = csv_cells(line);
  std::vector<row> rows;
  while (std::getline(in, line)) {
    auto cells = csv_cells(line);
    row r;
    for (size_t i = 0; i < cols.size() && i < cells.size(); ++i)
      r[cols[i]] = cells[i];
    rows.push_back(std::move(r));
  }
  return rows;
}

double num(const row& r, const std::string& col) {
  auto i = r.find(col);
  return i == r.end() || i->second.empty() ? 0 : std::stod(i->second);
}

struct epoch_spread {
  uint32_t epoch = 0;
  size_t platforms = 0;
  double mean_accuracy = 0, std_accuracy = 0, min_accuracy = 0, max_accuracy = 0;
  double averaged_accuracy = 0;  // of the averaged model (cluster.csv)
  double training_seconds = 0;
};

struct run_figures {
  size_t platforms = 0;
  double wall_seconds = 0;
  double training_seconds = 0;
  double messages = 0;
  double peak_rss = 0;
  std::vector<epoch_spread> epochs;
};

/// Figures of a finished run from its run directory.
run_figures read_run(const std::filesystem::path& run_dir) {
  run_figures f;
  auto metrics = read_csv(run_dir / "metrics.csv");
  auto cluster = read_csv(run_dir / "cluster.csv");
  std::map<uint32_t, std::vector<double>> acc;
  std::set<std::string> names;
  for (auto& r : metrics) {
    acc[static_cast<uint32_t>(num(r, "epoch"))].push_back(num(r, "test_accuracy"));
    f.messages += num(r, "messages_sent");
    names.insert(r.at("platform"));
  }
  f.platforms = names.size();
  for (auto& [epoch, v] : acc) {
    epoch_spread s;
    s.epoch = epoch;
    s.platforms = v.size();
    double sum = 0, sq = 0;
    for (double a : v) {
      sum += a;
      sq += a * a;
    }
    s.mean_accuracy = sum / static_cast<double>(v.size());
    s.std_accuracy = std::sqrt(std::max(0.0, sq / static_cast<double>(v.size())
                                               - s.mean_accuracy * s.mean_accuracy));
    s.min_accuracy = *std::min_element(v.begin(), v.end());
    s.max_accuracy = *std::max_element(v.begin(), v.end());
    for (auto& c : cluster)
      if (static_cast<uint32_t>(num(c, "epoch")) == epoch) {
        s.averaged_accuracy = num(c, "averaged_accuracy");
        s.training_seconds = num(c, "training_seconds");
      }
    f.training_seconds = std::max(f.training_seconds, s.training_seconds);
    f.epochs.push_back(s);
  }
  return f;
}

/// The benchmark's cluster: logreg, batch 8 so that even 1,024 platforms on
/// 60,000 points train several iterations an epoch, exchange probability 0.2.
config::cluster_config scale_config(const options& opt, const scale_options& s,
                                    const std::string& id) {
  auto cfg = config::default_config();
  cfg.id = id;
  cfg.data.dir = opt.data_dir;
  cfg.data.test_samples = s.test_samples;
  cfg.train.model = "logreg";
  cfg.train.batch = s.batch;
  cfg.train.epochs = s.epochs;
  cfg.strategy.name = "gosgd";
  cfg.strategy.exchange_probability = s.exchange_probability;
  return cfg;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void print_spread(const run_figures& f) {
  std::printf("    %5s %9s %9s %9s %9s %9s %10s\n", "epoch", "mean acc", "std acc", "min acc",
              "max acc", "averaged", "train s");
  for (auto& e : f.epochs)
    std::printf("    %5u %9.4f %9.4f %9.4f %9.4f %9.4f %10.2f\n", e.epoch, e.mean_accuracy,
                e.std_accuracy, e.min_accuracy, e.max_accuracy, e.averaged_accuracy,
                e.training_seconds);
}

/// In the child: one run of `n` platforms in this process; prints "result:
/// RUN_DIR" so the parent reads the figures.
int one_process(const options& opt, const scale_options& s) {
  const int n = s.child_platforms;
  auto cfg = scale_config(opt, s, "bench-scale");
  auto dir = std::filesystem::absolute(std::filesystem::path(opt.out_dir) / "scale");
  cfg.storage_dir = (dir / ("data-" + std::to_string(n))).string();
  cfg.output_dir = (dir / ("runs-" + std::to_string(n))).string();
  std::filesystem::remove_all(cfg.storage_dir);
  std::filesystem::remove_all(cfg.output_dir);
  cfg.nodes[0].platforms.clear();
  for (int i = 0; i < n; ++i)
    cfg.nodes[0].platforms.push_back({"p" + std::to_string(i), 1, 0.0, 1.0, {}});
  cfg = actors::as_one_process(cfg);
  config::validate(cfg);
  auto run = actors::run_node(cfg, "local", {}).run;
  if (run.empty())
    return 1;
  std::printf("result: %s\n", (std::filesystem::path(cfg.output_dir) / run).string().c_str());
  return 0;
}

/// Runs a command line, returning its exit status and its standard output;
/// `watch` gets the child's pid while it runs.
struct child_run {
  int status = -1;
  std::string out;
  double peak_rss = 0;
  size_t processes = 0;
  double seconds = 0;
};

child_run run_child(const std::vector<std::string>& args, bool with_children) {
  int out[2];
  if (::pipe(out) != 0)
    throw std::runtime_error("bench scale: pipe failed");
  auto start = clock_type::now();
  pid_t pid = ::fork();
  if (pid < 0)
    throw std::runtime_error("bench scale: fork failed");
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  ::close(out[1]);
  child_run r;
  {
    rss_watch watch([pid, with_children] {
      std::vector<pid_t> ps{pid};
      if (with_children)
        for (pid_t c : children(pid))
          ps.push_back(c);
      return ps;
    });
    char buf[4096];
    for (ssize_t k; (k = ::read(out[0], buf, sizeof buf)) > 0;)
      r.out.append(buf, static_cast<size_t>(k));
    ::close(out[0]);
    ::waitpid(pid, &r.status, 0);
    watch.stop();
    r.peak_rss = watch.peak();
    r.processes = watch.most_processes();
  }
  r.seconds = seconds_since(start);
  return r;
}

using sized_figures = std::vector<std::pair<size_t, run_figures>>;

/// The command line of a child run of this benchmark.
std::vector<std::string> child_args(const options& opt, const scale_options& s) {
  std::vector<std::string> a{"edgegossip", "bench", "scale", "--data", opt.data_dir,
                             "--out", opt.out_dir, "--epochs", std::to_string(s.epochs)};
  return a;
}

/// Platforms in one process: each size of s.platforms in a child process;
/// prints a row and the spread per size, and a failed size into `summary`.
sized_figures run_in_process(const options& opt, const scale_options& s, std::string& summary) {
  sized_figures in_process;
  std::printf("\n%9s %8s %12s %14s %11s %12s %12s\n", "platforms", "wall s", "peak RSS MB",
              "MB / platform", "messages/s", "spread e1", "spread last");
  double baseline_rss = 0;
  size_t baseline_n = 0;
  for (int n : s.platforms) {
    auto args = child_args(opt, s);
    args.insert(args.end(), {"--scale-platforms", std::to_string(n)});
    auto c = run_child(args, false);
    auto at = c.out.find("result: ");
    if (c.status != 0 || at == std::string::npos) {
      std::printf("%9d  failed (exit status %d)\n", n, c.status);
      summary += " " + std::to_string(n) + " platforms failed;";
      continue;
    }
    auto run_dir = c.out.substr(at + 8);
    run_dir = run_dir.substr(0, run_dir.find('\n'));
    auto f = read_run(run_dir);
    f.wall_seconds = c.seconds;
    f.peak_rss = c.peak_rss;
    // Memory per platform: the growth over the smallest run, per platform added.
    double per = 0;
    if (baseline_n == 0) {
      baseline_rss = f.peak_rss;
      baseline_n = f.platforms;
    } else {
      per = (f.peak_rss - baseline_rss) / static_cast<double>(f.platforms - baseline_n);
    }
    const double rate = f.training_seconds > 0 ? f.messages / f.training_seconds : 0;
    std::printf("%9zu %8.1f %12.0f %14s %11.0f %12.4f %12.4f\n", f.platforms, f.wall_seconds,
                f.peak_rss / 1e6, per > 0 ? fmt("%.3f", per / 1e6).c_str() : "(base)", rate,
                f.epochs.empty() ? 0 : f.epochs.front().std_accuracy,
                f.epochs.empty() ? 0 : f.epochs.back().std_accuracy);
    print_spread(f);
    std::fflush(stdout);
    in_process.emplace_back(f.platforms, f);
  }
  return in_process;
}

/// The cluster of s.nodes node processes on 127.0.0.1, each on a free port.
config::cluster_config nodes_config(const options& opt, const scale_options& s,
                                    const std::filesystem::path& dir) {
  auto cfg = scale_config(opt, s, "bench-scale-nodes");
  cfg.storage_dir = (dir / "data-nodes").string();
  cfg.output_dir = (dir / "runs-nodes").string();
  std::filesystem::remove_all(cfg.storage_dir);
  std::filesystem::remove_all(cfg.output_dir);
  cfg.nodes.clear();
  for (int i = 0; i < s.nodes; ++i) {
    config::node_config node;
    node.name = "n" + std::to_string(i);
    node.host = "127.0.0.1";
    node.port = free_port();
    for (int j = 0; j < s.platforms_per_node; ++j)
      node.platforms.push_back({node.name + "p" + std::to_string(j), 1, 0.0, 1.0, {}});
    cfg.nodes.push_back(node);
  }
  cfg.balancer_node = cfg.nodes.front().name;
  config::validate(cfg);
  return cfg;
}

/// Node processes on 127.0.0.1 started by `edgegossip launch`; their figures
/// into `multi`, printed. False when the run failed.
bool run_nodes(const options& opt, const scale_options& s, const std::filesystem::path& dir,
               run_figures& multi) {
  auto cfg = nodes_config(opt, s, dir);
  auto file = dir / "nodes.toml";
  std::ofstream(file) << config::to_toml(cfg);
  std::printf("\n%d node processes on 127.0.0.1, %d platform%s each (edgegossip launch "
              "--config %s)\n",
              s.nodes, s.platforms_per_node, s.platforms_per_node > 1 ? "s" : "",
              file.string().c_str());
  std::fflush(stdout);
  auto c = run_child({"edgegossip", "launch", "--config", file.string()}, true);
  // The balancer's node writes the run directory.
  std::filesystem::path run_dir;
  if (std::filesystem::exists(cfg.output_dir))
    for (auto& e : std::filesystem::directory_iterator(cfg.output_dir))
      if (e.is_directory() && std::filesystem::exists(e.path() / "cluster.csv"))
        run_dir = e.path();
  if (c.status != 0 || run_dir.empty()) {
    std::printf("  failed (exit status %d); output:\n%s\n", c.status, c.out.c_str());
    return false;
  }
  multi = read_run(run_dir);
  multi.wall_seconds = c.seconds;
  multi.peak_rss = c.peak_rss;
  const double rate = multi.training_seconds > 0 ? multi.messages / multi.training_seconds : 0;
  std::printf("  %zu platforms on %zu processes (launcher included): wall %.1f s, peak RSS "
              "%.0f MB in all (%.0f MB per node), %.0f messages/s\n",
              multi.platforms, c.processes, multi.wall_seconds, multi.peak_rss / 1e6,
              multi.peak_rss / 1e6 / s.nodes, rate);
  print_spread(multi);
  return true;
}

/// Spread of the platforms' accuracies over the epochs: scale.csv, the
/// plotted series (scale-N.csv), scale.gp and gnuplot's scale.png.
void plot_spread(const std::filesystem::path& dir, const scale_options& s,
                 const sized_figures& in_process, const run_figures& multi, bool multi_ok) {
  {
    std::ofstream gp(dir / "scale.gp");
    gp << "set terminal pngcairo size 900,520 noenhanced\n"
       << "set output '" << (dir / "scale.png").string() << "'\n"
       << "set title 'Spread of the platforms'' models: std of their test accuracies'\n"
       << "set xlabel 'training time (s)'\nset ylabel 'std of platform accuracy'\n"
       << "set logscale y\nset key top right\nset grid\nset datafile separator ','\nplot";
    std::vector<std::pair<std::string, const run_figures*>> series;
    for (auto& [n, f] : in_process)
      series.emplace_back(std::to_string(n) + " platforms, 1 process", &f);
    if (multi_ok)
      series.emplace_back(std::to_string(s.nodes) + " processes", &multi);
    std::ofstream csv(dir / "scale.csv");
    csv << "series,epoch,training_seconds,mean_accuracy,std_accuracy,min_accuracy,max_accuracy,"
           "averaged_accuracy\n";
    for (size_t i = 0; i < series.size(); ++i) {
      auto part = dir / ("scale-" + std::to_string(i) + ".csv");
      std::ofstream p(part);
      for (auto& e : series[i].second->epochs) {
        p << e.training_seconds << ',' << std::max(e.std_accuracy, 1e-5) << '\n';
        csv << series[i].first << ',' << e.epoch << ',' << e.training_seconds << ','
            << e.mean_accuracy << ',' << e.std_accuracy << ',' << e.min_accuracy << ','
            << e.max_accuracy << ',' << e.averaged_accuracy << '\n';
      }
      gp << (i ? ", " : " ") << "'" << part.string() << "' using 1:2 with linespoints title '"
         << series[i].first << "'";
    }
    gp << "\n";
  }
  if (std::system(("gnuplot '" + (dir / "scale.gp").string() + "' 2>/dev/null").c_str()) != 0)
    std::printf("(gnuplot failed: no plot)\n");
}

/// Prints the summary line; `summary` holds the failed sizes so far.
void print_summary(const scale_options& s, const sized_figures& in_process,
                   const run_figures& multi, bool multi_ok, std::string summary) {
  size_t most = 0;
  for (auto& [n, f] : in_process) {
    bool converging = f.epochs.size() >= 2
                      && f.epochs.back().std_accuracy < f.epochs.front().std_accuracy;
    summary += " " + std::to_string(n) + " platforms: "
               + fmt("%.0f", f.training_seconds > 0 ? f.messages / f.training_seconds : 0)
               + " msg/s, spread " + fmt("%.4f", f.epochs.front().std_accuracy) + " -> "
               + fmt("%.4f", f.epochs.back().std_accuracy) + ";";
    if (converging)
      most = std::max(most, n);
  }
  if (multi_ok)
    summary += " " + std::to_string(s.nodes) + " processes: "
               + fmt("%.0f", multi.training_seconds > 0 ? multi.messages / multi.training_seconds : 0)
               + " msg/s, spread " + fmt("%.4f", multi.epochs.front().std_accuracy) + " -> "
               + fmt("%.4f", multi.epochs.back().std_accuracy) + ";";
  std::printf("summary: scale: up to %zu platforms in one process with shrinking spread "
              "(goal >= 1024: %s); %d node processes %s;%s\n",
              most, most >= 1024 ? "met" : "missed", s.nodes, multi_ok ? "ran" : "failed",
              summary.c_str());
}

} // namespace

int scale(const options& opt, const scale_options& s) {
  if (s.child_platforms > 0)
    return one_process(opt, s);
  auto dir = std::filesystem::absolute(std::filesystem::path(opt.out_dir) / "scale");
  std::filesystem::create_directories(dir);
  std::printf("scale: GoSGD, logistic regression on Fashion-MNIST (60,000 points split "
              "equally), batch %lld, exchange probability %.2f, %u epochs, %lld test points "
              "per evaluation\n",
              static_cast<long long>(s.batch), s.exchange_probability, s.epochs,
              static_cast<long long>(s.test_samples));
  std::fflush(stdout);

  std::string summary;
  // -- platforms in one process -------------------------------------------------
  const auto in_process = run_in_process(opt, s, summary);

  // -- node processes on 127.0.0.1 -------------------------------------------------
  run_figures multi;
  bool multi_ok = false;
  if (s.nodes > 0)
    multi_ok = run_nodes(opt, s, dir, multi);

  // -- plot: spread of the platforms' accuracies over the epochs -----------------------
  plot_spread(dir, s, in_process, multi, multi_ok);
  std::printf("figures: %s, plot: %s\n", (dir / "scale.csv").string().c_str(),
              (dir / "scale.png").string().c_str());

  print_summary(s, in_process, multi, multi_ok, std::move(summary));
  return 0;
}

} // namespace eg::bench
