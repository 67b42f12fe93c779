#include "algorithms/split/split_driver.hpp"
#include "common/error.hpp"

#include "train/trainer.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

namespace eg::learning {

split_driver::split_driver(int64_t train_size, int64_t test_size, split_driver_options opt)
    : train_size_(train_size), test_size_(test_size), opt_(opt) {
  if (train_size_ <= 0 || test_size_ <= 0)
    throw argument_error("split_driver: the training and test sets must not be empty");
  if (opt_.batch <= 0 || opt_.window <= 0 || opt_.test_batch <= 0)
    throw argument_error("split_driver: batch, window and test_batch must be positive");
}

void split_driver::start(uint32_t epochs, uint32_t first, uint64_t first_id) {
  started_ = true;
  paused_ = false;
  epochs_ = epochs;
  epoch_ = first;
  next_id_ = first_live_ = first_id;
  outstanding_.clear();
  again_.clear();
  ready_.reset();
  if (!over())
    begin_epoch();
}

void split_driver::begin_epoch() {
  evaluating_ = false;
  std::vector<int64_t> all(static_cast<size_t>(train_size_));
  std::iota(all.begin(), all.end(), int64_t{0});
  // The epoch's shuffle depends on the seed and the epoch only.
  std::seed_seq seq{opt_.seed, static_cast<uint64_t>(epoch_)};
  std::mt19937_64 rng(seq);
  queue_ = shuffled_plan(all, opt_.batch, 1.0, rng).batches;
  queued_ = 0;
  loss_sum_ = 0;
  correct_ = samples_ = 0;
}

void split_driver::begin_evaluation() {
  evaluating_ = true;
  queue_.clear();
  for (int64_t from = 0; from < test_size_; from += opt_.test_batch) {
    std::vector<int64_t> rows(static_cast<size_t>(std::min(test_size_, from + opt_.test_batch) - from));
    std::iota(rows.begin(), rows.end(), from);
    queue_.push_back(std::move(rows));
  }
  queued_ = 0;
  test_correct_ = test_samples_ = 0;
}

std::vector<split_driver::order> split_driver::next() {
  std::vector<order> out;
  if (!started_ || paused_ || over())
    return out;
  auto room = [&] {
    return evaluating_ || static_cast<int64_t>(outstanding_.size()) < opt_.window;
  };
  auto send = [&](batch b) {
    const auto id = next_id_++;
    out.push_back({id, b.test, b.rows});
    outstanding_.emplace(id, std::move(b));
  };
  while (!again_.empty() && room()) {
    send(std::move(again_.front()));
    again_.erase(again_.begin());
  }
  while (again_.empty() && queued_ < queue_.size() && room()) {
    batch b;
    b.test = evaluating_;
    b.rows = std::move(queue_[queued_++]);
    send(std::move(b));
  }
  if (!out.empty() && !out.back().test && again_.empty() && queued_ == queue_.size())
    out.back().last = true;
  return out;
}

bool split_driver::done(const batch& b) const {
  return b.finished && (b.test || !opt_.wait_for_gradient || b.returned);
}

void split_driver::finished(uint64_t id, bool test, double loss_sum, int64_t correct,
                            int64_t samples) {
  auto i = outstanding_.find(id);
  if (i == outstanding_.end() || i->second.test != test || i->second.finished)
    return;  // lost and sent again, or not ours
  i->second.finished = true;
  if (!i->second.counted) {
    i->second.counted = true;
    if (test) {
      test_correct_ += correct;
      test_samples_ += samples;
    } else {
      loss_sum_ += loss_sum;
      correct_ += correct;
      samples_ += samples;
    }
  }
  settle();
}

void split_driver::returned(uint64_t id) {
  auto i = outstanding_.find(id);
  if (i == outstanding_.end() || i->second.test)
    return;
  i->second.returned = true;
  settle();
}

void split_driver::settle() {
  for (auto i = outstanding_.begin(); i != outstanding_.end();)
    i = done(i->second) ? outstanding_.erase(i) : std::next(i);
  if (!outstanding_.empty() || !again_.empty() || queued_ < queue_.size() || over())
    return;
  if (!evaluating_) {
    begin_evaluation();
    return;
  }
  split_epoch e;
  e.epoch = epoch_;
  e.train_loss = samples_ ? loss_sum_ / static_cast<double>(samples_) : 0.0;
  e.train_accuracy = samples_ ? static_cast<double>(correct_) / static_cast<double>(samples_) : 0.0;
  e.test_accuracy =
    test_samples_ ? static_cast<double>(test_correct_) / static_cast<double>(test_samples_) : 0.0;
  ready_ = e;
  ++epoch_;
  evaluating_ = false;
  if (!over())
    begin_epoch();
}

void split_driver::pause() { paused_ = true; }

void split_driver::resume() {
  paused_ = false;
  // Every batch sent and not done goes again, first, under a new id. A
  // training batch the last stage finished but whose gradient did not come
  // back is trained once more for it; its loss stays counted once.
  for (auto& [id, b] : outstanding_) {
    batch again = b;
    again.counted = b.counted;  // set when it finished
    again.finished = again.returned = false;
    again_.push_back(std::move(again));
  }
  outstanding_.clear();
  first_live_ = next_id_;
  settle();
}

void split_driver::restart_epoch() {
  if (!started_ || over())
    return;
  outstanding_.clear();
  again_.clear();
  first_live_ = next_id_;
  begin_epoch();
}

std::optional<split_epoch> split_driver::take_epoch() {
  auto e = ready_;
  ready_.reset();
  return e;
}

} // namespace eg::learning
