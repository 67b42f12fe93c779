#pragma once
// Helpers shared by the benchmarks that run whole clusters (tta, traffic).

#include "config/config.hpp"

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace eg::bench {

/// Every node of `cfg` as its own `edgegossip node` process on this machine
/// (cluster.toml and their logs, NODE.log, in `dir`); returns once all have
/// exited. Throws naming `who` (e.g. "bench tta") when one failed.
/// `prefixes[i]`, where given, runs node i's process through that command
/// (e.g. `ip netns exec NS`: a host of its own). `wall_limit` > 0: after
/// that many seconds the nodes still running are stopped (SIGTERM, SIGKILL
/// 30 s later) and whatever they wrote stays; returns whether they were
/// (their exit is then no failure).
bool run_processes(const config::cluster_config& cfg, const std::filesystem::path& dir,
                   const std::string& who,
                   const std::vector<std::vector<std::string>>& prefixes = {},
                   double wall_limit = 0);

/// Median and range of the defined values (a value < 0 is "not reached").
struct spread {
  std::vector<double> values;
  size_t missing = 0;
  void add(double v, bool defined = true);
  double median() const;  ///< NaN without values
  /// "MEDIAN [MIN .. MAX]" (the median alone for one value), "n/a" for none,
  /// with " (K n/a)" when values were missing.
  std::string show(const char* format, const char* unit = "") const;
};

/// A strategy as the cluster benchmarks take it: "gosgd", "sgp",
/// "sparse-push:D", "scsp:D" (or any other strategy.name), D its density;
/// "/H" after a push-sum one ("sparse-push:0.01/4", "sgp/2") gossips every
/// H steps (strategy.gossip_every); "edgegossip+G..." is EdgeGossip over
/// the push-sum strategy G ("edgegossip+sparse-push:0.03/8").
struct strategy_spec {
  std::string name;     ///< strategy.name
  std::string gossip;   ///< strategy.gossip ("" as configured)
  std::string density;  ///< as written; "" as configured
  std::string every;    ///< as written; "" every step
  /// The gossip's rule: `gossip` if given, else `name`.
  const std::string& rule() const { return gossip.empty() ? name : gossip; }
};
strategy_spec parse_spec(const std::string& spec);
/// Whether the spec's gossip is of the push-sum family.
bool push_sum_family(const strategy_spec& s);
/// Sets `spec` in `cfg` (the push-sum family on the exponential graph);
/// throws config::config_error naming `who` for a spec that does not fit.
void apply_strategy(config::cluster_config& cfg, const std::string& spec, const std::string& who);
/// `spec` as a file name: '/' and ':' made '_' (e.g. "runs-" + this).
std::string file_name_of(const std::string& spec);

/// `v` with `digits` decimals.
std::string fixed(double v, int digits);

/// The cells of one line of the run directory's CSV files (no cell there
/// holds a comma: lists inside a cell are separated by ';').
std::vector<std::string> csv_cells(const std::string& line);

} // namespace eg::bench
