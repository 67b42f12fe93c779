#include "algorithms/edgegossip/ranking.hpp"
#include "common/error.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

namespace eg::learning {

std::vector<float> aggregated_losses(classifier& model, const aggregated_points& a) {
  const int64_t m = a.points.defined() ? a.points.size(0) : 0;
  if (m == 0)
    return {};
  if (!a.labels.defined() || a.labels.size(0) != m)
    throw argument_error("aggregated_losses: " + std::to_string(m) +
                                " points but a different number of labels");

  evaluation_scope scope(model);

  // Small batches: LeNet-5's activations for 1,000 points leave the caches
  // and cost 3-6x more per point than batches of 128 (bench aggregation).
  constexpr int64_t batch = 128;
  std::vector<float> losses;
  losses.reserve(static_cast<size_t>(m));
  for (int64_t begin = 0; begin < m; begin += batch) {
    const int64_t len = std::min(batch, m - begin);
    auto logits = model.forward(a.points.narrow(0, begin, len));
    auto e = torch::nn::functional::cross_entropy(
                 logits, a.labels.narrow(0, begin, len),
                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                 .to(torch::kFloat32)
                 .contiguous();
    losses.insert(losses.end(), e.data_ptr<float>(), e.data_ptr<float>() + len);
  }
  return losses;
}

std::vector<int64_t> rank_by_loss(const std::vector<float>& losses) {
  std::vector<int64_t> order(losses.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  // NaN losses (a diverged point) go last instead of breaking the ordering.
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
    const float a = losses[static_cast<size_t>(i)];
    const float b = losses[static_cast<size_t>(j)];
    if (std::isnan(a))
      return false;
    return std::isnan(b) || a > b;
  });
  return order;
}

epoch_plan ranked_plan(const std::vector<std::vector<int64_t>>& members,
                       const std::vector<int64_t>& ranking, int64_t batch, int64_t budget) {
  if (batch <= 0)
    throw argument_error("ranked_plan: batch size must be positive");
  epoch_plan plan;
  if (budget <= 0)
    return plan;

  std::vector<int64_t> current;
  int64_t planned = 0;
  for (int64_t j : ranking) {
    if (j < 0 || j >= static_cast<int64_t>(members.size()))
      throw argument_error("ranked_plan: ranking names aggregated point " +
                                  std::to_string(j) + " of " + std::to_string(members.size()));
    const auto& subset = members[static_cast<size_t>(j)];
    current.insert(current.end(), subset.begin(), subset.end());
    planned += static_cast<int64_t>(subset.size());
    if (static_cast<int64_t>(current.size()) >= batch) {
      plan.batches.push_back(std::move(current));
      current.clear();
    }
    if (planned >= budget)
      break;
  }
  if (!current.empty())
    plan.batches.push_back(std::move(current));
  return plan;
}

epoch_plan accuracy_aware_plan(const std::vector<std::vector<int64_t>>& members,
                               const std::vector<int64_t>& classes,
                               const std::vector<int64_t>& ranking, int64_t batch,
                               int64_t budget, std::mt19937_64& rng) {
  if (batch <= 0)
    throw argument_error("accuracy_aware_plan: batch size must be positive");
  if (classes.size() != members.size())
    throw mismatch_error("accuracy_aware_plan: " + std::to_string(classes.size()) +
                                " classes for " + std::to_string(members.size()) + " subsets");
  // Each class's share of the budget follows its share of the points.
  std::map<int64_t, double> points_of;
  double total = 0;
  for (size_t j = 0; j < members.size(); ++j) {
    points_of[classes[j]] += static_cast<double>(members[j].size());
    total += static_cast<double>(members[j].size());
  }
  std::map<int64_t, double> left;
  for (auto& [c, n] : points_of)
    left[c] = total > 0 ? static_cast<double>(budget) * n / total : 0;
  std::vector<int64_t> points;
  for (int64_t j : ranking) {
    if (j < 0 || j >= static_cast<int64_t>(members.size()))
      throw argument_error("accuracy_aware_plan: ranking names aggregated point " +
                                  std::to_string(j) + " of " + std::to_string(members.size()));
    auto& subset = members[static_cast<size_t>(j)];
    auto& room = left[classes[static_cast<size_t>(j)]];
    if (room <= 0)
      continue;
    points.insert(points.end(), subset.begin(), subset.end());
    room -= static_cast<double>(subset.size());
  }
  std::shuffle(points.begin(), points.end(), rng);
  epoch_plan plan;
  for (size_t begin = 0; begin < points.size(); begin += static_cast<size_t>(batch))
    plan.batches.emplace_back(points.begin() + static_cast<std::ptrdiff_t>(begin),
                              points.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                 points.size(), begin + static_cast<size_t>(batch))));
  return plan;
}

} // namespace eg::learning
