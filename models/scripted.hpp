#pragma once
// A model scripted in Python (`torch.jit.script(model).save(PATH)`), trained
// as `train.model = "torchscript:PATH"`. Included by models/*.cpp and tests
// only (it brings in TorchScript's headers).

#include "models/model.hpp"

#include <torch/script.h>

#include <string>

namespace eg::learning {

/// The scripted module's parameters are this module's (the same tensors,
/// under the same dotted names, in the same order), so training, gossip,
/// checkpoints and the state dict see them as any other model's; forward()
/// calls the module's forward. The file's weights are the initial model
/// (every platform loads the same file).
class scripted_classifier : public classifier {
public:
  /// Loads `path` and checks that its forward maps a batch of two samples of
  /// `data_shape` to class scores [2, classes]; throws std::invalid_argument
  /// naming the file and the problem (no such file, not TorchScript, no
  /// parameters, buffers, a forward that fails or gives another shape).
  scripted_classifier(const std::string& path, const model_shape& data_shape);

  torch::Tensor forward(torch::Tensor x) override;
  void train(bool on = true) override;

  /// The loaded module (its parameters are this model's).
  const torch::jit::Module& module() const { return module_; }
  const std::string& path() const { return path_; }

private:
  std::string path_;
  torch::jit::Module module_;
};

} // namespace eg::learning
