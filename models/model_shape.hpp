#pragma once
// What a model is built for (no torch here, so that actors' headers can
// name it).

#include "data/shape.hpp"

#include <cstdint>
#include <string>

namespace eg::data {
class dataset;
}

namespace eg::learning {

/// What a model is built for: the shape of one sample and the number of
/// classes (data::dataset::shape, num_classes()).
struct model_shape {
  data::sample_shape input;
  int64_t classes = 0;
  std::string to_string() const;
};
bool operator==(const model_shape& a, const model_shape& b);
inline bool operator!=(const model_shape& a, const model_shape& b) { return !(a == b); }


/// The shape of the models for `d` (models/model.cpp).
model_shape shape_of(const data::dataset& d);

} // namespace eg::learning
