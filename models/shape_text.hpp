#pragma once
// Shapes as text and with a batch dimension: for the layered models and
// the stages of split models.

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace eg::learning::shape_text {

/// "[16, 14, 14]"
inline std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline std::string shape_string(const torch::Tensor& t) {
  return t.defined() ? shape_string(t.sizes().vec()) : std::string("(none)");
}

/// {b} followed by `shape`.
inline std::vector<int64_t> batched(int64_t b, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out{b};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

} // namespace eg::learning::shape_text
