#include "models/scripted.hpp"
#include "common/error.hpp"

#include "models/dataset.hpp"
#include "models/zoo.hpp"

#include <torch/torch.h>

#include <map>
#include <sstream>
#include <stdexcept>

namespace eg::learning {

namespace {

std::string sizes_of(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::string message(const c10::Error& e) { return e.what_without_backtrace(); }

} // namespace

scripted_classifier::scripted_classifier(const std::string& path, const model_shape& data_shape)
    : path_(path) {
  const std::string what = "torchscript model '" + path + "': ";
  if (path.empty())
    throw argument_error("torchscript model: no file after 'torchscript:'");
  try {
    module_ = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    throw mismatch_error(what + "cannot load it as TorchScript (save it with "
                                "torch.jit.script(model).save(PATH)): " + message(e));
  }
  if (!module_.find_method("forward"))
    throw argument_error(what + "it has no forward method");
  // Platforms gossip and average parameters only: buffers (BatchNorm's
  // running statistics) would stay each platform's own, and the averaged
  // model would be evaluated with the file's.
  std::string buffers;
  for (const auto& b : module_.named_buffers())
    buffers += (buffers.empty() ? "" : ", ") + b.name;
  if (!buffers.empty())
    throw mismatch_error(
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
    throw mismatch_error(what + "it has no parameters to train");

  // The check: a batch of two samples of the data's shape in eval mode,
  // then train mode again.
  std::vector<int64_t> dims{2};
  for (auto d : data_shape.input.dims())
    dims.push_back(d);
  const std::string batch = "a batch of samples " + sizes_of(torch::zeros(dims));
  const std::string scores_of = "class scores [2, " + std::to_string(data_shape.classes) + "]";
  torch::IValue out;
  {
    evaluation_scope scope(*this);
    try {
      out = module_.forward({torch::zeros(dims)});
    } catch (const c10::Error& e) {
      throw mismatch_error(what + "its forward fails on " + batch + ": " + message(e));
    } catch (const std::exception& e) {  // the interpreter's errors
      throw argument_error(what + "its forward fails on " + batch + ": " + e.what());
    }
  }
  if (!out.isTensor())
    throw argument_error(what + "its forward returns " + out.tagKind() + ", not " +
                                scores_of);
  const auto scores = out.toTensor();
  if (scores.dim() != 2 || scores.size(0) != 2 || scores.size(1) != data_shape.classes)
    throw mismatch_error(what + "its forward maps " + batch + " to " + sizes_of(scores) +
                                ", not to " + scores_of);
  if (!scores.is_floating_point())
    throw argument_error(what + "its forward returns " +
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

std::shared_ptr<classifier> scripted(const std::string& path, const model_shape& shape) {
  return std::make_shared<scripted_classifier>(path, shape);
}

} // namespace zoo

} // namespace eg::learning
