#include "learning/model.hpp"

#include "learning/conv.hpp"
#include "learning/pooling.hpp"
#include "learning/zoo.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

namespace eg::learning {

namespace {

// LeNet-5 for 28x28 inputs (the first convolution pads to keep 28x28).
class lenet5 : public classifier {
public:
  lenet5()
      : conv1(torch::nn::Conv2dOptions(1, 6, 5).padding(2)),
        conv2(torch::nn::Conv2dOptions(6, 16, 5)),
        fc1(16 * 5 * 5, 120),
        fc2(120, 84),
        fc3(84, 10) {
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

// Multinomial logistic regression on the raw pixels.
class logreg : public classifier {
public:
  logreg() : fc(28 * 28, 10) { register_module("fc", fc); }

  torch::Tensor forward(torch::Tensor x) override { return fc->forward(x.flatten(1)); }

  std::string script() const override {
    return "def logits(self, x):\n    return " + zoo::linear("x.flatten(1)", "fc", fc) + "\n";
  }

private:
  torch::nn::Linear fc;
};

} // namespace

const std::vector<std::string>& zoo_models() {
  static const std::vector<std::string> names{"lenet5", "logreg", "alexnet", "squeezenet",
                                              "mobilenetv2"};
  return names;
}

std::shared_ptr<classifier> make_classifier(const std::string& name, uint64_t seed) {
  static const std::string scripted_prefix = "torchscript:";
  std::shared_ptr<classifier> model;
  if (name.compare(0, scripted_prefix.size(), scripted_prefix) == 0) {
    model = zoo::scripted(name.substr(scripted_prefix.size()));
  } else {
    const auto& zoo = zoo_models();
    if (std::find(zoo.begin(), zoo.end(), name) == zoo.end())
      throw std::invalid_argument("unknown model '" + name +
                                  "' (use lenet5, logreg, alexnet, squeezenet, mobilenetv2 or "
                                  "torchscript:PATH)");
    // Initialisation draws from torch's global generator: seeding it and
    // building must not interleave with another thread doing the same.
    static std::mutex init_mutex;
    std::lock_guard<std::mutex> lock(init_mutex);
    torch::manual_seed(seed);
    if (name == "lenet5")
      model = std::make_shared<lenet5>();
    else if (name == "logreg")
      model = std::make_shared<logreg>();
    else if (name == "alexnet")
      model = zoo::alexnet();
    else if (name == "squeezenet")
      model = zoo::squeezenet();
    else
      model = zoo::mobilenetv2();
  }
  model->name_ = name;
  return model;
}

int64_t parameter_count(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters())
    n += p.numel();
  return n;
}

} // namespace eg::learning
