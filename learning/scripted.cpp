#include "learning/scripted.hpp"

#include "learning/dataset.hpp"
#include "learning/zoo.hpp"

#include <torch/torch.h>

#include <map>
#include <sstream>
#include <stdexcept>

namespace eg::learning {

namespace {

std::string shape(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::string message(const c10::Error& e) { return e.what_without_backtrace(); }

} // namespace

scripted_classifier::scripted_classifier(const std::string& path) : path_(path) {
  const std::string what = "torchscript model '" + path + "': ";
  if (path.empty())
    throw std::invalid_argument("torchscript model: no file after 'torchscript:'");
  try {
    module_ = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    throw std::invalid_argument(what + "cannot load it as TorchScript (save it with "
                                "torch.jit.script(model).save(PATH)): " + message(e));
  }
  if (!module_.find_method("forward"))
    throw std::invalid_argument(what + "it has no forward method");
  // Platforms gossip and average parameters only: buffers (BatchNorm's
  // running statistics) would stay each platform's own, and the averaged
  // model would be evaluated with the file's.
  std::string buffers;
  for (const auto& b : module_.named_buffers())
    buffers += (buffers.empty() ? "" : ", ") + b.name;
  if (!buffers.empty())
    throw std::invalid_argument(
      what + "it has buffers (" + buffers + "), which gossip would not average: use a model "
      "without them (e.g. GroupNorm or LayerNorm instead of BatchNorm)");

  // The parameters, under their dotted names: each scripted submodule is a
  // plain module here holding its own parameters.
  std::map<std::string, std::shared_ptr<torch::nn::Module>> holders;
  int64_t count = 0;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    torch::nn::Module* owner = this;
    std::string prefix;
    std::string rest = p.name;
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      const std::string part = rest.substr(0, dot);
      rest = rest.substr(dot + 1);
      prefix += (prefix.empty() ? "" : ".") + part;
      auto& holder = holders[prefix];
      if (!holder)
        holder = owner->register_module(part, std::make_shared<torch::nn::Module>());
      owner = holder.get();
    }
    owner->register_parameter(rest, p.value, /*requires_grad=*/true);
    ++count;
  }
  if (count == 0)
    throw std::invalid_argument(what + "it has no parameters to train");

  // The check: a batch of two images in eval mode, then train mode again.
  torch::IValue out;
  {
    evaluation_scope scope(*this);
    try {
      out = module_.forward({torch::zeros({2, 1, 28, 28})});
    } catch (const c10::Error& e) {
      throw std::invalid_argument(what + "its forward fails on a batch of images [2, 1, 28, 28]: " +
                                  message(e));
    } catch (const std::exception& e) {  // the interpreter's errors
      throw std::invalid_argument(what + "its forward fails on a batch of images [2, 1, 28, 28]: " +
                                  e.what());
    }
  }
  if (!out.isTensor())
    throw std::invalid_argument(what + "its forward returns " + out.tagKind() +
                                ", not a tensor of class scores [B, 10]");
  const auto scores = out.toTensor();
  if (scores.dim() != 2 || scores.size(0) != 2 || scores.size(1) != num_classes)
    throw std::invalid_argument(what + "its forward maps a batch of images [2, 1, 28, 28] to " +
                                shape(scores) + ", not to class scores [2, 10]");
  if (!scores.is_floating_point())
    throw std::invalid_argument(what + "its forward returns " +
                                std::string(c10::toString(scores.scalar_type())) +
                                " scores, not floating-point ones");
}

torch::Tensor scripted_classifier::forward(torch::Tensor x) {
  return module_.forward({std::move(x)}).toTensor();
}

void scripted_classifier::train(bool on) {
  module_.train(on);
  classifier::train(on);
}

namespace zoo {

std::shared_ptr<classifier> scripted(const std::string& path) {
  return std::make_shared<scripted_classifier>(path);
}

} // namespace zoo

} // namespace eg::learning
