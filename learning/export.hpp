#pragma once
// The averaged model for Python: a TorchScript file with the input
// normalisation built in, so that
//
//   model = torch.jit.load("model_scripted.pt")
//   scores = model(images)     # [B, 10]
//
// for images [B, 1, 28, 28] or [B, 28, 28]: bytes 0..255 (torchvision's
// FashionMNIST .data) or floats in [0, 1] (its ToTensor()). docs/MODELS.md.

#include "learning/model.hpp"

#include <string>

namespace torch::jit {
struct Module;
}

namespace eg::learning {

/// The module write_torchscript writes, in eval mode: its parameters are
/// copies of `m`'s under the same names; forward(images) normalises as the
/// data set loader does and applies m's classifier::script() (a zoo model)
/// or its scripted module (a "torchscript:" model). Throws
/// std::invalid_argument where `m` can be exported neither way.
torch::jit::Module export_module(classifier& m);

/// Writes export_module(m) to `path`; throws std::runtime_error naming the
/// path when it cannot be written.
void write_torchscript(classifier& m, const std::string& path);

} // namespace eg::learning
