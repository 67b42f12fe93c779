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
void run_processes(const config::cluster_config& cfg, const std::filesystem::path& dir,
                   const std::string& who);

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

/// `v` with `digits` decimals.
std::string fixed(double v, int digits);

/// The cells of one line of the run directory's CSV files (no cell there
/// holds a comma: lists inside a cell are separated by ';').
std::vector<std::string> csv_cells(const std::string& line);

} // namespace eg::bench
