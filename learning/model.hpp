#pragma once
// The models: a classifier interface and LeNet-5 (about 60k parameters) in
// the pytorch/examples style, plus logistic regression for scale tests.

#include <torch/nn/module.h>
#include <torch/types.h>

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

/// Number of scalar parameters of `m`.
int64_t parameter_count(const torch::nn::Module& m);

} // namespace eg::learning
