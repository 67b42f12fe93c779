// Small data sets built in the tests (data/dataset.hpp): random images held
// as bytes, as the readers hold them, and Fashion-MNIST's description for
// models built without loading it.
#pragma once

#include "data/dataset.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace eg::test {

/// The class names "0".."k-1".
inline std::vector<std::string> numbered_classes(int64_t k) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < k; ++i)
    out.push_back(std::to_string(i));
  return out;
}

/// Fashion-MNIST without its samples: 1 x 28 x 28, 10 classes, its usual
/// normalisation (what a run's export carries).
inline data::description fashion_description() {
  return {data::sample_shape::image(1, 28, 28), numbered_classes(10), {{0.2860}, {0.3530}}};
}

/// `n` random 1 x 28 x 28 images (bytes drawn uniformly from torch's global
/// generator) of `classes` classes, normalised by their own statistics, so
/// that batches are about mean 0 and standard deviation 1; labels `labels`
/// ([n] int64), or drawn uniformly when undefined.
inline data::dataset random_images(int64_t n, torch::Tensor labels = {}, int64_t classes = 10) {
  data::dataset d;
  d.shape = data::sample_shape::image(1, 28, 28);
  d.classes = numbered_classes(classes);
  d.numbered_classes = true;
  d.samples = torch::randint(0, 256, {n, 1, 28, 28}, torch::kUInt8);
  d.labels = labels.defined() ? labels : torch::randint(0, classes, {n}, torch::kInt64);
  d.norm = d.local_moments().finish();
  return d;
}

/// `n` random samples of `features` float32 features (standard normal), of
/// `classes` classes, not normalised.
inline data::dataset random_features(int64_t n, int64_t features, int64_t classes) {
  data::dataset d;
  d.shape = data::sample_shape::features(features);
  d.classes = numbered_classes(classes);
  d.numbered_classes = true;
  d.samples = torch::randn({n, features});
  d.labels = torch::randint(0, classes, {n}, torch::kInt64);
  return d;
}

} // namespace eg::test
