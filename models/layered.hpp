#pragma once
// The layered models: each an ordered list of layers (a convolution or a
// fully connected map with its ReLU and pooling), so that any contiguous
// range of them is a model of its own (a stage of a split model,
// algorithms/split/). "lenet5" is models/model.cpp's LeNet-5 layer for
// layer; "conv8" and "vgg11" (deeper, VGG's layers, narrow) are the split
// models' own (docs/SPLIT.md).

#include "models/model.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace eg::learning {

/// The models that can be split: "lenet5", "conv8", "vgg11".
std::vector<std::string> split_model_names();
/// Number of layers of `model`; throws std::invalid_argument for an unknown one.
int64_t layer_count(const std::string& model);
/// The layers' names, in order ("conv1", ..., "fc3").
std::vector<std::string> layer_names(const std::string& model);
/// The shape, without the batch dimension, of what layer `layer` (0-based)
/// outputs for data of `shape`; layer -1 is the model's input (e.g.
/// {1, 28, 28}). The last layer outputs {classes} (the logits). Throws
/// std::invalid_argument out of range, or for data the model cannot take.
std::vector<int64_t> activation_shape(const std::string& model, int64_t layer,
                                      const model_shape& shape);

/// Layers first..last (inclusive, 0-based) of a model, each with its
/// activation and pooling. Parameters are named as the whole model's
/// ("conv1.weight", ...): a stage of all of lenet5's layers has the
/// parameter names, the initial values and the outputs of
/// make_classifier("lenet5", seed).
class stage_module : public classifier {
public:
  /// Use make_stage.
  stage_module(std::string model, int64_t first_layer, int64_t last_layer,
               const model_shape& shape);

  /// Runs the stage's layers on x [B, input_shape()...].
  torch::Tensor forward(torch::Tensor x) override;
  /// The stage's layers as TorchScript (classifier::script()).
  std::string script() const override;

  const std::string& model_name() const { return model_; }
  int64_t first_layer() const { return first_; }
  int64_t last_layer() const { return last_; }
  bool is_first() const { return first_ == 0; }
  bool is_last() const;
  /// Shape of the input / the output without the batch dimension.
  std::vector<int64_t> input_shape() const;
  std::vector<int64_t> output_shape() const;

private:
  struct layer;
  std::string model_;
  int64_t first_;
  int64_t last_;
  std::vector<std::shared_ptr<layer>> layers_;
};

/// Layers first_layer..last_layer (inclusive, 0-based) of `model` for data
/// of `shape`, with the
/// initial parameters those layers have in the whole model built from
/// `seed` (the whole model is initialised, then cut), so a split model
/// starts identical to the whole one. Throws std::invalid_argument for an
/// unknown model or a bad layer range.
std::shared_ptr<stage_module> make_stage(const std::string& model, int64_t first_layer,
                                         int64_t last_layer, uint64_t seed,
                                         const model_shape& shape);

/// Layer ranges {first, last} of the stages when the model is cut after each
/// layer of `cuts` (strictly increasing, each in [0, layer_count - 2]);
/// {} gives the whole model as one stage.
std::vector<std::pair<int64_t, int64_t>> stage_ranges(const std::string& model,
                                                      const std::vector<int64_t>& cuts);

} // namespace eg::learning
