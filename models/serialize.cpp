#include "models/serialize.hpp"
#include "common/error.hpp"

#include <torch/torch.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace eg::learning {

std::vector<std::string> parameter_names(const torch::nn::Module& m) {
  return m.named_parameters().keys();
}

std::vector<torch::Tensor> parameters(torch::nn::Module& m) {
  return m.named_parameters().values();
}

std::optional<size_t> first_non_finite(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!std::isfinite(tensors[i].sum(torch::kDouble).item<double>()))
      return i;
  return std::nullopt;
}

std::string save_model(torch::nn::Module& m) {
  torch::serialize::OutputArchive archive;
  m.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_model(torch::nn::Module& m, const std::string& bytes) {
  try {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in);
    m.load(archive);
  } catch (const c10::Error& e) {
    throw failure<errc::mismatch>(std::string("cannot load the model: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw failure<errc::mismatch>(std::string("cannot load the model: ") + e.what());
  }
}

std::string save_optimizer(torch::optim::Optimizer& o) {
  torch::serialize::OutputArchive archive;
  o.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_optimizer(torch::optim::Optimizer& o, const std::string& bytes) {
  try {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in);
    o.load(archive);
  } catch (const c10::Error& e) {
    throw failure<errc::mismatch>(std::string("cannot load the optimizer state: ") +
                             e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw failure<errc::mismatch>(std::string("cannot load the optimizer state: ") + e.what());
  }
}

void write_state_dict(torch::nn::Module& m, const std::string& path) {
  // Detached like Python's state_dict(), so torch.load gives plain tensors.
  c10::Dict<std::string, torch::Tensor> state;
  for (const auto& p : m.named_parameters())
    state.insert(p.key(), p.value().detach());
  for (const auto& b : m.named_buffers())
    state.insert(b.key(), b.value().detach());
  const std::vector<char> bytes = torch::pickle_save(state);

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw storage_failure("cannot write the model to '" + path + "': " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    throw storage_failure("cannot write the model to '" + path + "': write failed");
}

} // namespace eg::learning
