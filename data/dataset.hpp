#pragma once
// The data layer: a data set that owns its sample shape (C x H x W images or
// F features), its class names and its normalisation. Images are held as
// bytes and normalised per batch; features as float32. Readers are
// registered by format (data/readers.hpp); the models ask a data set for
// their input shape and class count, and nothing else knows them.

#include "data/shape.hpp"

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace eg::data {


class dataset {
public:
  /// [N, C, H, W] uint8 pixels for images (float32: values as they are,
  /// e.g. already averaged points); [N, F] float32 for features.
  torch::Tensor samples;
  /// [N] int64, each in 0..classes.size() - 1.
  torch::Tensor labels;
  sample_shape shape;
  /// Class names by output index.
  std::vector<std::string> classes;
  /// The data's labels were numbers (idx, CIFAR, NumPy, numeric CSV), and
  /// `classes` only names them "0".."K-1": a cluster's class list then names
  /// label k as its class k, where named labels (folders, CSV names) are
  /// matched by name.
  bool numbered_classes = false;
  /// What batches are normalised with; empty: not normalised (pixels / 255).
  normalisation norm;

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  description describe() const { return {shape, classes, norm}; }
  int64_t num_classes() const { return static_cast<int64_t>(classes.size()); }
  bool images() const { return !shape.flat; }

  /// The samples at `indices` (int64) as float32 [B, dims...], normalised.
  torch::Tensor batch(const torch::Tensor& indices) const;
  /// The samples [begin, end) likewise.
  torch::Tensor range(int64_t begin, int64_t end) const;
  /// Every sample likewise (small sets: tests, aggregation).
  torch::Tensor all() const { return range(0, size()); }
  /// `norm` as tensors on `device`, shaped to broadcast over a batch
  /// ([1, C, 1, 1] or [1, F]); both undefined when there is none.
  std::pair<torch::Tensor, torch::Tensor> norm_tensors(torch::Device device) const;
  /// Rows of `samples` (on any device, e.g. a copy of the set on a GPU) as
  /// float32 input there, normalised with norm_tensors() of that device.
  torch::Tensor input(const torch::Tensor& raw,
                      const std::pair<torch::Tensor, torch::Tensor>& norm_on_device) const;
  /// The labels as a vector.
  std::vector<int64_t> label_vector() const;
  /// Samples per class.
  std::vector<int64_t> class_counts() const;

  /// This data set's sums for the cluster's normalisation.
  moments local_moments() const;

  /// The first `n` samples (all when n <= 0 or n >= size()); shares memory.
  dataset head(int64_t n) const;
  /// The samples at `indices`, in that order (a copy).
  dataset subset(const std::vector<int64_t>& indices) const;
  /// The same data with other labels (names -> indices of `to`); throws
  /// data_error naming `where` and the class when one is not in `to`.
  void relabel(const std::vector<std::string>& to, const std::string& where);
  /// Checks that labels, samples, shape and classes agree; throws data_error
  /// naming `where`.
  void check(const std::string& where) const;
};

/// The same samples as `d` (shared, not copied) normalised with `norm`:
/// `d` itself where its normalisation is that already. Throws data_error
/// when `norm` is for another number of channels (or features).
std::shared_ptr<const dataset> with_normalisation(std::shared_ptr<const dataset> d,
                                                  const normalisation& norm);

/// The parts one after another (a node's platforms' own directories):
/// they must have one shape, one class list and one sample type; throws
/// data_error naming `where` (one name a part) and what differs. The
/// normalisation is the first part's.
dataset concat(const std::vector<dataset>& parts, const std::vector<std::string>& where);

/// Random crop (zero padding of 4, images only) and horizontal flip, applied
/// to a normalised batch [B, C, H, W] in place of a copy, from `generator`
/// seeds (one draw per sample). Features are returned as they are.
torch::Tensor augment(const torch::Tensor& batch, uint64_t seed);

} // namespace eg::data
