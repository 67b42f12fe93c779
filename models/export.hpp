#pragma once
// The averaged model for Python: a TorchScript file with the input shape,
// the normalisation and the class names built in, so that
//
//   model = torch.jit.load("model_scripted.pt")
//   scores = model(samples)                # [B, classes]
//   names = [model.classes[i] for i in scores.argmax(1)]
//   model.input_shape                      # [C, H, W] or [F]
//
// for images [B, C, H, W] (or [B, H, W] when C is 1): bytes 0..255 (e.g.
// torchvision's .data) or floats in [0, 1] (its ToTensor()); for features
// [B, F] as read from the data. docs/MODELS.md.

#include "data/dataset.hpp"
#include "models/model.hpp"

#include <string>

namespace torch::jit {
struct Module;
}

namespace eg::learning {

/// The module write_torchscript writes, in eval mode: its parameters are
/// copies of `m`'s under the same names; forward(samples) checks the shape
/// m was built for, normalises with `norm` as training did and applies m's
/// classifier::script() (a zoo model) or its scripted module (a
/// "torchscript:" model); attributes `classes` (the names by output) and
/// `input_shape`. Throws std::invalid_argument where `m` can be exported
/// neither way, or the class names are not one per output.
torch::jit::Module export_module(classifier& m, const data::normalisation& norm,
                                 const std::vector<std::string>& classes);

/// Writes export_module(...) to `path`; throws std::runtime_error naming the
/// path when it cannot be written.
void write_torchscript(classifier& m, const data::normalisation& norm,
                       const std::vector<std::string>& classes, const std::string& path);

} // namespace eg::learning
