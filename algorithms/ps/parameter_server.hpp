#pragma once
// The parameter server's model and a worker's commits (docs/ALGORITHMS.md,
// "ADSP"), actor-free: the global model with its version, to which each
// commit U_i = (worker's model) - (the model it last pulled) is added as
// U_i / N; and on the worker's side, the model at its last pull.

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace eg::learning {

/// The global model of a parameter server: x <- x + U / N for each commit
/// (server momentum off, as in the ADSP authors' default), the version
/// counting the commits applied.
class global_model {
public:
  /// Starts from a copy of `initial` (every worker builds the same initial
  /// model from the cluster seed); `workers` is N >= 1.
  global_model(const std::vector<torch::Tensor>& initial, int64_t workers);
  /// Adds update / N. Throws std::invalid_argument, changing nothing, when
  /// the update does not match the model (number of tensors, shapes) or
  /// holds a value that is not finite.
  void apply(const std::vector<torch::Tensor>& update);
  /// N, for workers that join or leave (>= 1).
  void set_workers(int64_t workers);
  int64_t workers() const { return workers_; }
  uint64_t version() const { return version_; }
  /// The model, read-only views (copy before the next apply if kept).
  const std::vector<torch::Tensor>& params() const { return params_; }
  /// Continue from a checkpoint: these parameters at this version.
  void restore(const std::vector<torch::Tensor>& params, uint64_t version);

private:
  std::vector<torch::Tensor> params_;
  int64_t workers_;
  uint64_t version_ = 0;
};

/// A worker's side: the model it pulled last, to commit its progress since.
class commit_base {
public:
  /// The worker loaded `pulled` (the server's model): its parameters are set
  /// to it and the base is a copy.
  void pulled(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& pulled);
  /// U = params - base; the base is then params (so that what it commits
  /// next is what it trained after this commit, should no pull come back).
  std::vector<torch::Tensor> commit(const std::vector<torch::Tensor>& params);
  /// The server applied none of `update` (a commit's answer says it was
  /// lost): the base goes back by it, so that the next commit carries it.
  void returned(const std::vector<torch::Tensor>& update);
  bool ready() const { return !base_.empty(); }

private:
  std::vector<torch::Tensor> base_;
};

} // namespace eg::learning
