#include "models/model.hpp"
#include "common/error.hpp"

#include "models/conv.hpp"
#include "models/pooling.hpp"
#include "models/layered.hpp"
#include "models/zoo.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

namespace eg::learning {

namespace {

/// Images of at least `min_side` pixels a side, for `model`; throws
/// std::invalid_argument naming the model and the shape otherwise.
void need_images(const std::string& model, const model_shape& s, int64_t min_side) {
  if (s.input.flat)
    throw mismatch_error("model '" + model + "' needs images, the data has " +
                                s.input.to_string() + " (use mlp or logreg for features)");
  if (s.input.height < min_side || s.input.width < min_side)
    throw mismatch_error("model '" + model + "' needs images of at least " +
                                std::to_string(min_side) + "x" + std::to_string(min_side) +
                                " pixels, the data's are " + s.input.to_string());
}

// LeNet-5 (the first convolution pads to keep the size: 28 -> 14 -> 5 after
// the second convolution and pooling on 28 x 28; 32 -> 16 -> 6 on 32 x 32).
class lenet5 : public classifier {
public:
  explicit lenet5(const model_shape& s)
      : conv1(torch::nn::Conv2dOptions(s.input.channels, 6, 5).padding(2)),
        conv2(torch::nn::Conv2dOptions(6, 16, 5)),
        fc1(16 * ((s.input.height / 2 - 4) / 2) * ((s.input.width / 2 - 4) / 2), 120),
        fc2(120, 84),
        fc3(84, s.classes) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }

  // Without gradients (evaluation, ranking) the convolutions and their
  // ReLUs run as the fused kernels of conv.hpp; training runs torch's.
  torch::Tensor forward(torch::Tensor x) override {
    x = max_pool_2x2(conv2d_relu(conv1, x));
    x = max_pool_2x2(conv2d_relu(conv2, x));
    x = x.flatten(1);
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }

  std::string script() const override {
    return "def logits(self, x):\n"
           "    x = " + zoo::max_pool_2x2("torch.relu(" + zoo::conv("x", "conv1", conv1) + ")") + "\n"
           "    x = " + zoo::max_pool_2x2("torch.relu(" + zoo::conv("x", "conv2", conv2) + ")") + "\n"
           "    x = x.flatten(1)\n"
           "    x = torch.relu(" + zoo::linear("x", "fc1", fc1) + ")\n"
           "    x = torch.relu(" + zoo::linear("x", "fc2", fc2) + ")\n"
           "    return " + zoo::linear("x", "fc3", fc3) + "\n";
  }

private:
  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
  torch::nn::Linear fc3;
};

// Multinomial logistic regression on the raw pixels or features.
class logreg : public classifier {
public:
  explicit logreg(const model_shape& s) : fc(s.input.numel(), s.classes) {
    register_module("fc", fc);
  }

  torch::Tensor forward(torch::Tensor x) override { return fc->forward(x.flatten(1)); }

  std::string script() const override {
    return "def logits(self, x):\n    return " + zoo::linear("x.flatten(1)", "fc", fc) + "\n";
  }

private:
  torch::nn::Linear fc;
};

// A multilayer perceptron with two hidden layers of 128 and 64 (ReLU), for
// flat features (a CSV of sensor readings) or flattened images.
class mlp : public classifier {
public:
  explicit mlp(const model_shape& s)
      : fc1(s.input.numel(), 128), fc2(128, 64), fc3(64, s.classes) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(fc1->forward(x.flatten(1)));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }

  std::string script() const override {
    return "def logits(self, x):\n"
           "    x = torch.relu(" + zoo::linear("x.flatten(1)", "fc1", fc1) + ")\n"
           "    x = torch.relu(" + zoo::linear("x", "fc2", fc2) + ")\n"
           "    return " + zoo::linear("x", "fc3", fc3) + "\n";
  }

private:
  torch::nn::Linear fc1, fc2, fc3;
};

} // namespace

std::string model_shape::to_string() const {
  return input.to_string() + " -> " + std::to_string(classes) + " classes";
}

bool operator==(const model_shape& a, const model_shape& b) {
  return a.input == b.input && a.classes == b.classes;
}

model_shape shape_of(const data::dataset& d) { return {d.shape, d.num_classes()}; }

config::registry<model_builder>& model_builders() {
  static config::registry<model_builder> r{"model"};
  return r;
}

model_registration::model_registration(const std::string& name, std::string summary,
                                       model_builder builder) {
  if (!builder.build) throw std::logic_error("model '" + name + "' registered without a builder");
  config::models().add(name, std::move(summary));
  model_builders().add(name, std::move(builder));
}

std::vector<std::string> zoo_models() { return model_builders().names(); }

std::shared_ptr<classifier> make_classifier(const std::string& name, uint64_t seed,
                                            const model_shape& shape) {
  static const std::string scripted_prefix = "torchscript:";
  if (shape.classes < 2)
    throw mismatch_error("model '" + name + "' for " + std::to_string(shape.classes) +
                                " classes: a classifier needs at least 2");
  if (shape.input.numel() <= 0)
    throw mismatch_error("model '" + name + "' for samples of no values");
  std::shared_ptr<classifier> model;
  if (name.compare(0, scripted_prefix.size(), scripted_prefix) == 0) {
    model = zoo::scripted(name.substr(scripted_prefix.size()), shape);
  } else {
    const auto* builder = model_builders().find(name);
    if (!builder)
      throw mismatch_error("unknown model '" + name + "' (use " + model_builders().known() +
                                  " or torchscript:PATH)");
    if (builder->min_side > 0) need_images(name, shape, builder->min_side);
    if (builder->seeds_itself) {
      model = builder->build(shape, seed);
    } else {
      // Initialisation draws from torch's global generator: seeding it and
      // building must not interleave with another thread doing the same.
      static std::mutex init_mutex;
      std::lock_guard<std::mutex> lock(init_mutex);
      torch::manual_seed(seed);
      model = builder->build(shape, seed);
    }
  }
  model->name_ = name;
  model->shape_ = shape;
  return model;
}

namespace {

const model_registration lenet5_model{
  "lenet5", "LeNet-5: two convolutions, three fully connected layers (images of 12+ pixels)",
  zoo::built_as<lenet5>(12)};
const model_registration logreg_model{
  "logreg", "multinomial logistic regression on the raw values (any samples)",
  zoo::built_as<logreg>(0)};
const model_registration mlp_model{
  "mlp", "two hidden layers of 128 and 64 units (any samples)", zoo::built_as<mlp>(0)};
// The split models' conv8 (models/layered.hpp), whole: its layers in one
// stage, He-initialised from the seed.
const model_registration conv8_model{
  "conv8", "five convolutions and three fully connected layers, the split models' (images of 8+)",
  {8,
   [](const model_shape& s, uint64_t seed) -> std::shared_ptr<classifier> {
     return make_stage("conv8", 0, layer_count("conv8") - 1, seed, s);
   },
   true}};
// The split models' vgg11, whole.
const model_registration vgg11_model{
  "vgg11", "eight 3x3 convolutions and three fully connected layers, narrow (images of 16+)",
  {16,
   [](const model_shape& s, uint64_t seed) -> std::shared_ptr<classifier> {
     return make_stage("vgg11", 0, layer_count("vgg11") - 1, seed, s);
   },
   true}};

} // namespace

int64_t parameter_count(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters())
    n += p.numel();
  return n;
}

} // namespace eg::learning
