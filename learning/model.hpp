#pragma once
// The models: a classifier interface and LeNet-5 (about 60k parameters) in
// the pytorch/examples style, plus logistic regression for scale tests.

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <memory>
#include <string>

namespace eg::learning {

/// A model mapping a batch of images [B, 1, 28, 28] to logits [B, 10].
class classifier : public torch::nn::Module {
public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

/// Builds "lenet5" or "logreg"; throws std::invalid_argument otherwise.
/// Parameters are initialised from `seed`, so equal seeds give equal models.
std::shared_ptr<classifier> make_classifier(const std::string& name, uint64_t seed);

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
