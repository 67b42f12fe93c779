// `edgegossip bench tta`: the headline benchmark. The strategies run one after
// another on the same cluster, data, seed and heterogeneity; for each, the
// training time until the averaged model reaches the target test accuracy,
// and the accuracy after the same number of epochs (the EdgeGossip paper's
// Fig. 5 and its 2.70x / 0.78-point claim).

#include "bench/bench.hpp"

#include "actors/runtime.hpp"
#include "launcher/config.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace eg::bench {
namespace {

struct point {
  uint32_t epoch = 0;
  double seconds = 0;  // training clock
  double accuracy = 0;
};

struct outcome {
  std::string strategy;
  std::vector<point> curve;
  double time_to_target = -1;  // -1: not reached
  double final_accuracy = 0;
  double wall_seconds = 0;
};

std::vector<point> read_curve(const std::filesystem::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> cols;
  {
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');)
      cols.push_back(c);
  }
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < cols.size(); ++i)
      if (cols[i] == name)
        return i;
    throw std::runtime_error("no column " + name + " in " + csv.string());
  };
  auto e = col("epoch"), t = col("training_seconds"), a = col("averaged_accuracy");
  std::vector<point> out;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');)
      cells.push_back(c);
    out.push_back({static_cast<uint32_t>(std::stoul(cells[e])), std::stod(cells[t]),
                   std::stod(cells[a])});
  }
  return out;
}

/// The default profile: 4 platforms with slowdowns 1, 1, 3, 5.
config::cluster_config default_profile() {
  auto cfg = config::default_config();
  cfg.id = "bench-tta";
  double slow[] = {1, 1, 3, 5};
  for (size_t i = 0; i < cfg.nodes[0].platforms.size() && i < 4; ++i)
    cfg.nodes[0].platforms[i].slowdown = slow[i];
  return cfg;
}

void plot(const std::vector<outcome>& results, const std::filesystem::path& dir, double target) {
  auto data = dir / "tta.csv";
  {
    std::ofstream out(data);
    out << "strategy,epoch,training_seconds,averaged_accuracy\n";
    for (auto& r : results)
      for (auto& p : r.curve)
        out << r.strategy << ',' << p.epoch << ',' << p.seconds << ',' << p.accuracy << '\n';
  }
  auto script = dir / "tta.gp";
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 900,560 noenhanced\n"
       << "set output '" << (dir / "tta.png").string() << "'\n"
       << "set title 'Averaged-model test accuracy against training time'\n"
       << "set xlabel 'training time (s)'\nset ylabel 'test accuracy'\n"
       << "set key bottom right\nset grid\nset datafile separator ','\n"
       << "set arrow from graph 0, first " << target << " to graph 1, first " << target
       << " nohead dashtype 2\n"
       << "plot";
    for (size_t i = 0; i < results.size(); ++i) {
      auto file = dir / ("tta-" + results[i].strategy + ".csv");
      std::ofstream part(file);
      for (auto& p : results[i].curve)
        part << p.seconds << ',' << p.accuracy << '\n';
      gp << (i ? ", " : " ") << "'" << file.string() << "' using 1:2 with linespoints title '"
         << results[i].strategy << "'";
    }
    gp << "\n";
  }
  auto cmd = "gnuplot '" + script.string() + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0)
    std::printf("(gnuplot failed: no plot; the figures are in %s)\n", data.string().c_str());
}

} // namespace

int tta(const options& opt, const tta_options& t) {
  auto base = t.config_file.empty() ? default_profile() : config::load(t.config_file);
  // The clock measures training: platforms do not evaluate their own models
  // (the balancer evaluates the averaged model between epochs, off the
  // clock). `--set train.evaluate_every=1` puts it back.
  base.train.evaluate_every = 0;
  for (auto& o : t.overrides)
    config::apply_override(base, o);
  base.train.epochs = t.epochs;
  base = actors::as_one_process(base);
  auto dir = std::filesystem::absolute(std::filesystem::path(opt.out_dir) / "tta");
  std::filesystem::create_directories(dir);
  std::printf("tta: %zu platforms (slowdowns", base.nodes[0].platforms.size());
  for (auto& p : base.nodes[0].platforms)
    std::printf(" %.0f", p.slowdown);
  std::printf("), %s, %u epochs, target accuracy %.3f\n", base.train.model.c_str(), t.epochs,
              t.target);
  std::fflush(stdout);

  std::vector<outcome> results;
  for (auto& s : t.strategies) {
    auto cfg = base;
    cfg.strategy.name = s;
    cfg.output_dir = (dir / ("runs-" + s)).string();
    cfg.storage_dir = (dir / "data").string();
    std::filesystem::remove_all(cfg.output_dir);
    config::validate(cfg);
    auto start = std::chrono::steady_clock::now();
    auto run = actors::run_node(cfg, "local", {}).run;
    outcome o;
    o.strategy = s;
    o.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    o.curve = read_curve(std::filesystem::path(cfg.output_dir) / run / "cluster.csv");
    for (auto& p : o.curve)
      if (o.time_to_target < 0 && p.accuracy >= t.target)
        o.time_to_target = p.seconds;
    o.final_accuracy = o.curve.empty() ? 0 : o.curve.back().accuracy;
    std::printf("  %-12s done in %.0f s wall; accuracy after %u epochs %.4f; reached %.3f %s\n",
                s.c_str(), o.wall_seconds, t.epochs, o.final_accuracy, t.target,
                o.time_to_target < 0 ? "never" : ("after " + std::to_string(o.time_to_target).substr(0, 6) + " s of training").c_str());
    std::fflush(stdout);
    results.push_back(std::move(o));
  }

  const outcome* gosgd = nullptr;
  const outcome* async = nullptr;
  for (auto& r : results) {
    if (r.strategy == "gosgd")
      gosgd = &r;
    if (r.strategy == "gosgd-async")
      async = &r;
  }
  std::printf("\n%-12s %16s %12s %16s %14s\n", "strategy", "time to target", "final acc",
              "speedup vs gosgd", "acc diff (pts)");
  std::string summary;
  for (auto& r : results) {
    auto speed = [&](const outcome* b) {
      return b && b->time_to_target > 0 && r.time_to_target > 0
               ? b->time_to_target / r.time_to_target
               : -1.0;
    };
    double sp = speed(gosgd);
    double diff = gosgd ? 100 * (r.final_accuracy - gosgd->final_accuracy) : 0;
    std::printf("%-12s %15s %12.4f %16s %+14.2f\n", r.strategy.c_str(),
                r.time_to_target > 0 ? (std::to_string(r.time_to_target).substr(0, 6) + " s").c_str()
                                     : "not reached",
                r.final_accuracy, sp > 0 ? (std::to_string(sp).substr(0, 4) + "x").c_str() : "-",
                diff);
    if (r.strategy != "gosgd") {
      summary += " " + r.strategy + " " + (sp > 0 ? std::to_string(sp).substr(0, 4) + "x" : "n/a")
                 + " vs gosgd";
      if (async && &r != async) {
        double sa = speed(async);
        summary += " (" + (sa > 0 ? std::to_string(sa).substr(0, 4) + "x" : "n/a") + " vs gosgd-async)";
      }
      summary += ", " + std::string(diff >= 0 ? "+" : "") + std::to_string(diff).substr(0, diff >= 0 ? 4 : 5)
                 + " pts;";
    }
  }
  plot(results, dir, t.target);
  std::printf("figures: %s, plot: %s\n", (dir / "tta.csv").string().c_str(),
              (dir / "tta.png").string().c_str());
  std::printf("summary: time to %.2f accuracy:%s\n", t.target, summary.c_str());
  return 0;
}

} // namespace eg::bench
