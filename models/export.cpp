#include "models/export.hpp"
#include "common/error.hpp"

#include "models/dataset.hpp"
#include "models/scripted.hpp"

#include <torch/script.h>
#include <torch/torch.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace eg::learning {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string numbers(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + number(v[i]);
  return s + "]";
}

/// forward(samples): the shape checked, training's normalisation, then
/// `logits`.
std::string forward_source(const std::string& logits, const data::sample_shape& shape,
                           const data::normalisation& norm) {
  std::string s = "def forward(self, samples):\n    x = samples\n";
  if (shape.flat) {
    const auto f = std::to_string(shape.channels);
    s += "    assert x.dim() == 2 and x.size(1) == " + f + ", \"expected features [B, " + f +
         "]\"\n    x = x.float()\n";
  } else {
    const auto c = std::to_string(shape.channels), h = std::to_string(shape.height),
               w = std::to_string(shape.width);
    if (shape.channels == 1)
      s += "    if x.dim() == 3:\n        x = x.unsqueeze(1)\n";
    s += "    assert x.dim() == 4 and x.size(1) == " + c + " and x.size(2) == " + h +
         " and x.size(3) == " + w + ", \"expected images [B, " + c + ", " + h + ", " + w + "]" +
         (shape.channels == 1 ? " or [B, " + h + ", " + w + "]" : std::string()) + "\"\n" +
         "    if not x.is_floating_point():\n        x = x.div(255)\n";
  }
  if (!norm.empty()) {
    const std::string view = shape.flat ? "[1, -1]" : "[1, -1, 1, 1]";
    s += "    x = x.sub(torch.tensor(" + numbers(norm.mean) + ", dtype=x.dtype).view(" + view +
         ")).div(torch.tensor(" + numbers(norm.std) + ", dtype=x.dtype).view(" + view + "))\n";
  }
  return s + "    return " + logits + "(x)\n";
}

torch::jit::Module new_module(const std::string& name,
                              const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  torch::jit::Module m(c10::QualifiedName("__torch__.edgegossip." + name), cu,
                       /*shouldMangle=*/true);
  m.register_attribute("training", c10::BoolType::get(), false);
  return m;
}

std::string class_name(const classifier& m) {
  std::string name;
  for (char c : m.model_name())
    name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name.empty() ? "model" : name;
}

} // namespace

torch::jit::Module export_module(classifier& m, const data::normalisation& norm,
                                 const std::vector<std::string>& classes) {
  const auto& shape = m.shape();
  if (static_cast<int64_t>(classes.size()) != shape.classes)
    throw mismatch_error("model '" + m.model_name() + "' has " +
                                std::to_string(shape.classes) + " outputs, the export was given " +
                                std::to_string(classes.size()) + " class names");
  if (!norm.empty() && static_cast<int64_t>(norm.mean.size()) != shape.input.channels)
    throw mismatch_error("model '" + m.model_name() + "': a normalisation of " +
                                std::to_string(norm.mean.size()) + " channels for samples of " +
                                shape.input.to_string());
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  auto root = new_module(class_name(m), cu);
  {
    c10::List<std::string> names;
    for (auto& c : classes)
      names.push_back(c);
    root.register_attribute("classes", c10::ListType::create(c10::StringType::get()), names);
    c10::List<int64_t> dims;
    for (auto d : shape.input.dims())
      dims.push_back(d);
    root.register_attribute("input_shape", c10::ListType::create(c10::IntType::get()), dims);
  }
  torch::NoGradGuard no_grad;
  const auto copy = [](const torch::Tensor& t) {
    return t.detach().to(torch::kCPU).clone().requires_grad_(t.requires_grad());
  };
  if (const auto* scripted = dynamic_cast<const scripted_classifier*>(&m)) {
    auto inner = scripted->module().deepcopy();
    // deepcopy() shares nothing; the weights may live on a GPU.
    for (const auto& p : inner.named_parameters())
      p.value.set_data(copy(p.value));
    root.register_module("model", inner);
    root.define(forward_source("self.model.forward", shape.input, norm));
  } else {
    const std::string script = m.script();
    if (script.empty())
      throw mismatch_error("model '" + m.model_name() +
                                  "' cannot be exported: it has no TorchScript form");
    // The parameters under their dotted names: a module for each prefix.
    std::map<std::string, torch::jit::Module> modules;
    std::vector<std::pair<std::string, std::string>> links;  // parent path, child name
    for (const auto& p : m.named_parameters()) {
      std::string prefix, rest = p.key();
      torch::jit::Module owner = root;
      for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
        const std::string part = rest.substr(0, dot);
        rest = rest.substr(dot + 1);
        const std::string path = prefix.empty() ? part : prefix + "." + part;
        auto found = modules.find(path);
        if (found == modules.end()) {
          found = modules.emplace(path, new_module(class_name(m) + "." + path, cu)).first;
          owner.register_module(part, found->second);
        }
        owner = found->second;
        prefix = path;
      }
      owner.register_parameter(rest, copy(p.value()), /*is_buffer=*/false);
    }
    for (const auto& b : m.named_buffers())
      throw mismatch_error("model '" + m.model_name() + "' cannot be exported: buffer " +
                                  b.key() + " has no TorchScript form");
    try {
      root.define(script);
    } catch (const std::exception& e) {
      throw std::logic_error("model '" + m.model_name() + "': its TorchScript does not compile: " +
                             e.what());
    }
    root.define(forward_source("self.logits", shape.input, norm));
  }
  root.eval();
  return root;
}

void write_torchscript(classifier& m, const data::normalisation& norm,
                       const std::vector<std::string>& classes, const std::string& path) {
  auto module = export_module(m, norm, classes);
  try {
    module.save(path);
  } catch (const c10::Error& e) {
    throw storage_failure("cannot write the TorchScript model to '" + path +
                             "': " + e.what_without_backtrace());
  }
}

} // namespace eg::learning
