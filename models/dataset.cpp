#include "models/dataset.hpp"

namespace eg::learning {

dataset load_fashion_mnist(const std::string& dir, split which, int64_t limit) {
  data::read_options o;
  o.which = which;
  o.limit = limit;
  o.classes = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  auto r = data::read_split(dir, "idx", o);
  r.data.norm = r.data.local_moments().finish();
  return std::move(r.data);
}

model_shape fashion_mnist_shape() { return {data::sample_shape::image(1, 28, 28), 10}; }

} // namespace eg::learning
