// `edgegossip bench traffic`: how many bytes each gossip strategy sends to
// reach a target accuracy, and what its compression costs in accuracy. The
// strategies (GoSGD, dense push-sum SGD, Sparse-Push at several densities,
// SCSP) run one after another on the same 8-platform cluster in one process,
// with IID data and with label skew (Dirichlet); for each, the accuracy of
// the averaged model after the same epochs, the bytes all platforms sent
// (split into values, indices, push-sum weights and headers), and the
// training time and bytes until the averaged model first reaches the target,
// both interpolated within the epoch that crossed it. Dense SGP is the
// baseline: "Rx fewer" is SGP's bytes to the target over the strategy's.
// Then SGP and one Sparse-Push density again as node processes on 127.0.0.1,
// so that every message crosses the weights lane, against the bytes counted
// in one process.

#include "bench/bench.hpp"
#include "bench/common.hpp"
#include "bench/ports.hpp"

#include "actors/node/runtime.hpp"
#include "config/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace eg::bench {
namespace {

namespace fs = std::filesystem;

constexpr int platform_count = 8;
constexpr double mb = 1e6;

// --- a run's files -------------------------------------------------------------------

/// A CSV file: its header's columns and its rows, as text.
struct table {
  fs::path path;
  std::map<std::string, size_t> columns;
  std::vector<std::vector<std::string>> rows;

  bool has(const std::string& column) const { return columns.count(column) > 0; }
  /// The cell as a number; 0 when the column is absent or the cell empty.
  double number(const std::vector<std::string>& row, const std::string& column) const {
    auto c = columns.find(column);
    if (c == columns.end() || c->second >= row.size() || row[c->second].empty())
      return 0;
    return std::stod(row[c->second]);
  }
  void require(const std::string& column) const {
    if (!has(column))
      throw std::runtime_error("bench traffic: no column " + column + " in " + path.string());
  }
};


table read_table(const fs::path& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("bench traffic: cannot read " + path.string());
  table t;
  t.path = path;
  std::string line;
  std::getline(in, line);
  auto cols = csv_cells(line);
  for (size_t i = 0; i < cols.size(); ++i)
    t.columns[cols[i]] = i;
  while (std::getline(in, line))
    if (!line.empty())
      t.rows.push_back(csv_cells(line));
  return t;
}

/// Bytes of gossip messages by what they carry (metrics.csv's sent_* columns).
/// The unpacked messages' parts and what packing saved of them: the parts
/// less packing_saved are the bytes sent (messages::traffic).
struct parts {
  double values = 0, indices = 0, weights = 0, headers = 0, packing_saved = 0;
  double total() const { return values + indices + weights + headers - packing_saved; }
  parts& operator+=(const parts& o) {
    values += o.values;
    indices += o.indices;
    weights += o.weights;
    headers += o.headers;
    packing_saved += o.packing_saved;
    return *this;
  }
};

/// The cluster after one epoch; bytes and messages summed over all platforms
/// from the start of the run to the end of this epoch.
struct point {
  uint32_t epoch = 0;
  double seconds = 0;   // training clock (cluster.csv's training_seconds)
  double accuracy = 0;  // averaged model
  double bytes = 0;     // sent
  double received = 0;
  double messages = 0;
  parts sent;
};

struct run_result {
  std::string strategy;
  uint64_t seed = 0;
  std::vector<point> curve;
  bool has_parts = false;  // the metrics carried the sent_* columns
  double wall_seconds = 0;

  const point& last() const { return curve.back(); }
  double final_accuracy() const { return curve.empty() ? 0 : curve.back().accuracy; }
  double total_bytes() const { return curve.empty() ? 0 : curve.back().bytes; }
};

/// The run directory below `output_dir` (the one holding cluster.csv).
fs::path run_directory(const fs::path& output_dir) {
  fs::path found;
  if (fs::exists(output_dir))
    for (auto& entry : fs::directory_iterator(output_dir))
      if (entry.is_directory() && fs::exists(entry.path() / "cluster.csv"))
        found = entry.path();
  if (found.empty())
    throw std::runtime_error("bench traffic: no cluster.csv below " + output_dir.string());
  return found;
}

std::vector<point> read_run(const fs::path& dir, bool& has_parts) {
  auto cluster = read_table(dir / "cluster.csv");
  auto metrics = read_table(dir / "metrics.csv");
  for (auto c : {"epoch", "training_seconds", "averaged_accuracy"})
    cluster.require(c);
  for (auto c : {"epoch", "bytes_sent", "bytes_received", "messages_sent"})
    metrics.require(c);
  has_parts = metrics.has("sent_values");
  const bool has_packing = metrics.has("sent_packing_saved");
  struct sums {
    double bytes = 0, received = 0, messages = 0;
    parts sent;
  };
  std::map<uint32_t, sums> per_epoch;
  for (auto& r : metrics.rows) {
    auto& s = per_epoch[static_cast<uint32_t>(metrics.number(r, "epoch"))];
    s.bytes += metrics.number(r, "bytes_sent");
    s.received += metrics.number(r, "bytes_received");
    s.messages += metrics.number(r, "messages_sent");
    const parts row{metrics.number(r, "sent_values"), metrics.number(r, "sent_indices"),
                    metrics.number(r, "sent_weights"), metrics.number(r, "sent_headers"),
                    has_packing ? metrics.number(r, "sent_packing_saved") : 0.0};
    // One count: a row whose parts are not its bytes is a defect, not noise.
    if (has_packing && row.total() != metrics.number(r, "bytes_sent"))
      throw std::runtime_error("bench traffic: a row of " + (dir / "metrics.csv").string()
                               + " (epoch " + fixed(metrics.number(r, "epoch"), 0) + ") sends "
                               + fixed(metrics.number(r, "bytes_sent"), 0)
                               + " bytes, its parts add up to " + fixed(row.total(), 0));
    s.sent += row;
  }
  std::vector<point> out;
  for (auto& r : cluster.rows) {
    point p;
    p.epoch = static_cast<uint32_t>(cluster.number(r, "epoch"));
    p.seconds = cluster.number(r, "training_seconds");
    p.accuracy = cluster.number(r, "averaged_accuracy");
    for (auto& [epoch, s] : per_epoch)
      if (epoch <= p.epoch) {
        p.bytes += s.bytes;
        p.received += s.received;
        p.messages += s.messages;
        p.sent += s.sent;
      }
    out.push_back(p);
  }
  if (out.empty())
    throw std::runtime_error("bench traffic: no epoch in " + (dir / "cluster.csv").string());
  return out;
}

/// Where the curve first reaches `target`: the training time and the bytes
/// sent, both linearly interpolated between the epoch before and the epoch
/// that crossed it (as `bench tta` does for the time).
struct crossing {
  bool reached = false;
  double seconds = -1;
  double bytes = -1;
};

crossing cross(const std::vector<point>& curve, double target) {
  double t_before = 0, b_before = 0, a_before = 0;
  for (auto& p : curve) {
    if (p.accuracy >= target) {
      double f = p.accuracy <= a_before ? 1 : (target - a_before) / (p.accuracy - a_before);
      return {true, t_before + (p.seconds - t_before) * f, b_before + (p.bytes - b_before) * f};
    }
    t_before = p.seconds;
    b_before = p.bytes;
    a_before = p.accuracy;
  }
  return {};
}

// --- strategies and the cluster --------------------------------------------------------

void apply_strategy(config::cluster_config& cfg, const std::string& spec) {
  bench::apply_strategy(cfg, spec, "bench traffic");
}

/// The density of a "sparse-push:D" / "scsp:D" strategy; without one, that
/// of the configuration (strategy.density), taken as 1 for comparisons.
double density_of(const std::string& spec) {
  auto d = parse_spec(spec).density;
  return d.empty() ? 1.0 : std::stod(d);
}

/// Steps per gossip round ("/H"; 1 without).
double every_of(const std::string& spec) {
  auto h = parse_spec(spec).every;
  return h.empty() ? 1.0 : std::stod(h);
}

/// How much less a strategy sends per step than dense SGP, before coding:
/// H / D.
double compression_of(const std::string& spec) { return every_of(spec) / density_of(spec); }

std::string family_of(const std::string& spec) { return parse_spec(spec).name; }

/// The density and period as written ("as configured" without a density).
std::string density_text(const std::string& spec) {
  auto s = parse_spec(spec);
  return (s.density.empty() ? std::string("as configured") : s.density)
         + (s.every.empty() ? "" : ", gossip every " + s.every + " steps");
}

std::string slug(std::string s) {
  std::replace(s.begin(), s.end(), ':', '-');
  std::replace(s.begin(), s.end(), '/', '-');
  return s;
}

/// LeNet-5 on the whole Fashion-MNIST training set split equally over 8
/// platforms of one thread, no emulated slowdown, epoch-synchronous.
config::cluster_config eight_platforms(const options& opt) {
  auto cfg = config::default_config();
  cfg.id = "bench-traffic";
  cfg.data.dir = opt.data_dir;
  cfg.data.train_samples = 0;
  cfg.train.model = "lenet5";
  // Dense SGP's learning rate (seed 1, 12 epochs, IID: 0.883 at 0.01, 0.896
  // at 0.02), used for every strategy.
  cfg.train.lr = 0.02;
  cfg.strategy.schedule = config::schedule::sync;
  auto proto = cfg.nodes[0].platforms.front();
  proto.threads = 1;
  proto.share = 0;
  proto.slowdown = 1;
  proto.interference.clear();
  cfg.nodes[0].platforms.clear();
  for (int i = 0; i < platform_count; ++i) {
    auto p = proto;
    p.name = "p" + std::to_string(i);
    cfg.nodes[0].platforms.push_back(p);
  }
  // The clock measures training, as in `bench tta`: the balancer evaluates
  // the averaged model between epochs, off the clock.
  cfg.train.evaluate_every = 0;
  return cfg;
}

/// The same platforms, one node process each, on 127.0.0.1.
config::cluster_config as_node_processes(config::cluster_config cfg) {
  auto platforms = cfg.platforms();
  cfg.nodes.clear();
  for (size_t i = 0; i < platforms.size(); ++i) {
    config::node_config n;
    n.name = "n" + std::to_string(i);
    n.host = "127.0.0.1";
    n.port = free_port();
    n.platforms.push_back(platforms[i]);
    cfg.nodes.push_back(n);
  }
  cfg.balancer_node = cfg.nodes.front().name;
  return cfg;
}

run_result run_one(config::cluster_config cfg, const std::string& spec, const fs::path& dir,
                   bool processes) {
  apply_strategy(cfg, spec);
  cfg.output_dir = (dir / ("runs-" + slug(spec))).string();
  cfg.storage_dir = (dir / ("data-" + slug(spec))).string();
  fs::remove_all(cfg.output_dir);
  fs::remove_all(cfg.storage_dir);
  fs::create_directories(cfg.output_dir);
  config::validate(cfg);
  auto start = std::chrono::steady_clock::now();
  fs::path run;
  if (processes) {
    run_processes(cfg, cfg.output_dir, "bench traffic");
    run = run_directory(cfg.output_dir);
  } else {
    auto name = actors::run_node(cfg, "local", {}).run;
    if (name.empty())
      throw std::runtime_error("bench traffic: the run of " + spec + " did not end normally");
    run = fs::path(cfg.output_dir) / name;
  }
  run_result r;
  r.strategy = spec;
  r.seed = cfg.seed;
  r.wall_seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.curve = read_run(run, r.has_parts);
  fs::remove_all(cfg.storage_dir);  // checkpoints: not needed once the run is read
  return r;
}

// --- figures ---------------------------------------------------------------------------

struct setting {
  std::string name;         // "iid" or "non-iid"
  std::string description;
  std::string partition;    // data.partition
  double target = 0;
  std::string target_rule;  // how the target was chosen
  std::vector<std::vector<run_result>> seeds;  // per seed, per strategy
};

const run_result* find(const std::vector<run_result>& rs, const std::string& s) {
  for (auto& r : rs)
    if (r.strategy == s)
      return &r;
  return nullptr;
}

/// One strategy's figures in one setting: medians over the seeds.
struct row {
  std::string strategy;
  spread final_accuracy, vs_sgp_points, total_bytes, time_to, bytes_to, ratio;
  parts split;          // summed over the seeds (for the shares)
  bool has_parts = false;
  size_t not_reached = 0;  // seeds where the target was not reached
  bool ratio_marked = false;  // a ratio used bytes after all epochs
};

row figures(const setting& st, const std::string& s) {
  row out;
  out.strategy = s;
  out.has_parts = true;
  for (auto& rs : st.seeds) {
    auto* r = find(rs, s);
    auto* g = find(rs, "sgp");
    if (!r)
      continue;
    out.final_accuracy.add(r->final_accuracy());
    out.total_bytes.add(r->total_bytes());
    out.split += r->last().sent;
    out.has_parts = out.has_parts && r->has_parts;
    auto c = cross(r->curve, st.target);
    out.time_to.add(c.seconds, c.reached);
    out.bytes_to.add(c.bytes, c.reached);
    if (!c.reached)
      ++out.not_reached;
    if (g) {
      out.vs_sgp_points.add(100 * (r->final_accuracy() - g->final_accuracy()));
      auto cg = cross(g->curve, st.target);
      double mine = c.reached ? c.bytes : r->total_bytes();
      double theirs = cg.reached ? cg.bytes : g->total_bytes();
      out.ratio.add(theirs / mine, mine > 0 && theirs > 0);
      out.ratio_marked = out.ratio_marked || !c.reached || !cg.reached;
    }
  }
  return out;
}

std::string show_median(const spread& s, const char* format) {
  if (s.values.empty())
    return "n/a";
  char b[48];
  std::snprintf(b, sizeof b, format, s.median());
  return b;
}

std::string share(double part, double total) {
  return total > 0 ? fixed(100 * part / total, 1) : std::string("n/a");
}

/// "R.Rx" (one decimal from 10 on), with '*' when it used bytes after all epochs.
std::string ratio_text(const row& r) {
  if (r.ratio.values.empty())
    return "n/a";
  double m = r.ratio.median();
  return fixed(m, m < 10 ? 2 : 1) + "x" + (r.ratio_marked ? "*" : "");
}

/// The table of one setting, on stdout and as CSV.
void print_table(const setting& st, const std::vector<std::string>& strategies,
                 uint32_t epochs, int repeat, const fs::path& csv_path) {
  std::printf("\n%s: %s; target %.3f (%s); %u epochs%s\n", st.name.c_str(),
              st.description.c_str(), st.target, st.target_rule.c_str(), epochs,
              repeat > 1 ? ("; medians over " + std::to_string(repeat) + " seeds").c_str() : "");
  std::printf("%-18s %9s %8s %10s %7s %6s %6s %6s %6s %11s %11s %12s\n", "strategy",
              "final acc", "vs sgp", "total MB", "values", "index", "weight", "header", "packed",
              "time to tgt", "MB to tgt", "vs sgp");
  std::printf("%-18s %9s %8s %10s %7s %6s %6s %6s %6s %11s %11s %12s\n", "", "", "pts", "sent",
              "%", "%", "%", "%", "-%", "s", "", "bytes");
  std::ofstream csv(csv_path);
  csv << "setting,strategy,final_accuracy,vs_sgp_points,total_bytes,values_share,"
         "indices_share,weights_share,headers_share,packing_saved_share,target,time_to_target,"
         "bytes_to_target,"
         "reached,ratio_vs_sgp,ratio_uses_totals\n";
  bool marked = false, partly = false;
  for (auto& s : strategies) {
    auto r = figures(st, s);
    double total = r.split.total();
    bool parts_ok = r.has_parts && total > 0;
    // Medians over the seeds that reached the target; '^' when some did not.
    std::string time = "not reached", bytes = "not reached";
    if (r.not_reached < st.seeds.size()) {
      const char* some = r.not_reached ? "^" : "";
      time = fixed(r.time_to.median(), 1) + some;
      bytes = fixed(r.bytes_to.median() / mb, 2) + some;
      partly = partly || r.not_reached;
    }
    std::string ratio = ratio_text(r);
    marked = marked || r.ratio_marked;
    std::printf("%-18s %9.4f %8s %10.2f %7s %6s %6s %6s %6s %11s %11s %12s\n", s.c_str(),
                r.final_accuracy.median(),
                s == "sgp" ? "-" : show_median(r.vs_sgp_points, "%+.2f").c_str(),
                r.total_bytes.median() / mb,
                parts_ok ? share(r.split.values, total).c_str() : "n/a",
                parts_ok ? share(r.split.indices, total).c_str() : "n/a",
                parts_ok ? share(r.split.weights, total).c_str() : "n/a",
                parts_ok ? share(r.split.headers, total).c_str() : "n/a",
                parts_ok ? share(r.split.packing_saved, total).c_str() : "n/a", time.c_str(),
                bytes.c_str(), ratio.c_str());
    csv << st.name << ',' << s << ',' << r.final_accuracy.median() << ','
        << (r.vs_sgp_points.values.empty() ? 0 : r.vs_sgp_points.median()) << ','
        << r.total_bytes.median() << ','
        << (parts_ok ? r.split.values / total : -1) << ','
        << (parts_ok ? r.split.indices / total : -1) << ','
        << (parts_ok ? r.split.weights / total : -1) << ','
        << (parts_ok ? r.split.headers / total : -1) << ','
        << (parts_ok ? r.split.packing_saved / total : -1) << ',' << st.target << ','
        << (r.time_to.values.empty() ? -1 : r.time_to.median()) << ','
        << (r.bytes_to.values.empty() ? -1 : r.bytes_to.median()) << ','
        << (st.seeds.size() - r.not_reached) << '/' << st.seeds.size() << ','
        << (r.ratio.values.empty() ? -1 : r.ratio.median()) << ',' << (r.ratio_marked ? 1 : 0)
        << '\n';
  }
  if (partly)
    std::printf("  ^ not reached in some seeds: the median of those that reached it\n");
  if (marked)
    std::printf("  * the target was not reached (by the strategy or by sgp) in some seed: the "
                "ratio uses the bytes after all %u epochs instead\n",
                epochs);
  std::printf("  vs sgp bytes: sgp's bytes to the target over the strategy's (x fewer); "
              "shares: of all bytes sent\n");
}

/// Averaged accuracy against the cumulative bytes sent (log scale), one line
/// per strategy, for the first seed.
void plot(const setting& st, const fs::path& dir) {
  auto& results = st.seeds.front();
  // The target's line stays in view.
  double lowest = st.target, highest = st.target;
  for (auto& r : results)
    for (auto& p : r.curve) {
      lowest = std::min(lowest, p.accuracy);
      highest = std::max(highest, p.accuracy);
    }
  auto script = dir / ("traffic-" + st.name + ".gp");
  auto png = dir / ("traffic-" + st.name + ".png");
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 900,560 noenhanced\n"
       << "set output '" << png.string() << "'\n"
       << "set title 'traffic, " << st.name << " (" << st.description << "), seed "
       << results.front().seed << "'\n"
       << "set xlabel 'bytes sent by all platforms, cumulative (MB, log scale)'\n"
       << "set ylabel 'averaged-model test accuracy'\n"
       << "set logscale x\nset key bottom right\nset grid\nset datafile separator ','\n"
       << "set yrange [" << std::max(0.0, lowest - 0.02) << ":"
       << std::min(1.0, std::max(highest, st.target) + 0.02) << "]\n"
       << "set arrow from graph 0, first " << st.target << " to graph 1, first " << st.target
       << " nohead dashtype 2\n"
       << "plot";
    bool first = true;
    for (auto& r : results) {
      auto file = dir / ("traffic-" + st.name + "-" + slug(r.strategy) + ".csv");
      std::ofstream part(file);
      size_t points = 0;
      for (auto& p : r.curve)
        if (p.bytes > 0) {
          part << p.bytes / mb << ',' << p.accuracy << '\n';
          ++points;
        }
      if (!points)
        continue;
      gp << (first ? " " : ", ") << "'" << file.string()
         << "' using 1:2 with linespoints title '" << r.strategy << "'";
      first = false;
    }
    gp << "\n";
  }
  auto cmd = "gnuplot '" + script.string() + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0)
    std::printf("(gnuplot failed: no plot for %s)\n", st.name.c_str());
}

std::string signed_points(const row& r) {
  if (r.vs_sgp_points.values.empty())
    return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%+.2f", r.vs_sgp_points.median());
  return b;
}

/// The 8-platform cluster in one process with the overrides and epochs of
/// `t`; every strategy is checked on it before the first run.
config::cluster_config base_config(const options& opt, const traffic_options& t) {
  if (t.strategies.empty())
    throw config::config_error("bench traffic: no strategy");
  if (t.target.size() > 2)
    throw config::config_error("bench traffic: --target takes the IID target and, optionally, "
                               "the non-IID one");
  auto base = eight_platforms(opt);
  for (auto& o : t.overrides)
    config::apply_override(base, o);
  base.train.epochs = t.epochs;
  base = actors::as_one_process(base);
  // Every strategy is checked before the first run.
  for (auto& s : t.strategies) {
    auto cfg = base;
    apply_strategy(cfg, s);
    config::validate(cfg);
  }
  return base;
}

/// The IID setting, then the label-skewed one, with the targets of `t`.
std::vector<setting> make_settings(const traffic_options& t) {
  std::vector<setting> settings(2);
  settings[0].name = "iid";
  settings[0].partition = "iid";
  settings[0].description = "IID";
  settings[0].target = t.target.empty() ? 0.85 : t.target[0];
  settings[0].target_rule = t.target.empty() ? "default" : "--target";
  settings[1].name = "non-iid";
  settings[1].partition = "dirichlet";
  settings[1].description = "label skew, Dirichlet alpha " + fixed(t.alpha, 2);
  if (t.target.size() == 2) {
    settings[1].target = t.target[1];
    settings[1].target_rule = "--target";
  }
  return settings;
}

/// Prints the cluster, the strategies, the data settings and the runs to come.
void print_header(const traffic_options& t, const config::cluster_config& base,
                  const std::vector<setting>& settings, bool with_sgp,
                  uint32_t process_epochs) {
  const uint64_t first_seed = base.seed;
  std::string list;
  for (auto& s : t.strategies)
    list += (list.empty() ? "" : " ") + s;
  std::printf("traffic: %d platforms in one process (%s, Fashion-MNIST, %s training points "
              "split equally, batch %lld, lr %g, epoch-synchronous, no emulated slowdown), "
              "%u epochs, seeds %llu..%llu\n",
              platform_count, base.train.model.c_str(),
              base.data.train_samples ? std::to_string(base.data.train_samples).c_str() : "all",
              static_cast<long long>(base.train.batch), base.train.lr, t.epochs,
              static_cast<unsigned long long>(first_seed),
              static_cast<unsigned long long>(first_seed + t.repeat - 1));
  std::printf("  strategies: %s (sgp, sparse-push and scsp on the exponential graph; gosgd "
              "exchange probability %.2f)\n",
              list.c_str(), base.strategy.exchange_probability);
  std::printf("  data: %s (%s); targets: iid %.3f, non-iid %s\n",
              t.settings == "both" ? "iid, then non-iid" : t.settings.c_str(),
              settings[1].description.c_str(), settings[0].target,
              t.target.size() == 2 ? fixed(t.target[1], 3).c_str()
                                   : with_sgp ? "sgp's final accuracy - 0.02"
                                              : "the lowest best accuracy of the strategies");
  std::printf("  runs: %zu in one process",
              (t.settings == "both" ? 2 : 1) * t.strategies.size() * t.repeat);
  if (t.processes && t.settings != "non-iid")
    std::printf(", then sgp and one sparse-push density as %d node processes on 127.0.0.1 "
                "(1 platform each, iid, %u epochs)",
                platform_count, process_epochs);
  std::printf("\n");
  std::fflush(stdout);
}

/// Every seed of setting `st`: each strategy run in one process, a line
/// each, its curve into `all`; the results into st.seeds.
void run_setting(setting& st, const traffic_options& t, const config::cluster_config& base,
                 const fs::path& root, uint64_t first_seed, std::ofstream& all) {
  for (int k = 0; k < t.repeat; ++k) {
    auto cfg = base;
    cfg.seed = first_seed + static_cast<uint64_t>(k);
    config::apply_override(cfg, "data.partition=" + st.partition);
    if (st.partition == "dirichlet")
      cfg.data.alpha = t.alpha;
    auto dir = root / st.name / ("seed-" + std::to_string(cfg.seed));
    fs::create_directories(dir);
    std::vector<run_result> results;
    for (auto& s : t.strategies) {
      auto r = run_one(cfg, s, dir, false);
      std::printf("  %-7s seed %llu %-18s %5.0f s wall; accuracy after %u epochs %.4f; "
                  "%.2f MB sent\n",
                  st.name.c_str(), static_cast<unsigned long long>(cfg.seed), s.c_str(),
                  r.wall_seconds, t.epochs, r.final_accuracy(), r.total_bytes() / mb);
      std::fflush(stdout);
      for (auto& p : r.curve)
        all << st.name << ',' << r.seed << ',' << s << ',' << p.epoch << ',' << p.seconds << ','
            << p.accuracy << ',' << p.bytes << ',' << p.received << ',' << p.messages << ','
            << p.sent.values << ',' << p.sent.indices << ',' << p.sent.weights << ','
            << p.sent.headers << ',' << p.sent.packing_saved << '\n';
      all.flush();
      results.push_back(std::move(r));
    }
    st.seeds.push_back(std::move(results));
  }
}

/// The target of a setting run without one.
void choose_target(setting& st, const traffic_options& t, bool with_sgp) {
  // Non-IID: the averaged model's accuracy swings by points from one
  // epoch to the next, so a fixed target may be out of reach of every
  // strategy; 0.02 below dense SGP's final accuracy is within reach of
  // the strategies that keep up with it.
  if (with_sgp) {
    spread sgp_final;
    for (auto& rs : st.seeds)
      sgp_final.add(find(rs, "sgp")->final_accuracy());
    st.target = std::floor((sgp_final.median() - 0.02) * 1000) / 1000;
    st.target_rule = "sgp's final accuracy " + fixed(sgp_final.median(), 4) + " - 0.02";
  } else {
    double lowest = 1;
    for (auto& s : t.strategies) {
      spread best;
      for (auto& rs : st.seeds) {
        double b = 0;
        for (auto& p : find(rs, s)->curve)
          b = std::max(b, p.accuracy);
        best.add(b);
      }
      lowest = std::min(lowest, best.median());
    }
    st.target = std::floor(lowest * 1000) / 1000;
    st.target_rule = "the lowest best accuracy of the strategies";
  }
}

/// The sparse-push strategy the headline is about.
struct choice {
  std::string chosen;
  double ratio = 0;  // its median bytes ratio against sgp
  int rank = -1;     // 2: reached within 1 point, 1: reached, 0: not reached
};

// The sparse-push density (and period) with the fewest bytes to the IID
// target (the median ratio against sgp) that still reaches it in every
// seed and loses at most 1 point of final accuracy against sgp (the median
// of the seeds' differences: the paper's claim is "466x for about 1 %");
// else the one with the fewest bytes to the target; else the least
// compressed one (H / D), marked.
choice choose_sparse_push(const traffic_options& t, const setting& iid, bool with_sgp) {
  choice c;
  for (auto& s : t.strategies) {
    if (family_of(s) != "sparse-push" || iid.seeds.empty())
      continue;
    auto r = figures(iid, s);
    const bool reached = r.not_reached == 0;
    const bool close = with_sgp && r.vs_sgp_points.median() >= -1;  // (false for NaN: no sgp)
    const int rank = reached ? (close ? 2 : 1) : 0;
    const double ratio = r.ratio.median();
    const bool better = rank > c.rank
                        || (rank == c.rank && (rank > 0 ? ratio > c.ratio
                                                        : compression_of(s)
                                                            < compression_of(c.chosen)));
    if (better) {
      c.chosen = s;
      c.ratio = ratio;
      c.rank = rank;
    }
  }
  return c;
}

/// The first scsp strategy of `t` ("" when none).
std::string first_scsp(const traffic_options& t) {
  std::string scsp;
  for (auto& s : t.strategies)
    if (family_of(s) == "scsp" && scsp.empty())
      scsp = s;
  return scsp;
}

/// Sparse-Push at SCSP's density, to show what the skew compensation adds.
std::string plain_at(const traffic_options& t, const std::string& scsp) {
  std::string plain_at_scsp;
  if (!scsp.empty())
    for (auto& s : t.strategies)
      if (family_of(s) == "sparse-push" && std::fabs(density_of(s) - density_of(scsp)) < 1e-12
          && every_of(s) == every_of(scsp))
        plain_at_scsp = s;
  return plain_at_scsp;
}

/// Runs `s` as node processes of `cfg` in `dir`; prints its row and writes
/// it to `csv` against `in_process` after the same epochs. The largest
/// difference of bytes per message so far into `worst`, counted in
/// `compared`.
void process_row(const config::cluster_config& cfg, const std::string& s, const fs::path& dir,
                 const run_result* in_process, uint32_t process_epochs, std::ofstream& csv,
                 double& worst, size_t& compared) {
  auto r = run_one(cfg, s, dir, true);
  auto& p = r.last();
  // The in-process run after the same number of epochs.
  const point* q = nullptr;
  if (in_process)
    for (auto& x : in_process->curve)
      if (x.epoch == p.epoch)
        q = &x;
  double per_lane = p.messages > 0 ? p.bytes / p.messages : 0;
  double per_one = q && q->messages > 0 ? q->bytes / q->messages : 0;
  double diff_total = q && q->bytes > 0 ? 100 * (p.bytes - q->bytes) / q->bytes : NAN;
  double diff_msg = per_one > 0 ? 100 * (per_lane - per_one) / per_one : NAN;
  if (std::isfinite(diff_msg)) {
    worst = std::max(worst, std::fabs(diff_msg));
    ++compared;
  }
  double total = p.sent.total();
  bool parts_ok = r.has_parts && total > 0;
  std::printf("%-18s %9.4f %10.2f %10.2f %10s %8s %11.0f %11s %8s %6s %6s %6s %6s %6s   "
              "(%.0f s wall)\n",
              s.c_str(), p.accuracy, p.bytes / mb, p.received / mb,
              q ? fixed(q->bytes / mb, 2).c_str() : "n/a",
              std::isfinite(diff_total) ? (fixed(diff_total, 2) + "%").c_str() : "n/a",
              per_lane, q ? fixed(per_one, 0).c_str() : "n/a",
              std::isfinite(diff_msg) ? (fixed(diff_msg, 2) + "%").c_str() : "n/a",
              parts_ok ? share(p.sent.values, total).c_str() : "n/a",
              parts_ok ? share(p.sent.indices, total).c_str() : "n/a",
              parts_ok ? share(p.sent.weights, total).c_str() : "n/a",
              parts_ok ? share(p.sent.headers, total).c_str() : "n/a",
              parts_ok ? share(p.sent.packing_saved, total).c_str() : "n/a", r.wall_seconds);
  csv << s << ',' << process_epochs << ',' << p.accuracy << ',' << p.bytes << ','
      << p.received << ',' << p.messages << ',' << (q ? q->bytes : -1) << ','
      << (q ? q->messages : -1) << ',' << per_lane << ',' << (q ? per_one : -1) << ','
      << p.sent.values << ',' << p.sent.indices << ',' << p.sent.weights << ','
      << p.sent.headers << ',' << p.sent.packing_saved << '\n';
}

/// Node processes: sgp and the chosen sparse-push again as node processes,
/// the bytes that crossed the weights lane against the count in one process
/// (the first IID seed); returns the summary's part ("" when not run).
std::string node_processes(const traffic_options& t, const config::cluster_config& base,
                           const setting& iid, bool with_sgp, const std::string& chosen,
                           uint32_t process_epochs, const fs::path& root) {
  std::string process_summary;
  if (!t.processes || iid.seeds.empty())
    return process_summary;
  const uint64_t first_seed = base.seed;
  std::vector<std::string> specs;
  if (with_sgp)
    specs.push_back("sgp");
  if (!chosen.empty())
    specs.push_back(chosen);
  if (specs.empty())
    specs.push_back(t.strategies.front());
  auto cfg = base;
  cfg.seed = first_seed;
  cfg.train.epochs = process_epochs;
  config::apply_override(cfg, "data.partition=iid");
  // The same cluster id as in one process: it is in every message's header.
  cfg = as_node_processes(cfg);
  auto dir = root / "processes";
  fs::create_directories(dir);
  std::printf("\nnode processes: the same %d platforms as %zu node processes of 1 platform on "
              "127.0.0.1 (every message on the weights lane), iid, seed %llu, %u epochs; "
              "against the first %u epochs of the run in one process\n",
              platform_count, cfg.nodes.size(), static_cast<unsigned long long>(first_seed),
              process_epochs, process_epochs);
  std::printf("%-18s %9s %10s %10s %10s %8s %11s %11s %8s %6s %6s %6s %6s %6s\n",
              "strategy", "acc", "lane MB", "recv MB", "1-proc MB", "diff", "B/msg lane",
              "B/msg 1-pr", "diff", "values", "index", "weight", "header", "packed");
  std::fflush(stdout);
  std::ofstream csv(root / "traffic-processes.csv");
  csv << "strategy,epochs,accuracy,lane_bytes_sent,lane_bytes_received,lane_messages,"
         "one_process_bytes_sent,one_process_messages,bytes_per_message_lane,"
         "bytes_per_message_one_process,values,indices,weights,headers,packing_saved\n";
  double worst = 0;
  size_t compared = 0;
  for (auto& s : specs) {
    const run_result* in_process = find(iid.seeds.front(), s);
    try {
      process_row(cfg, s, dir, in_process, process_epochs, csv, worst, compared);
    } catch (const std::exception& e) {
      std::printf("%-18s failed: %s\n", s.c_str(), e.what());
      process_summary += "; node processes: " + s + " failed";
    }
    std::fflush(stdout);
  }
  std::printf("  lane MB: bytes the senders wrote to the weights lane; recv MB: what the "
              "receivers took from it; 1-proc: counted in one process (what each message "
              "would weigh on the wire); B/msg: bytes per message\n");
  if (compared)
    process_summary += "; node processes: bytes per message within " + fixed(worst, 2)
                       + "% of the count in one process";
  return process_summary;
}

/// The parts of the summary line.
struct headline_texts {
  std::string sp = "sparse-push n/a";
  std::string scsp = "scsp n/a (non-IID)";
  std::string extra;
};

/// The headline: the chosen sparse-push on IID data and scsp (and plain
/// sparse-push at its density) on non-IID data, against sgp.
headline_texts headline(const std::vector<setting>& settings, const choice& c,
                        const std::string& scsp, const std::string& plain_at_scsp,
                        bool with_sgp) {
  headline_texts h;
  const bool chosen_reached = c.rank > 0;
  if (!c.chosen.empty() && with_sgp) {
    auto r = figures(settings[0], c.chosen);
    h.sp = "sparse-push " + ratio_text(r) + " fewer bytes than sgp, " + signed_points(r)
           + " pts";
    h.extra += "; sparse-push density " + density_text(c.chosen) + " (IID target "
               + fixed(settings[0].target, 3) + (chosen_reached ? "" : " not reached")
               + (c.rank == 2 ? ", within 1 pt" : c.rank == 1 ? ", none within 1 pt" : "")
               + ")";
  }
  if (settings[1].seeds.empty())
    h.scsp = "scsp n/a (non-IID not run)";
  else if (!scsp.empty() && with_sgp) {
    auto r = figures(settings[1], scsp);
    h.scsp = "scsp " + ratio_text(r) + ", " + signed_points(r) + " pts (non-IID)";
    h.extra += "; scsp density " + density_text(scsp) + " (non-IID target "
               + fixed(settings[1].target, 3) + (r.not_reached ? " not reached" : "") + ")";
    if (!plain_at_scsp.empty()) {
      auto p = figures(settings[1], plain_at_scsp);
      h.extra += "; plain sparse-push non-IID " + ratio_text(p) + ", " + signed_points(p) + " pts";
      // What the skew compensation wins back of plain Sparse-Push's loss
      // against sgp, at the same density and period (medians of the seeds).
      const double plain = p.vs_sgp_points.median(), with = r.vs_sgp_points.median();
      if (plain < 0 && std::isfinite(with))
        h.extra += "; scsp recovers " + fixed(100 * (with - plain) / -plain, 0)
                   + "% of plain sparse-push's loss";
    }
  }
  return h;
}

} // namespace

int traffic(const options& opt, const traffic_options& t) {
  auto base = base_config(opt, t);
  const bool with_sgp = std::find(t.strategies.begin(), t.strategies.end(), "sgp")
                        != t.strategies.end();
  auto root = fs::absolute(fs::path(opt.out_dir) / "traffic");
  fs::create_directories(root);
  const uint64_t first_seed = base.seed;
  const uint32_t process_epochs = std::min<uint32_t>(3, t.epochs);

  auto settings = make_settings(t);
  print_header(t, base, settings, with_sgp, process_epochs);
  auto started = std::chrono::steady_clock::now();

  std::ofstream all(root / "traffic-seeds.csv");
  all << "setting,seed,strategy,epoch,training_seconds,averaged_accuracy,bytes_sent,"
         "bytes_received,messages_sent,sent_values,sent_indices,sent_weights,sent_headers,"
         "sent_packing_saved\n";
  for (auto& st : settings) {
    if (t.settings != "both" && t.settings != st.name)
      continue;
    run_setting(st, t, base, root, first_seed, all);
    if (st.target <= 0)
      choose_target(st, t, with_sgp);
    print_table(st, t.strategies, t.epochs, t.repeat, root / ("traffic-" + st.name + ".csv"));
    plot(st, root / st.name);
    std::fflush(stdout);
  }

  const auto chosen = choose_sparse_push(t, settings[0], with_sgp);
  const std::string scsp = first_scsp(t);
  const std::string plain_at_scsp = plain_at(t, scsp);

  // -- node processes: the bytes that crossed the weights lane ------------------------
  const std::string process_summary =
    node_processes(t, base, settings[0], with_sgp, chosen.chosen, process_epochs, root);

  // -- the headline -------------------------------------------------------------------
  auto h = headline(settings, chosen, scsp, plain_at_scsp, with_sgp);
  double minutes =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / 60;
  std::printf("\nfigures: %s/traffic-{iid,non-iid,processes,seeds}.csv, plots: "
              "%s/{iid,non-iid}/traffic-*.png (%.1f min)\n",
              root.string().c_str(), root.string().c_str(), minutes);
  if (t.repeat > 1)
    h.extra += "; medians over " + std::to_string(t.repeat) + " seeds";
  std::printf("summary: %s; %s%s%s\n", h.sp.c_str(), h.scsp.c_str(), h.extra.c_str(),
              process_summary.c_str());
  return 0;
}

} // namespace eg::bench
