// What the tests of models/, train/ and algorithms/ share: a scratch directory and tensor
// comparisons.
#pragma once

#include "process.hpp"

#include <torch/torch.h>

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

} // namespace eg::test
