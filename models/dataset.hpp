#pragma once
// The training and test data as the learning code sees it: data::dataset
// (data/dataset.hpp), which owns its sample shape, classes and
// normalisation. The readers by format are in data/readers.hpp; a node reads
// its data with data/load.hpp.

#include "data/dataset.hpp"
#include "data/readers.hpp"
#include "models/model_shape.hpp"

#include <string>

namespace eg::learning {

using data::data_error;
using data::dataset;
using data::split;

/// Fashion-MNIST (IDX files in `dir`) with its class names, normalised by
/// the loaded images' own statistics: for the tests and benchmarks, which
/// measure on that data set. `limit` > 0 keeps the first `limit` samples.
/// Throws data_error.
dataset load_fashion_mnist(const std::string& dir, split which, int64_t limit = 0);

/// Fashion-MNIST's model shape (1 x 28 x 28, 10 classes), for tests and
/// benchmarks that build models without loading it.
model_shape fashion_mnist_shape();

} // namespace eg::learning
