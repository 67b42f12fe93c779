#pragma once
// Benchmarks reachable as `edgegossip bench NAME`. Each runs its baseline in
// the same run, prints its figures and ends with a one-line summary.

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace eg::bench {

/// Adds `bench NAME [options]` to the command line; the function returned runs
/// the benchmark chosen and returns its exit code, or -1 if `bench` was not given.
std::function<int()> add_subcommand(CLI::App& app);

struct options {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t samples = 0;  ///< 0: the benchmark's default
  int threads = 0;      ///< 0: every core
  std::string out_dir = "bench-results";
};

/// Training throughput inside the actor system (1, 2 and 4 platforms in one
/// process, gossip on) against a bare LibTorch loop of the same model, batch
/// and threads.
int framework(const options& opt);

struct tta_options {
  std::string config_file;   ///< "" = the default heterogeneity profile
  double target = 0.87;      ///< averaged-model test accuracy
  uint32_t epochs = 12;      ///< the same for every strategy
  std::vector<std::string> strategies{"gosgd", "gosgd-async", "edgegossip"};
  std::vector<std::string> overrides;  ///< --set key=value
};

/// Time to accuracy of GoSGD (epoch-synchronous and asynchronous) and
/// EdgeGossip on the same cluster, data, seed and heterogeneity profile.
int tta(const options& opt, const tta_options& t);

} // namespace eg::bench
