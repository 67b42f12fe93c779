#include "train/loans.hpp"

#include <torch/torch.h>

namespace eg::learning {

namespace {

struct loan {
  std::vector<torch::Tensor> storage;  // detached: the lent storage, whatever the params do
  std::shared_ptr<std::atomic<int64_t>> outstanding;
  ~loan() { outstanding->fetch_sub(1, std::memory_order_release); }
};

} // namespace

std::shared_ptr<const void> parameter_loans::lend(const std::vector<torch::Tensor>& params) {
  auto l = std::make_shared<loan>();
  l->storage.reserve(params.size());
  for (const auto& p : params)
    l->storage.push_back(p.detach());
  outstanding_->fetch_add(1, std::memory_order_relaxed);
  l->outstanding = outstanding_;
  ++lent_;
  return l;
}

bool parameter_loans::before_write(const std::vector<torch::Tensor>& params) {
  if (outstanding_->load(std::memory_order_acquire) == 0)
    return false;
  torch::NoGradGuard no_grad;
  for (const auto& p : params)
    p.set_data(p.detach().clone());
  // Tokens still held count down a counter nobody reads any more.
  outstanding_ = std::make_shared<std::atomic<int64_t>>(0);
  ++copies_;
  return true;
}

} // namespace eg::learning
