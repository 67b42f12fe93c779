// bench split: one model trained whole, and split in the modes asked for
// (backpropagation between the stages, synthetic gradients, pipelined
// backpropagation with delayed gradients, synthetic gradients corrected by
// the true ones), on 2 and 3 (and 4) stages of equal and unequal speed (emulated
// slowdowns), each stage an actor in one process (docs/SPLIT.md).

#include "bench/bench.hpp"
#include "bench/common.hpp"

#include "actors/node/runtime.hpp"
#include "actors/stage.hpp"
#include "actors/wire.hpp"
#include "models/dataset.hpp"
#include "algorithms/split/split.hpp"

#include <ATen/Parallel.h>
#include <caf/all.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

namespace eg::bench {
namespace {

struct setup {
  std::string name;                 ///< e.g. "2 stages, unequal"
  std::vector<int64_t> cuts;        ///< empty: whole
  std::vector<double> slowdowns;    ///< one per stage
  int64_t in_flight = 0;            ///< batches in flight; 0: the run's --in-flight
};

/// The batches in flight of a setup's runs.
int64_t in_flight_of(const split_options& s, const setup& su) {
  return su.in_flight > 0 ? su.in_flight : std::max<int64_t>(s.in_flight, 1);
}

struct outcome {
  std::vector<actors::split_epoch> epochs;
  std::vector<actors::stage_stats> stages;
  /// Why the run stopped with an error ("" when it ran to its end): a split
  /// model that kept running away past its rollbacks.
  std::string error;
  double seconds() const { return epochs.empty() ? 0.0 : epochs.back().seconds; }
  double accuracy() const { return epochs.empty() ? 0.0 : epochs.back().test_accuracy; }
  /// Training seconds to reach `target` test accuracy (< 0: not reached).
  double time_to(double target) const {
    for (auto& e : epochs)
      if (e.test_accuracy >= target)
        return e.seconds;
    return -1;
  }
  uint64_t bytes() const {
    uint64_t b = 0;
    for (auto& s : stages)
      b += s.bytes_up + s.bytes_down;
    return b;
  }
};

/// The stages' options of a run in `mode`.
learning::stage_options stage_options_of(const split_options& s, learning::stage_mode mode,
                                        int64_t in_flight) {
  learning::stage_options o;
  o.sgd.lr = s.lr;
  o.sgd.momentum = s.momentum;
  o.mode = mode;
  o.max_in_flight = std::max<int64_t>(in_flight, 1) + 2;
  o.lr_warmup = s.stage_lr_warmup;
  o.lr_warmup_by_delay = s.stage_lr_warmup_rule == "delay";
  if (s.sg_hidden > 0)
    o.synthetic.hidden = s.sg_hidden;
  o.synthetic.conv_layers = s.sg_conv_layers;
  return o;
}

outcome run_one(const split_options& s, const setup& su, learning::stage_mode mode, uint64_t seed,
                std::shared_ptr<const learning::dataset> train,
                std::shared_ptr<const learning::dataset> test) {
  caf::actor_system_config cfg;
  actors::announce_types(cfg);
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.set("scheduler.max-threads", static_cast<size_t>(su.slowdowns.size() + 1));
  actors::tune_scheduler(cfg);  // as the nodes wait for work
  caf::actor_system sys{cfg};
  const auto in_flight = in_flight_of(s, su);
  const auto o = stage_options_of(s, mode, in_flight);
  auto trainers = learning::make_pipeline(s.model, su.cuts, seed, o, learning::shape_of(*train));
  std::vector<actors::stage_actor> stages;
  for (size_t k = 0; k < trainers.size(); ++k) {
    actors::stage_args a;
    a.trainer = trainers[k];
    a.index = k;
    a.slowdown = su.slowdowns.at(k);
    if (s.schedule == "1f1b")
      a.forward_limit = actors::one_forward_one_backward_limit(in_flight, k);
    if (k == 0) {
      a.train_set = train;
      a.test_set = test;
      a.batch = s.batch;
      a.in_flight = in_flight;
      a.seed = seed;
    }
    stages.push_back(actors::spawn_stage(sys, std::move(a)));
  }
  actors::link_stages(stages);
  outcome out;
  caf::scoped_actor self{sys};
  self->request(stages.front(), caf::infinite, actors::run_atom::value, s.epochs)
    .receive([&](std::vector<actors::split_epoch>& e) { out.epochs = std::move(e); },
             [&](caf::error& err) {
               // (kept, not thrown: the stages must still be told to end,
               // or the actor system would wait for them for good)
               out.error = sys.render(err);
               if (out.error.empty())
                 out.error = "the run stopped with an error";
             });
  for (auto& st : stages)
    self->request(st, caf::infinite, actors::stats_atom::value)
      .receive([&](actors::stage_stats& x) { out.stages.push_back(x); },
               [&](caf::error&) { out.stages.emplace_back(); });
  for (auto& st : stages)
    self->send_exit(st, caf::exit_reason::user_shutdown);
  return out;
}

std::string join(const std::vector<double>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? " " : "") << v[i];
  return os.str();
}

/// The mode the speed-balanced cuts are planned for: the first pipelined
/// one asked for (backprop does not overlap the stages).
learning::stage_mode planning_mode(const split_options& s) {
  for (auto& m : s.modes)
    if (learning::pipelined(learning::parse_stage_mode(m)))
      return learning::parse_stage_mode(m);
  return learning::stage_mode::delayed;
}

/// What the planner knows of the model: each layer timed alone, and each
/// run of layers timed as a stage of the planning mode (--plan-from).
struct plan_costs {
  std::vector<learning::layer_cost> layers;
  std::optional<learning::stage_costs> stages;
  /// What the cuts are planned on.
  learning::stage_costs planned(learning::stage_passes below) const {
    return stages ? *stages : learning::stage_costs::from_layers(layers, below);
  }
};

std::string ms_list(const std::vector<double>& seconds) {
  std::ostringstream os;
  for (size_t i = 0; i < seconds.size(); ++i)
    os << (i ? " " : "") << std::fixed << std::setprecision(2) << 1e3 * seconds[i];
  return os.str();
}

/// The cuts of an unequal setup (and, with --place-by-speed, the order of
/// its machines along the pipeline: learning::balanced_placement) from the
/// costs measured here and the machines' slowdowns; printed with the
/// stages' predicted seconds per batch, from the stage costs and from the
/// layers alone. Returns the setup: its cuts and its stages' slowdowns in
/// the order placed.
setup placed_by_speed(const split_options& s, const std::string& name,
                      const std::vector<double>& machines, const plan_costs& costs) {
  const auto passes = learning::passes_below(planning_mode(s));
  const auto planned = costs.planned(passes);
  learning::placement p;
  if (s.place_by_speed) {
    p = learning::balanced_placement(planned, machines);
  } else {
    for (size_t m = 0; m < machines.size(); ++m)
      p.machines.push_back(m);
    p.cuts = learning::balanced_cuts(planned, machines);
  }
  std::vector<double> slowdowns;
  for (auto m : p.machines)
    slowdowns.push_back(machines[m]);
  const auto by_layers = learning::stage_costs::from_layers(costs.layers, passes);
  const auto seconds = learning::stage_seconds(planned, p.cuts, slowdowns);
  std::printf("cut by speed, machines' slowdowns %s (%s, planned from %s): stages on slowdowns "
              "%s, after layers %s; predicted ms per batch: stages %s, the whole model %s",
              join(machines).c_str(), learning::to_string(planning_mode(s)).c_str(),
              costs.stages ? "the stages' costs" : "the layers' costs", join(slowdowns).c_str(),
              join(std::vector<double>(p.cuts.begin(), p.cuts.end())).c_str(),
              ms_list(seconds).c_str(), ms_list({planned.at(0, planned.layers() - 1)}).c_str());
  std::printf(" (%lld batches in flight fill them)",
              static_cast<long long>(learning::batches_to_fill(seconds)));
  if (costs.stages) {
    const auto theirs = learning::balanced_cuts(by_layers, slowdowns);
    std::printf("; from the layers alone: these cuts %s, the whole model %s; the layers' own "
                "cuts after %s, stages %s",
                ms_list(learning::stage_seconds(by_layers, p.cuts, slowdowns)).c_str(),
                ms_list({by_layers.at(0, by_layers.layers() - 1)}).c_str(),
                join(std::vector<double>(theirs.begin(), theirs.end())).c_str(),
                ms_list(learning::stage_seconds(planned, theirs, slowdowns)).c_str());
  }
  std::printf("\n");
  return {name, p.cuts, slowdowns};
}

/// The whole model, then 2, 3 (and, with --cuts4, 4) stages, each of equal and unequal speed
/// (and unequal cut by speed, when asked).
std::vector<setup> setups_of(const split_options& s, const learning::dataset& train) {
  std::vector<setup> setups{{"whole", {}, {1.0}}};
  plan_costs costs;
  if (s.cut_by_speed || s.in_flight == 0) {
    const auto shape = learning::shape_of(train);
    costs.layers = learning::measure_layer_costs(s.model, shape, s.batch);
    std::printf("layers' ms per batch of %lld (forward + backward), measured alone:",
                static_cast<long long>(s.batch));
    auto names = learning::layer_names(s.model);
    for (size_t i = 0; i < costs.layers.size(); ++i)
      std::printf(" %s %.2f+%.2f", names[i].c_str(), 1e3 * costs.layers[i].forward,
                  1e3 * costs.layers[i].backward);
    std::printf("\n");
    if (s.plan_from == "stages") {
      costs.stages = learning::measure_stage_costs(s.model, shape, s.batch,
                                                   stage_options_of(s, planning_mode(s), s.in_flight));
      std::printf("stages' ms per batch of %lld, each run of layers trained as a %s stage "
                  "(first..last):",
                  static_cast<long long>(s.batch), learning::to_string(planning_mode(s)).c_str());
      for (int64_t f = 0; f < costs.stages->layers(); ++f)
        for (int64_t l = f; l < costs.stages->layers(); ++l)
          std::printf(" %lld..%lld %.2f", static_cast<long long>(f), static_cast<long long>(l),
                      1e3 * costs.stages->at(f, l));
      std::printf("\n");
    }
  }
  auto add = [&](const std::vector<int64_t>& cuts, const std::vector<double>& unequal) {
    const auto n = cuts.size() + 1;
    setups.push_back({std::to_string(n) + " stages, equal", cuts, std::vector<double>(n, 1.0)});
    setups.push_back({std::to_string(n) + " stages, unequal", cuts, unequal});
    if (s.cut_by_speed)
      setups.push_back(
        placed_by_speed(s, std::to_string(n) + " stages, unequal, cut by speed", unequal, costs));
  };
  add(s.cuts2, s.unequal2);
  add(s.cuts3, s.unequal3);
  if (!s.cuts4.empty())
    add(s.cuts4, s.unequal4);
  for (auto& su : setups)
    if (su.slowdowns.size() != su.cuts.size() + 1)
      throw std::invalid_argument("bench split: " + su.name + ": one slowdown per stage");
  if (s.in_flight == 0) {  // each setup's from its stages' predicted times
    const auto planned = costs.planned(learning::passes_below(planning_mode(s)));
    for (auto& su : setups) {
      if (su.cuts.empty())
        continue;
      const auto t = learning::stage_seconds(planned, su.cuts, su.slowdowns);
      su.in_flight = learning::batches_to_fill(t);
      std::printf("%s: predicted ms per batch %s: %lld batches in flight\n", su.name.c_str(),
                  ms_list(t).c_str(), static_cast<long long>(su.in_flight));
    }
  }
  if (!s.only.empty()) {
    std::vector<setup> kept;
    for (auto& su : setups)
      if (su.cuts.empty() || su.name.find(s.only) != std::string::npos)
        kept.push_back(su);  // the whole model stays: the reference
    setups = std::move(kept);
  }
  return setups;
}

/// Prints the run's parameters, the cuts and the model's layers.
void print_header(const split_options& s, const learning::dataset& train,
                  const learning::dataset& test) {
  learning::synthetic_gradient_options sg;
  if (s.sg_hidden > 0)
    sg.hidden = s.sg_hidden;
  std::printf("bench split: %s on Fashion-MNIST (%lld training, %lld test images), %u epochs, "
              "batch %lld, SGD lr %g momentum %g, %s (all modes but backprop), "
              "synthetic-gradient modules %s with %lld hidden units%s, %d seed(s); one thread per "
              "stage, stages as actors in one process, slower stages emulated\n",
              s.model.c_str(), static_cast<long long>(train.size()),
              static_cast<long long>(test.size()), s.epochs, static_cast<long long>(s.batch),
              s.lr, s.momentum,
              s.in_flight > 0
                ? (std::to_string(s.in_flight) + " batches in flight").c_str()
                : "as many batches in flight as fill each setup's stages (below)",
              sg.conditioned ? "conditioned on the label (cDNI)" : "unconditioned",
              static_cast<long long>(sg.hidden),
              s.sg_conv_layers > 0
                ? (" (after convolutions: " + std::to_string(s.sg_conv_layers) +
                   " 5x5 convolutions)").c_str()
                : "",
              s.repeat);
  if (s.schedule == "1f1b")
    std::printf("every mode but backprop: the stages keep to the one-forward-one-backward "
                "schedule (stage K holds at most %s - K batches)\n",
                s.in_flight > 0 ? std::to_string(s.in_flight).c_str() : "in_flight");
  if (s.stage_lr_warmup > 0 && s.stage_lr_warmup_rule == "delay")
    std::printf("every mode but backprop: over its first %lld steps, each stage's learning rate "
                "is divided by d^(1 - step/%lld) for a gradient d steps late\n",
                static_cast<long long>(s.stage_lr_warmup),
                static_cast<long long>(s.stage_lr_warmup));
  else if (s.stage_lr_warmup > 0)
    std::printf("every mode but backprop: each stage's learning rate rises linearly over its "
                "first %lld steps\n",
                static_cast<long long>(s.stage_lr_warmup));
  std::printf("cuts after layers: 2 stages %s, 3 stages %s%s (layers: ",
              join(std::vector<double>(s.cuts2.begin(), s.cuts2.end())).c_str(),
              join(std::vector<double>(s.cuts3.begin(), s.cuts3.end())).c_str(),
              s.cuts4.empty()
                ? ""
                : (", 4 stages " + join(std::vector<double>(s.cuts4.begin(), s.cuts4.end())))
                    .c_str());
  auto names = learning::layer_names(s.model);
  for (size_t i = 0; i < names.size(); ++i)
    std::printf("%s%zu %s", i ? ", " : "", i, names[i].c_str());
  std::printf(")\n\n");
}

/// One line of the table: a setup and mode over every seed.
struct row {
  std::string setup, mode;
  spread seconds, accuracy, to_target, megabytes, idle;
  /// The seeds whose run stopped with an error, and why ("seed 2: ...").
  std::vector<std::string> failures;
  std::vector<double> curve_seconds, curve_accuracy;  // seed 1's
};

/// Runs `su` in `mode` for every seed: its epochs to `csv`, a line per seed.
row run_row(const split_options& s, const setup& su, const std::string& mode_name,
            learning::stage_mode mode, const std::shared_ptr<const learning::dataset>& train,
            const std::shared_ptr<const learning::dataset>& test, std::ofstream& csv) {
  row r;
  r.setup = su.name;
  r.mode = su.cuts.empty() ? "-" : mode_name;
  for (int k = 0; k < s.repeat; ++k) {
    const uint64_t seed = s.seed + static_cast<uint64_t>(k);
    auto o = run_one(s, su, mode, seed, train, test);
    if (!o.error.empty()) {
      // Its figures are missing from the row; the next seed and setup go on.
      r.failures.push_back("seed " + std::to_string(seed) + ": " + o.error);
      for (auto* cell : {&r.seconds, &r.accuracy, &r.to_target, &r.megabytes, &r.idle})
        cell->add(NAN, false);
      std::printf("  %-18s %-9s seed %llu: stopped with an error: %s\n", su.name.c_str(),
                  r.mode.c_str(), static_cast<unsigned long long>(seed), o.error.c_str());
      std::fflush(stdout);
      continue;
    }
    r.seconds.add(o.seconds());
    r.accuracy.add(o.accuracy());
    const auto t = o.time_to(s.target);
    r.to_target.add(t, t >= 0);
    r.megabytes.add(static_cast<double>(o.bytes()) / 1e6);
    double idle = 0;
    for (auto& st : o.stages)
      idle = std::max(idle, st.idle_share());
    r.idle.add(su.cuts.empty() ? 0.0 : idle);
    for (auto& e : o.epochs) {
      csv << '"' << su.name << "\"," << r.mode << ',' << seed << ',' << e.epoch + 1 << ','
          << e.seconds << ',' << e.train_loss << ',' << e.test_accuracy << '\n';
      if (k == 0) {
        r.curve_seconds.push_back(e.seconds);
        r.curve_accuracy.push_back(e.test_accuracy);
      }
    }
    std::string idle_each, cpu_each;
    for (auto& st : o.stages) {
      idle_each += (idle_each.empty() ? "" : " ") + fixed(100 * st.idle_share(), 0) + "%";
      cpu_each += (cpu_each.empty() ? "" : " ") +
                  fixed(st.batches ? 1e3 * st.train_cpu_seconds / static_cast<double>(st.batches)
                                   : 0.0, 2);
    }
    const auto rollbacks = o.stages.empty() ? 0 : o.stages.front().rollbacks;
    std::printf("  %-18s %-9s seed %llu: %.1f s, accuracy %.4f, stages idle %s, CPU ms per "
                "training batch %s (before slowdowns)%s\n",
                su.name.c_str(), r.mode.c_str(), static_cast<unsigned long long>(seed),
                o.seconds(), o.accuracy(), idle_each.c_str(), cpu_each.c_str(),
                rollbacks ? (", " + std::to_string(rollbacks) + " rollbacks (runaways)").c_str()
                          : "");
    std::fflush(stdout);
  }
  return r;
}

/// Prints the table of rows.
void print_table(const split_options& s, const std::vector<row>& rows) {
  std::printf("\n| setup | mode | training time | test accuracy | time to %.2f | MB between "
              "stages | most idle stage | runs stopped with an error |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- |\n",
              s.target);
  for (auto& r : rows) {
    std::string failed;
    for (auto& f : r.failures)
      failed += (failed.empty() ? "" : "; ") + f;
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.setup.c_str(), r.mode.c_str(),
                r.seconds.show("%.1f", " s").c_str(), r.accuracy.show("%.4f").c_str(),
                r.to_target.show("%.1f", " s").c_str(), r.megabytes.show("%.1f").c_str(),
                r.idle.show("%.2f").c_str(), failed.empty() ? "none" : failed.c_str());
  }
}

/// Writes split.gp and the curves of seed 1 (split-N.dat), then runs gnuplot.
void plot_accuracy(const options& opt, const split_options& s, const std::vector<row>& rows) {
  namespace fs = std::filesystem;
  // Accuracy against time, seed 1.
  const auto script = fs::path(opt.out_dir) / "split.gp";
  {
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 900,600\nset output '"
       << (fs::path(opt.out_dir) / "split.png").string() << "'\n"
       << "set xlabel 'training time (s)'\nset ylabel 'test accuracy'\nset key bottom right\n"
       << "set title '" << s.model << ": whole, and split (one curve a setup and mode)'\nplot";
    bool first = true;
    for (size_t i = 0; i < rows.size(); ++i) {
      auto file = fs::path(opt.out_dir) / ("split-" + std::to_string(i) + ".dat");
      std::ofstream part(file);
      for (size_t j = 0; j < rows[i].curve_seconds.size(); ++j)
        part << rows[i].curve_seconds[j] << ' ' << rows[i].curve_accuracy[j] << '\n';
      gp << (first ? " " : ", ") << "'" << file.string() << "' using 1:2 with linespoints title '"
         << rows[i].setup << (rows[i].mode == "-" ? "" : ", " + rows[i].mode) << "'";
      first = false;
    }
    gp << "\n";
  }
  if (std::system(("gnuplot '" + script.string() + "' 2>/dev/null").c_str()) != 0)
    std::printf("(gnuplot failed: no plot)\n");
}

/// Prints a summary line for every mode but backprop: against backprop on
/// the same stages (median over the split setups of the per-setup
/// medians), the unequal 2-stage case, and the worst seed's accuracy.
void print_summary(const split_options& s, const std::vector<row>& rows) {
  for (const auto& mode : s.modes) {
    if (mode == "backprop")
      continue;
    std::vector<double> speedups, points;
    double unequal_speedup = NAN, unequal_points = NAN, worst = NAN;
    size_t failed = 0;
    for (const auto& r : rows)
      if (r.mode == mode)
        failed += r.failures.size();
    for (const auto& base : rows) {
      if (base.mode != "backprop")
        continue;
      for (const auto& r : rows) {
        if (r.setup != base.setup || r.mode != mode)
          continue;
        const double sp = base.seconds.median() / r.seconds.median();
        const double pts = 100 * (r.accuracy.median() - base.accuracy.median());
        speedups.push_back(sp);
        points.push_back(pts);
        for (double a : r.accuracy.values)
          worst = std::isnan(worst) ? a : std::min(worst, a);
        if (r.setup == "2 stages, unequal") {
          unequal_speedup = sp;
          unequal_points = pts;
        }
      }
    }
    if (speedups.empty())
      continue;
    spread sp, pt;
    for (auto v : speedups)
      sp.add(v);
    for (auto v : points)
      pt.add(v);
    const std::string unequal =
      std::isnan(unequal_speedup)
        ? std::string{}
        : "; 2 stages unequal " + fixed(unequal_speedup, 2) + "x, "
            + (unequal_points >= 0 ? "+" : "") + fixed(unequal_points, 2) + " pts";
    std::printf("summary: %s %.2fx faster than backprop, %+.2f pts%s; worst seed's accuracy "
                "%.4f (median over %zu split setups, %s, %u epochs)%s\n",
                mode.c_str(), sp.median(), pt.median(), unequal.c_str(), worst, speedups.size(),
                s.model.c_str(), s.epochs,
                failed ? ("; " + std::to_string(failed) + " run(s) stopped with an error, left "
                          "out (the table says which)").c_str()
                       : "");
  }
  // Seed by seed: both runs of a seed start from the same weights and see
  // the same batches, so their difference is read without the spread
  // between seeds (every run records an accuracy, so the i-th values are
  // the same seed's).
  for (const auto& base : rows) {
    if (base.mode != "backprop")
      continue;
    for (const auto& r : rows) {
      if (r.setup != base.setup || r.mode == "backprop" || !r.failures.empty() ||
          !base.failures.empty() || r.accuracy.values.size() != base.accuracy.values.size())
        continue;
      spread diff;
      std::string each;
      for (size_t i = 0; i < r.accuracy.values.size(); ++i) {
        diff.add(100 * (r.accuracy.values[i] - base.accuracy.values[i]));
        char b[32];
        std::snprintf(b, sizeof b, " %+.2f", diff.values.back());
        each += b;
      }
      std::printf("seed by seed: %s, %s: accuracy minus split backprop's%s pts (median %+.2f, "
                  "worst %+.2f)\n",
                  r.setup.c_str(), r.mode.c_str(), each.c_str(), diff.median(),
                  *std::min_element(diff.values.begin(), diff.values.end()));
    }
  }
  // Against the whole model on one machine of the fastest kind.
  const row* whole = nullptr;
  for (const auto& r : rows)
    if (r.setup == "whole")
      whole = &r;
  if (!whole)
    return;
  for (const auto& r : rows)
    if (r.setup.find("unequal") != std::string::npos && r.mode != "backprop")
      std::printf("against the whole model: %s, %s: %.2fx its speed (%.1f s against %.1f s), "
                  "%+.2f pts\n",
                  r.setup.c_str(), r.mode.c_str(), whole->seconds.median() / r.seconds.median(),
                  r.seconds.median(), whole->seconds.median(),
                  100 * (r.accuracy.median() - whole->accuracy.median()));
}

} // namespace

int split(const options& opt, const split_options& s) {
  at::set_num_threads(1);
  actors::tune_allocator();  // the same allocator settings as the nodes
  auto train = std::make_shared<learning::dataset>(
    learning::load_fashion_mnist(opt.data_dir, learning::split::train, opt.samples));
  auto test = std::make_shared<learning::dataset>(
    learning::load_fashion_mnist(opt.data_dir, learning::split::test));
  print_header(s, *train, *test);
  const auto setups = setups_of(s, *train);

  namespace fs = std::filesystem;
  fs::create_directories(opt.out_dir);
  const auto csv_path = fs::path(opt.out_dir) / "split.csv";
  std::ofstream csv(csv_path);
  csv << "setup,mode,seed,epoch,seconds,train_loss,test_accuracy\n";
  std::vector<row> rows;
  for (auto& su : setups) {
    bool whole_done = false;
    for (auto& mode_name : s.modes) {
      const auto mode = learning::parse_stage_mode(mode_name);
      if (su.cuts.empty() && std::exchange(whole_done, true))
        continue;  // one stage: trained once
      // The whole model is the reference: plain training, as backprop
      // (a one-stage pipeline in another mode would take its warm-up).
      rows.push_back(run_row(s, su, mode_name,
                             su.cuts.empty() ? learning::stage_mode::backprop : mode, train, test,
                             csv));
    }
  }
  print_table(s, rows);
  plot_accuracy(opt, s, rows);
  std::printf("\nper epoch: %s; plot: %s\n", csv_path.string().c_str(),
              (fs::path(opt.out_dir) / "split.png").string().c_str());
  print_summary(s, rows);
  return 0;
}

} // namespace eg::bench
