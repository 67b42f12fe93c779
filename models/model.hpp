#pragma once
// The models: a classifier interface and LeNet-5 (about 60k parameters on
// 28 x 28 images) in the pytorch/examples style, logistic regression and a
// small MLP (for flat features too), the zoo (AlexNet, SqueezeNet,
// MobileNetV2 in their CIFAR adaptations; models/zoo.cpp) and models
// scripted in Python ("torchscript:PATH"; models/scripted.cpp). Each is
// built for the data's sample shape and class count (model_shape), which
// only the data knows. docs/MODELS.md describes them.

#include "config/registry.hpp"
#include "data/dataset.hpp"
#include "models/model_shape.hpp"

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace eg::learning {

/// A model mapping a batch of samples [B, shape.input.dims()...] to logits
/// [B, shape.classes].
class classifier : public torch::nn::Module {
public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;

  /// The model's forward pass as TorchScript source: one method
  /// `def logits(self, x):` over the parameters by their names
  /// (self.conv1.weight for "conv1.weight"), giving what forward() gives in
  /// eval mode. Empty where the model is exported otherwise (a model scripted
  /// in Python). models/export.hpp builds the exported module from it.
  virtual std::string script() const { return {}; }

  /// The name make_classifier built it by ("lenet5", "torchscript:PATH", ...).
  const std::string& model_name() const { return name_; }
  /// The shape it was built for.
  const model_shape& shape() const { return shape_; }

protected:
  /// For models built otherwise than by make_classifier (a split model's stage).
  void set_shape(const model_shape& s) { shape_ = s; }

private:
  friend std::shared_ptr<classifier> make_classifier(const std::string& name, uint64_t seed,
                                                     const model_shape& shape);
  std::string name_;
  model_shape shape_;
};

/// How a model of the zoo is built.
struct model_builder {
  /// The least side of the images it takes (its poolings); 0: any samples,
  /// flat features too.
  int64_t min_side = 0;
  /// Builds it for a shape. make_classifier seeds torch's generator with the
  /// seed first (under a lock), unless `seeds_itself`: then the builder
  /// draws from the seed it is given, and must not touch the global one.
  std::function<std::shared_ptr<classifier>(const model_shape&, uint64_t seed)> build;
  bool seeds_itself = false;
};

/// The zoo's models, by name (config::models() holds their summaries).
config::registry<model_builder>& model_builders();

/// Registers a model: a static object of this type beside its code
/// (tests/unit/test_registry.cpp adds one so).
struct model_registration {
  model_registration(const std::string& name, std::string summary, model_builder builder);
};

/// The models of the zoo, in alphabetical order: alexnet, conv8 (the split
/// models' five convolutions and three fully connected layers, whole),
/// lenet5, logreg, mlp, mobilenetv2, squeezenet, and any other registered.
std::vector<std::string> zoo_models();

/// Builds a model of zoo_models() for `shape`, or "torchscript:PATH" (a model
/// scripted in Python, checked with one forward pass of a batch of that
/// shape); throws std::invalid_argument naming the problem otherwise (a model
/// for images given flat features, images too small for its poolings). Zoo
/// models' parameters are initialised from `seed`, so equal seeds give equal
/// models; a scripted model starts from the weights in its file.
std::shared_ptr<classifier> make_classifier(const std::string& name, uint64_t seed,
                                            const model_shape& shape);

/// An evaluation scope: no gradients and eval mode until it ends; then the
/// module's previous mode comes back, even when forward threw.
class evaluation_scope {
public:
  explicit evaluation_scope(torch::nn::Module& m) : module_(m), was_training_(m.is_training()) {
    module_.eval();
  }
  ~evaluation_scope() { module_.train(was_training_); }
  evaluation_scope(const evaluation_scope&) = delete;
  evaluation_scope& operator=(const evaluation_scope&) = delete;

private:
  torch::nn::Module& module_;
  bool was_training_;
  torch::NoGradGuard no_grad_;
};

/// Number of scalar parameters of `m`.
int64_t parameter_count(const torch::nn::Module& m);

} // namespace eg::learning
