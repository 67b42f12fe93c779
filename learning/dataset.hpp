#pragma once
// Fashion-MNIST (and any MNIST-format data set) read from IDX files, gzip'd
// or raw, into memory as tensors.

#include <torch/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace eg::learning {

/// A data set that is missing or malformed; what() names the file.
class data_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct dataset {
  torch::Tensor images;  ///< [N, 1, 28, 28] float32, normalised (pixel_mean, pixel_std)
  torch::Tensor labels;  ///< [N] int64, 0..9
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

enum class split { train, test };

/// Reads `<dir>/{train,t10k}-images-idx3-ubyte[.gz]` and the matching labels
/// file. `limit` > 0 keeps the first `limit` samples. Throws data_error.
dataset load_fashion_mnist(const std::string& dir, split s, int64_t limit = 0);

/// Number of classes of Fashion-MNIST.
inline constexpr int64_t num_classes = 10;

/// The normalisation of the images: pixels (bytes) / 255, less the mean,
/// over the standard deviation, in float32. The exported model builds it in
/// (learning/export.hpp).
inline constexpr double pixel_mean = 0.2860;
inline constexpr double pixel_std = 0.3530;

} // namespace eg::learning
