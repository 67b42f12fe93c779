// The splittable models: each an ordered list of layers, a layer being one
// convolution or fully connected map with its ReLU and pooling.
#include "models/layered.hpp"
#include "common/error.hpp"

#include "models/conv.hpp"
#include "models/pooling.hpp"
#include "models/shape_text.hpp"
#include "models/zoo.hpp"

#include <torch/torch.h>

#include <mutex>

namespace eg::learning {

namespace {

// One layer of a model: a convolution (kernel, padding) or a fully connected
// map (the first of these flattens its input), then ReLU, then 2x2 pooling.
struct layer_spec {
  const char* name;
  bool conv;
  int64_t in;
  int64_t out;
  int64_t kernel;   // convolutions
  int64_t padding;  // convolutions
  bool relu;
  bool pool;
};

struct model_spec {
  const char* name;
  std::vector<layer_spec> layers;
  // Weights drawn from He's normal (fan in, ReLU gain), biases 0, instead
  // of torch's defaults (docs/SPLIT.md).
  bool he_init = false;
};

// lenet5: models/model.cpp's LeNet-5, layer for layer, built in the same
// order so that equal seeds give equal parameters.
// conv8: five 3x3 convolutions and three fully connected layers, small
// enough for an epoch of Fashion-MNIST in seconds on one core, He-initialised
// (torch's default initialisation leaves it on a plateau for hundreds of
// batches, which synthetic gradients do not survive; docs/SPLIT.md).
const std::vector<model_spec>& specs() {
  static const std::vector<model_spec> all = {
      {"lenet5",
       {{"conv1", true, 1, 6, 5, 2, true, true},
        {"conv2", true, 6, 16, 5, 0, true, true},
        {"fc1", false, 16 * 5 * 5, 120, 0, 0, true, false},
        {"fc2", false, 120, 84, 0, 0, true, false},
        {"fc3", false, 84, 10, 0, 0, false, false}}},
      {"conv8",
       {{"conv1", true, 1, 8, 3, 1, true, true},
        {"conv2", true, 8, 8, 3, 1, true, false},
        {"conv3", true, 8, 16, 3, 1, true, true},
        {"conv4", true, 16, 16, 3, 1, true, false},
        {"conv5", true, 16, 32, 3, 1, true, true},
        {"fc1", false, 32 * 3 * 3, 128, 0, 0, true, false},
        {"fc2", false, 128, 64, 0, 0, true, false},
        {"fc3", false, 64, 10, 0, 0, false, false}},
       true},
      // vgg11: VGG's eleven layers (eight 3x3 convolutions, three fully
      // connected), narrow (16 to 128 channels) and pooled four times, for
      // 28x28 or 32x32 images; about eleven times conv8's work.
      {"vgg11",
       {{"conv1", true, 1, 16, 3, 1, true, true},
        {"conv2", true, 16, 32, 3, 1, true, true},
        {"conv3", true, 32, 64, 3, 1, true, false},
        {"conv4", true, 64, 64, 3, 1, true, true},
        {"conv5", true, 64, 128, 3, 1, true, false},
        {"conv6", true, 128, 128, 3, 1, true, false},
        {"conv7", true, 128, 128, 3, 1, true, false},
        {"conv8", true, 128, 128, 3, 1, true, true},
        {"fc1", false, 128, 256, 0, 0, true, false},
        {"fc2", false, 256, 128, 0, 0, true, false},
        {"fc3", false, 128, 10, 0, 0, false, false}},
       true},
  };
  return all;
}

std::string known_models() {
  std::string s;
  for (const auto& m : specs())
    s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}

const model_spec& spec(const std::string& model) {
  for (const auto& m : specs())
    if (model == m.name)
      return m;
  throw mismatch_error("unknown split model '" + model + "' (use " + known_models() + ")");
}

// Output shapes of every layer, from the input of `shape`.
std::vector<std::vector<int64_t>> shapes(const model_spec& m, const model_shape& shape) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> s = shape.input.dims();
  for (const auto& l : m.layers) {
    if (l.conv) {
      int64_t h = s[1] + 2 * l.padding - l.kernel + 1;
      int64_t w = s[2] + 2 * l.padding - l.kernel + 1;
      if (l.pool) {
        h /= 2;
        w /= 2;
      }
      if (h < 1 || w < 1)
        throw mismatch_error("split model '" + std::string(m.name) + "' needs larger images "
                                    "than " + shape.input.to_string() + " (layer " + l.name +
                                    " would output nothing)");
      s = {l.out, h, w};
    } else {
      s = {l.out};
    }
    out.push_back(s);
  }
  return out;
}

// The model's layers for data of `shape`: the first convolution takes its
// channels, the first fully connected layer what the convolutions leave, the
// last layer outputs its classes.
model_spec spec(const std::string& model, const model_shape& shape) {
  model_spec m = spec(model);
  if (shape.input.flat)
    throw mismatch_error("split model '" + model + "' needs images, the data has " +
                                shape.input.to_string());
  if (shape.classes < 2)
    throw mismatch_error("split model '" + model + "' for " +
                                std::to_string(shape.classes) + " classes");
  m.layers.front().in = shape.input.channels;
  m.layers.back().out = shape.classes;
  auto s = shapes(m, shape);
  for (size_t i = 1; i < m.layers.size(); ++i)
    if (!m.layers[i].conv && m.layers[i - 1].conv) {
      int64_t flat = 1;
      for (auto d : s[i - 1])
        flat *= d;
      m.layers[i].in = flat;
    }
  return m;
}

void check_range(const model_spec& m, int64_t first, int64_t last) {
  const auto n = static_cast<int64_t>(m.layers.size());
  if (first < 0 || last >= n || first > last)
    throw mismatch_error("bad layer range " + std::to_string(first) + ".." +
                                std::to_string(last) + " of split model '" + m.name + "' (" +
                                std::to_string(n) + " layers, 0.." + std::to_string(n - 1) + ")");
}

} // namespace

struct stage_module::layer {
  layer_spec spec;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};

  torch::Tensor forward(torch::Tensor x) {
    if (spec.conv) {
      // conv2d_relu: torch's convolution and ReLU whenever a gradient is
      // needed, the fused kernels without (as LeNet-5 in model.cpp).
      x = spec.relu ? conv2d_relu(conv, x) : conv->forward(x);
      if (spec.pool)
        x = max_pool_2x2(x);
      return x;
    }
    if (x.dim() > 2)
      x = x.flatten(1);
    x = fc->forward(x);
    return spec.relu ? torch::relu(x) : x;
  }
};

std::vector<std::string> split_model_names() {
  std::vector<std::string> out;
  for (const auto& m : specs())
    out.emplace_back(m.name);
  return out;
}

int64_t layer_count(const std::string& model) {
  return static_cast<int64_t>(spec(model).layers.size());
}

std::vector<std::string> layer_names(const std::string& model) {
  std::vector<std::string> out;
  for (const auto& l : spec(model).layers)
    out.emplace_back(l.name);
  return out;
}

std::vector<int64_t> activation_shape(const std::string& model, int64_t layer,
                                      const model_shape& shape) {
  const auto m = spec(model, shape);
  const auto n = static_cast<int64_t>(m.layers.size());
  if (layer < -1 || layer >= n)
    throw mismatch_error("layer " + std::to_string(layer) + " is not in split model '" +
                                model + "' (-1 for the input, 0.." + std::to_string(n - 1) + ")");
  if (layer == -1)
    return shape.input.dims();
  return shapes(m, shape)[static_cast<size_t>(layer)];
}

stage_module::stage_module(std::string model, int64_t first_layer, int64_t last_layer,
                           const model_shape& shape)
    : model_(std::move(model)), first_(first_layer), last_(last_layer) {
  set_shape(shape);
  const auto m = spec(model_, shape);
  check_range(m, first_, last_);
  // Every layer of the model is built, in order, so that the parameters
  // drawn for first..last are those of the whole model; the others are
  // dropped.
  for (int64_t i = 0; i < static_cast<int64_t>(m.layers.size()); ++i) {
    const auto& s = m.layers[static_cast<size_t>(i)];
    auto l = std::make_shared<layer>();
    l->spec = s;
    if (s.conv)
      l->conv = torch::nn::Conv2d(torch::nn::Conv2dOptions(s.in, s.out, s.kernel).padding(s.padding));
    else
      l->fc = torch::nn::Linear(s.in, s.out);
    if (m.he_init) {
      torch::NoGradGuard no_grad;
      torch::nn::init::kaiming_normal_(s.conv ? l->conv->weight : l->fc->weight, 0, torch::kFanIn,
                                       torch::kReLU);
      (s.conv ? l->conv->bias : l->fc->bias).zero_();
    }
    if (i < first_ || i > last_)
      continue;
    if (s.conv)
      register_module(s.name, l->conv);
    else
      register_module(s.name, l->fc);
    layers_.push_back(std::move(l));
  }
}

torch::Tensor stage_module::forward(torch::Tensor x) {
  for (const auto& l : layers_)
    x = l->forward(std::move(x));
  return x;
}

std::string stage_module::script() const {
  std::string s = "def logits(self, x):\n";
  bool flat = false;
  for (const auto& l : layers_) {
    std::string e;
    if (l->spec.conv) {
      e = zoo::conv("x", l->spec.name, l->conv);
      if (l->spec.relu)
        e = "torch.relu(" + e + ")";
      if (l->spec.pool)
        e = zoo::max_pool_2x2(e);
    } else {
      if (!flat)
        s += "    x = x.flatten(1)\n";
      flat = true;
      e = zoo::linear("x", l->spec.name, l->fc);
      if (l->spec.relu)
        e = "torch.relu(" + e + ")";
    }
    s += "    x = " + e + "\n";
  }
  return s + "    return x\n";
}

bool stage_module::is_last() const { return last_ == layer_count(model_) - 1; }

std::vector<int64_t> stage_module::input_shape() const {
  return activation_shape(model_, first_ - 1, shape());
}

std::vector<int64_t> stage_module::output_shape() const {
  return activation_shape(model_, last_, shape());
}

std::shared_ptr<stage_module> make_stage(const std::string& model, int64_t first_layer,
                                         int64_t last_layer, uint64_t seed,
                                         const model_shape& shape) {
  check_range(spec(model, shape), first_layer, last_layer);
  // Initialisation draws from torch's global generator: seeding it and
  // building must not interleave with another thread doing the same here.
  static std::mutex init_mutex;
  std::lock_guard<std::mutex> lock(init_mutex);
  torch::manual_seed(seed);
  return std::make_shared<stage_module>(model, first_layer, last_layer, shape);
}

std::vector<std::pair<int64_t, int64_t>> stage_ranges(const std::string& model,
                                                      const std::vector<int64_t>& cuts) {
  const int64_t n = layer_count(model);
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t first = 0;
  for (int64_t c : cuts) {
    if (c < first || c > n - 2)
      throw mismatch_error("bad cut after layer " + std::to_string(c) + " of split model '" +
                                  model + "': cuts must increase and lie in 0.." +
                                  std::to_string(n - 2));
    out.emplace_back(first, c);
    first = c + 1;
  }
  out.emplace_back(first, n - 1);
  return out;
}

} // namespace eg::learning
