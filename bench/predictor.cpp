// `edgegossip bench predictor`: EdgeGossip's performance predictor against
// the time real training epochs take while stress-ng co-runners of changing
// intensity (CPU, disk, network) share the machine. The predictor is used as
// the actors use it (actors/platform/predictor.cpp, actors/platform/platform.cpp): a contention
// sample twice a second, an observation of wall time per point after every
// second of training (paired with the mean contention of that second), and
// before each epoch the prediction the balancer plans with, epoch time =
// points * t0 * RG(U) for the mean contention U of the last 2 seconds. A history pass visits every
// intensity level once (the paper's profiling runs); the evaluation pass
// visits them again in another order and compares each epoch's prediction
// with the time it really took. Also the predictor's own cost per sample and
// per report.

#include "bench/bench.hpp"

#include "actors/node/runtime.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "algorithms/edgegossip/predictor.hpp"
#include "train/trainer.hpp"
#include "messages/codec.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace eg::bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

/// One intensity level: stress-ng workers of each kind.
struct level {
  std::string name;
  int cpu = 0;
  int cpu_load = 100;  ///< percent per CPU worker
  int disk = 0;
  int net = 0;
};

std::vector<level> levels() {
  return {
    {"idle", 0, 100, 0, 0},
    {"cpu1@25", 1, 25, 0, 0},
    {"cpu1@50", 1, 50, 0, 0},
    {"cpu1@100", 1, 100, 0, 0},
    {"cpu2@50", 2, 50, 0, 0},
    {"cpu2@75", 2, 75, 0, 0},
    {"cpu2@100", 2, 100, 0, 0},
    {"cpu3@100", 3, 100, 0, 0},
    {"disk1", 0, 100, 1, 0},
    {"disk2", 0, 100, 2, 0},
    {"net1", 0, 100, 0, 1},
    {"net2", 0, 100, 0, 2},
    {"cpu1@50+disk1", 1, 50, 1, 0},
    {"cpu1@50+net1", 1, 50, 0, 1},
    {"cpu1+disk1+net1", 1, 100, 1, 1},
  };
}

/// The stress-ng processes of one level; stopped when destroyed.
class corunner {
public:
  corunner(const level& l, const std::string& scratch) {
    if (l.cpu + l.disk + l.net == 0)
      return;
    std::vector<std::string> cmd{"stress-ng", "--quiet", "--timeout", "600s"};
    if (l.cpu > 0)
      cmd.insert(cmd.end(), {"--cpu", std::to_string(l.cpu), "--cpu-load",
                             std::to_string(l.cpu_load)});
    if (l.disk > 0)
      cmd.insert(cmd.end(), {"--hdd", std::to_string(l.disk), "--hdd-bytes", "64M",
                             "--temp-path", scratch});
    if (l.net > 0)
      cmd.insert(cmd.end(), {"--sock", std::to_string(l.net)});
    std::vector<char*> argv;
    for (auto& s : cmd)
      argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: stop all workers
    posix_spawnattr_setpgroup(&attr, 0);
    // Its stderr would only say that each level was stopped before its
    // --timeout ("finished prematurely"), which is how the levels change.
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
    const int rc = posix_spawnp(&pid_, "stress-ng", &files, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
      throw std::runtime_error("bench predictor: stress-ng cannot be run");
  }
  ~corunner() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGTERM);
      int status;
      ::waitpid(pid_, &status, 0);
      ::kill(-pid_, SIGKILL);  // any worker left of that group
    }
  }
  corunner(const corunner&) = delete;
  corunner& operator=(const corunner&) = delete;

private:
  pid_t pid_ = -1;
};

/// The predictor actor's clock: the contention monitor refreshed twice a
/// second, as actors/platform/predictor.cpp does it.
class sampler_thread {
public:
  sampler_thread() : thread_([this] { run(); }) {}
  ~sampler_thread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      over_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  learning::contention_monitor& monitor() { return monitor_; }

private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    auto next = clock_type::now();
    const auto period = std::chrono::duration_cast<clock_type::duration>(
      std::chrono::duration<double>(learning::contention_monitor::sample_period));
    while (!over_) {
      next += period;
      if (wake_.wait_until(lock, next, [this] { return over_; }))
        return;
      lock.unlock();
      monitor_.refresh();
      lock.lock();
    }
  }
  learning::contention_monitor monitor_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool over_ = false;
  std::thread thread_;
};

struct epoch_record {
  std::string phase;
  std::string level;
  double predicted = 0;  // seconds; 0: no prediction yet
  double actual = 0;
  learning::contention u;
  size_t observations = 0;  // observations made before the prediction
  double points = 0;        // data points the epoch trained
};

/// An observation as the model got it: the trace that lets another model
/// be replayed on the same run.
struct observation_record {
  double at = 0;  // seconds since the measuring began
  learning::contention u;
  double seconds_per_point = 0;
};

/// The error figures of the evaluation epochs, in percent (-1: none).
struct error_figures {
  double mape = -1;
  double worst = 0;
  int epochs = 0;
  /// Baseline: a predictor that ignores contention (the last epoch's time).
  double last_epoch = -1;
  /// The spread of the levels themselves: each evaluation epoch "predicted"
  /// after the fact by the mean time of the other epochs of its level
  /// (history and evaluation). No predictor that knows only the level, and
  /// nothing of how the co-runners burst during the epoch, does better on
  /// average; its MAPE is the run's noise floor.
  double noise_floor = -1;
};

error_figures errors_of(const std::vector<epoch_record>& records) {
  error_figures f;
  double sum = 0, naive_sum = 0, floor_sum = 0;
  int naive_n = 0, floor_n = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    if (r.phase != "evaluation")
      continue;
    if (r.predicted > 0) {
      const double e = std::abs(r.predicted - r.actual) / r.actual;
      sum += e;
      f.worst = std::max(f.worst, 100 * e);
      ++f.epochs;
    }
    if (i > 0) {
      naive_sum += std::abs(records[i - 1].actual - r.actual) / r.actual;
      ++naive_n;
    }
    double others = 0;
    int count = 0;
    for (const auto& o : records)
      if (&o != &r && o.level == r.level) {
        others += o.actual;
        ++count;
      }
    if (count > 0) {
      floor_sum += std::abs(others / count - r.actual) / r.actual;
      ++floor_n;
    }
  }
  if (f.epochs > 0)
    f.mape = 100 * sum / f.epochs;
  if (naive_n > 0)
    f.last_epoch = 100 * naive_sum / naive_n;
  if (floor_n > 0)
    f.noise_floor = 100 * floor_sum / floor_n;
  return f;
}

// The trace's two files: what the run writes and --replay reads.
constexpr const char* epochs_header =
  "index,phase,level,core,net_mb_s,disk_mb_s,wait,predicted_s,actual_s,observations,points";
constexpr size_t epochs_fields = 11;
constexpr const char* observations_header =
  "seconds,core,net_mb_s,disk_mb_s,wait,seconds_per_point";
constexpr size_t observations_fields = 6;

/// Rows of a CSV file written by this benchmark, below its header, which
/// must be `header`; each row must have `fields` fields.
std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& file,
                                               const char* header, size_t fields) {
  std::ifstream in(file);
  if (!in)
    throw std::runtime_error("bench predictor: cannot read " + file.string());
  std::vector<std::vector<std::string>> rows;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (number == 1) {
      if (line != header)
        throw std::runtime_error("bench predictor: " + file.string() +
                                 " is not a trace of this benchmark: its first line is not '" +
                                 header + "'");
      continue;
    }
    std::vector<std::string> row;
    std::stringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');)
      row.push_back(cell);
    if (row.size() != fields)
      throw std::runtime_error("bench predictor: " + file.string() + " line " +
                               std::to_string(number) + " has " + std::to_string(row.size()) +
                               " fields, not " + std::to_string(fields));
    rows.push_back(std::move(row));
  }
  return rows;
}

double number(const std::vector<std::string>& row, size_t i, const std::filesystem::path& file) {
  try {
    size_t used = 0;
    const double v = std::stod(row[i], &used);
    if (used == row[i].size() && std::isfinite(v))
      return v;
  } catch (const std::exception&) {
  }
  throw std::runtime_error("bench predictor: " + file.string() + ": '" + row[i] +
                           "' is not a number");
}

/// A recorded run (predictor.csv and observations.csv of `dir`) replayed
/// through the predictor as it is now: the same observations in the same
/// order, the same contention at each prediction, so that a change of the
/// model is judged on the same co-runners' noise.
int replay(const std::filesystem::path& dir) {
  const auto epochs_file = dir / "predictor.csv", trace_file = dir / "observations.csv";
  const auto epochs = read_csv(epochs_file, epochs_header, epochs_fields);
  const auto trace = read_csv(trace_file, observations_header, observations_fields);
  learning::slowdown_model model;
  std::vector<epoch_record> records, recorded;
  size_t fed = 0;
  for (const auto& row : epochs) {
    const auto upto = static_cast<size_t>(number(row, 9, epochs_file));
    if (upto > trace.size() || upto < fed)
      throw std::runtime_error("bench predictor: " + epochs_file.string() + " names " +
                               std::to_string(upto) + " observations, " + trace_file.string() +
                               " has " + std::to_string(trace.size()));
    for (; fed < upto; ++fed) {
      const auto& o = trace[fed];
      model.observe({number(o, 1, trace_file), number(o, 2, trace_file),
                     number(o, 3, trace_file), number(o, 4, trace_file)},
                    number(o, 5, trace_file));
    }
    epoch_record r;
    r.phase = row[1];
    r.level = row[2];
    r.u = {number(row, 3, epochs_file), number(row, 4, epochs_file),
           number(row, 5, epochs_file), number(row, 6, epochs_file)};
    r.actual = number(row, 8, epochs_file);
    if (model.size() > 0)
      r.predicted = number(row, 10, epochs_file) * model.seconds_per_point(r.u);
    records.push_back(r);
    r.predicted = number(row, 7, epochs_file);
    recorded.push_back(r);
  }
  const auto e = errors_of(records);
  std::printf("summary: replayed %s (%zu epochs, %zu observations): predictor MAPE %.2f%% over "
              "%d evaluation epochs (worst %.1f%%; recorded: %.2f%%), noise floor %.2f%%\n",
              dir.string().c_str(), records.size(), trace.size(), e.mape, e.epochs, e.worst,
              errors_of(recorded).mape, e.noise_floor);
  return 0;
}

/// The predictor's own costs, in seconds.
struct costs {
  double sample = 0;   ///< per contention sample
  double observe = 0;  ///< per observation
  double report = 0;   ///< per report
};

/// The predictor's own costs: contention samples, observations and encoded
/// reports, 2,000 of each; prints them.
costs measure_costs() {
  costs c;
  {
    learning::contention_sampler s;
    const int n = 2000;
    auto start = clock_type::now();
    learning::contention u;
    for (int i = 0; i < n; ++i)
      u = s.sample();
    c.sample = seconds_since(start) / n;
    learning::slowdown_model m;
    std::mt19937_64 r(2);
    std::uniform_real_distribution<double> d(0, 2);
    start = clock_type::now();
    for (int i = 0; i < n; ++i)
      m.observe({d(r), d(r) * 10, d(r) * 50, d(r)}, 1e-4 * (1 + d(r)));
    c.observe = seconds_since(start) / n;  // the window fills to 600 samples
    start = clock_type::now();
    size_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      messages::prediction pr;
      pr.platform = "p0";
      pr.observations = m.size();
      pr.throughput = m.throughput(u);
      pr.seconds_per_point = m.seconds_per_point(u);
      pr.t0 = m.t0();
      bytes += messages::encode({{"bench", messages::protocol_version, "p0"}, pr, nullptr}).size();
    }
    c.report = seconds_since(start) / n;
    std::printf("predictor cost: %.1f us per contention sample (/proc), %.1f us per "
                "observation (refit over a full window of %zu), %.1f us per report "
                "(prediction encoded, %zu bytes)\n",
                1e6 * c.sample, 1e6 * c.observe, m.size(), 1e6 * c.report,
                bytes / n);
  }
  return c;
}

/// Training on the shard as a platform does, with the predictor beside it:
/// the epochs predicted and measured, and the observations it got.
struct measurement {
  measurement(const std::vector<int64_t>& shard, std::mt19937_64& rng,
              learning::local_trainer& trainer, int64_t iterations)
      : shard(shard), rng(rng), trainer(trainer), iterations(iterations) {}

  const std::vector<int64_t>& shard;
  std::mt19937_64& rng;
  learning::local_trainer& trainer;
  learning::slowdown_model model;
  sampler_thread sampler;
  const int64_t iterations;
  std::vector<epoch_record> records;
  std::vector<observation_record> trace;
  const clock_type::time_point measuring = clock_type::now();
  // The platform's meter (learning::observation_meter), without its flush
  // at each epoch end: the recorded traces replay as they were made.
  learning::observation_meter meter;

  // Trains `its` iterations (fewer when `max_seconds` > 0 runs out first);
  // observations as the platform makes them.
  // More iterations than the shard has batches take several shuffled passes.
  void train_for(int64_t its, double max_seconds) {
    const auto begin = clock_type::now();
    for (int64_t left = its; left > 0;) {
      auto plan = learning::shuffled_plan(shard, 64, 1.0, rng);
      plan.batches.resize(std::min(plan.batches.size(), static_cast<size_t>(left)));
      left -= static_cast<int64_t>(plan.batches.size());
      trainer.begin_epoch(std::move(plan));
      auto last = clock_type::now();
      while (!trainer.epoch_done()
             && (max_seconds <= 0 || seconds_since(begin) < max_seconds)) {
        auto r = trainer.step();
        auto t = clock_type::now();
        auto o = meter.add(std::chrono::duration<double>(t - last).count(),
                           static_cast<uint64_t>(r.samples));
        last = t;
        // As the platform does: an observation after every second of training.
        if (o) {
          // Paired with the contention of those seconds, as the predictor does.
          sampler.monitor().refresh();
          auto u = sampler.monitor().last(o->seconds);
          const double spp = o->seconds / static_cast<double>(o->samples);
          model.observe(u, spp);
          trace.push_back({seconds_since(measuring), u, spp});
        }
      }
      if (max_seconds > 0 && seconds_since(begin) >= max_seconds)
        return;
    }
  }
  // One epoch predicted, then trained and timed.
  epoch_record run_epoch(const std::string& phase, const std::string& name) {
    epoch_record rec;
    rec.phase = phase;
    rec.level = name;
    sampler.monitor().refresh();
    rec.u = sampler.monitor().last(learning::contention_monitor::prediction_window);
    rec.observations = trace.size();
    const double points = static_cast<double>(iterations * 64);
    rec.points = points;
    if (model.size() > 0) {
      rec.predicted = points * model.seconds_per_point(rec.u);
    }
    auto start = clock_type::now();
    train_for(iterations, 0);
    rec.actual = seconds_since(start);
    records.push_back(rec);
    return rec;
  }
  // Training goes on while a level changes (co-runners start beside a
  // platform at work), for `settle` seconds before the next epoch is predicted.
  // It trains epochs of the same length as the measured ones (each begins
  // with a new shuffled plan): with short ones, that per-epoch work made the
  // observations 10 % slower than the epochs (bench predictor, 360
  // iterations an epoch).
  void keep_training(double seconds) {
    auto start = clock_type::now();
    while (seconds_since(start) < seconds)
      train_for(iterations, seconds - seconds_since(start));
  }
};

/// The history pass over every co-runner level, then the evaluation pass in
/// another order; prints each epoch.
void run_levels(const predictor_options& p, const std::filesystem::path& dir, measurement& m) {
  auto all = levels();
  std::vector<size_t> history(all.size()), evaluation(all.size());
  std::iota(history.begin(), history.end(), size_t{0});
  std::iota(evaluation.begin(), evaluation.end(), size_t{0});
  std::mt19937_64 order(p.seed);
  std::shuffle(evaluation.begin(), evaluation.end(), order);
  std::printf("prediction error: LeNet-5, %lld iterations of batch 64 per epoch, 1 thread; "
              "%zu co-runner levels, %d epochs each, history pass then evaluation pass in "
              "another order\n",
              static_cast<long long>(m.iterations), all.size(), p.epochs_per_level);
  std::printf("%-11s %-16s %6s %6s %7s %6s %10s %9s %8s\n", "phase", "level", "core", "net MB",
              "disk MB", "wait", "predicted", "actual s", "error %");
  for (auto [phase, seq] : {std::pair{"history", &history}, std::pair{"evaluation", &evaluation}}) {
    for (size_t li : *seq) {
      corunner load(all[li], (dir / "scratch").string());
      m.keep_training(p.settle_seconds);
      for (int e = 0; e < p.epochs_per_level; ++e) {
        auto rec = m.run_epoch(phase, all[li].name);
        auto err = [&](double predicted) {
          return predicted > 0 ? 100 * (predicted - rec.actual) / rec.actual : 0.0;
        };
        std::printf("%-11s %-16s %6.2f %6.1f %7.1f %6.2f %10.3f %9.3f %+8.1f\n", phase,
                    all[li].name.c_str(), rec.u.core, rec.u.net, rec.u.disk, rec.u.wait,
                    rec.predicted, rec.actual, err(rec.predicted));
        std::fflush(stdout);
      }
    }
  }
}

/// The trace's two files (predictor.csv, observations.csv) and predictor.gp.
void write_trace(const std::filesystem::path& dir, const std::vector<epoch_record>& records,
                 const std::vector<observation_record>& trace) {
  {
    std::ofstream csv(dir / "predictor.csv");
    csv.precision(17);
    csv << epochs_header << '\n';
    for (size_t i = 0; i < records.size(); ++i) {
      auto& r = records[i];
      csv << i << ',' << r.phase << ',' << r.level << ',' << r.u.core << ',' << r.u.net << ','
          << r.u.disk << ',' << r.u.wait << ',' << r.predicted << ',' << r.actual << ','
          << r.observations << ',' << r.points << '\n';
    }
  }
  {
    std::ofstream csv(dir / "observations.csv");
    csv.precision(17);
    csv << observations_header << '\n';
    for (auto& o : trace)
      csv << o.at << ',' << o.u.core << ',' << o.u.net << ',' << o.u.disk << ',' << o.u.wait
          << ',' << o.seconds_per_point << '\n';
  }
  {
    std::ofstream gp(dir / "predictor.gp");
    gp << "set terminal pngcairo size 900,520 noenhanced\n"
       << "set output '" << (dir / "predictor.png").string() << "'\n"
       << "set title 'Epoch time under changing co-runners: predicted before the epoch vs "
          "actual'\n"
       << "set xlabel 'epoch'\nset ylabel 'seconds'\nset key top left\nset grid\n"
       << "set datafile separator ','\n"
       << "plot '" << (dir / "predictor.csv").string()
       << "' every ::1 using 1:9 with linespoints title 'actual', '' every ::1 using 1:($8 > 0 ? "
          "$8 : 1/0) with linespoints title 'predicted'\n";
  }
}

} // namespace

int predictor(const options& opt, const predictor_options& p) {
  if (!p.replay.empty())
    return replay(p.replay);
  actors::tune_allocator();
  at::set_num_threads(1);
  auto train = std::make_shared<learning::dataset>(
    learning::load_fashion_mnist(opt.data_dir, learning::split::train, 20000));
  std::vector<int64_t> shard(static_cast<size_t>(train->size()));
  std::iota(shard.begin(), shard.end(), int64_t{0});
  learning::local_trainer trainer(learning::make_classifier("lenet5", 1, learning::shape_of(*train)), train, shard,
                                  learning::sgd_options{});
  std::mt19937_64 rng(1);
  auto dir = std::filesystem::absolute(std::filesystem::path(opt.out_dir) / "predictor");
  std::filesystem::create_directories(dir / "scratch");

  // -- the predictor's own costs ------------------------------------------------
  const auto cost = measure_costs();

  // -- prediction error under co-runners ------------------------------------------
  measurement m(shard, rng, trainer, p.iterations);
  run_levels(p, dir, m);
  std::filesystem::remove_all(dir / "scratch");

  const auto e = errors_of(m.records);

  write_trace(dir, m.records, m.trace);
  if (std::system(("gnuplot '" + (dir / "predictor.gp").string() + "' 2>/dev/null").c_str()) != 0)
    std::printf("(gnuplot failed: no plot)\n");
  std::printf("figures: %s, plot: %s\n", (dir / "predictor.csv").string().c_str(),
              (dir / "predictor.png").string().c_str());
  std::printf("summary: predictor MAPE %.2f%% over %d evaluation epochs (worst %.1f%%), "
              "last-epoch-time baseline %.2f%%, noise floor (mean of the level's other "
              "epochs, after the fact) %.2f%%; goal <= 3%%: %s; cost %.0f us per sample, %.0f "
              "us per observation, %.1f us per report\n",
              e.mape, e.epochs, e.worst, e.last_epoch, e.noise_floor,
              e.mape >= 0 && e.mape <= 3 ? "met" : "missed", 1e6 * cost.sample,
              1e6 * cost.observe, 1e6 * cost.report);
  return 0;
}

} // namespace eg::bench
