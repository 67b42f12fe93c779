// What the tests of models/, train/ and algorithms/ share: a scratch directory and tensor
// comparisons.
#pragma once

#include "process.hpp"
#include "sample_sets.hpp"

#include "models/dataset.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace eg::test {

/// A scratch directory whose files are named by file(name).
struct scratch_dir : temp_dir {
  std::string file(const std::string& name) const { return *this / name; }
};

/// Bit-for-bit equality of two lists of tensors.
inline bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i]))
      return false;
  return true;
}

/// `n` random 28 x 28 images of 10 classes (bytes, normalised by their own
/// statistics), drawn from `seed`.
inline std::shared_ptr<const learning::dataset> random_set(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  return std::make_shared<const learning::dataset>(random_images(n));
}

/// 0, 1, ..., n - 1 (a shard of the first n samples).
inline std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

} // namespace eg::test
