#pragma once
// Benchmarks reachable as `edgegossip bench NAME`. Each runs its baseline in
// the same run, prints its figures and ends with a one-line summary.

#include <string>
#include <vector>

namespace eg::bench {

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

} // namespace eg::bench
