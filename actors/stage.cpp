#include "actors/stage.hpp"

#include "learning/dataset.hpp"
#include "learning/split.hpp"
#include "learning/trainer.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>
#include <map>
#include <random>
#include <set>

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;
using work_atom = caf::atom_constant<caf::atom("work")>;
using stage_impl = stage_actor::extend<caf::reacts_to<work_atom>>;

double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// Tensors as a message: views of contiguous CPU tensors, held by the message.
held_weights tensor_message(uint64_t batch, std::vector<std::string> names,
                            std::vector<torch::Tensor> tensors) {
  auto hold = std::make_shared<std::vector<torch::Tensor>>();
  held_weights h;
  h.sender = "stage";
  h.value.iteration = batch;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto t = tensors[i].contiguous();
    messages::tensor_view v;
    v.name = names[i];
    v.type = t.scalar_type() == torch::kLong ? messages::dtype::int64 : messages::dtype::float32;
    v.shape = t.sizes().vec();
    v.data = t.data_ptr();
    v.bytes = static_cast<size_t>(t.numel()) * t.element_size();
    h.wire_bytes += v.bytes;
    h.value.tensors.push_back(std::move(v));
    hold->push_back(std::move(t));
  }
  h.hold = std::move(hold);
  return h;
}

/// The tensor `name` of a message, checked for its type and size (the
/// stage trainer checks shapes against its layers).
torch::Tensor tensor_of(const held_weights& m, const std::string& name, torch::ScalarType type) {
  for (auto& v : m.value.tensors) {
    if (v.name != name)
      continue;
    const auto want = type == torch::kLong ? messages::dtype::int64 : messages::dtype::float32;
    if (v.type != want)
      throw learning::stage_error("tensor '" + name + "' of batch "
                                  + std::to_string(m.value.iteration) + " has the wrong type");
    int64_t n = 1;
    for (auto d : v.shape) {
      if (d < 0)
        throw learning::stage_error("tensor '" + name + "' has a negative dimension");
      n *= d;
    }
    if (static_cast<size_t>(n) * messages::element_size(v.type) != v.bytes)
      throw learning::stage_error("tensor '" + name + "': its shape and length disagree");
    // A copy: the message's buffer goes with the message.
    return torch::from_blob(const_cast<void*>(v.data), v.shape, type).clone();
  }
  throw learning::stage_error("batch " + std::to_string(m.value.iteration) + " has no tensor '"
                              + name + "'");
}

enum class work_kind { forward, backward, infer };

struct work {
  work_kind kind;
  held_weights message;
};

/// A training batch of the first stage: finished by the last stage, and
/// (backprop mode) its gradient back at the first.
struct batch_state {
  bool finished = false;
  bool returned = false;
};

struct stage_state {
  static inline const char* name = "stage";
  stage_args args;
  stage_actor below, above;
  stage_actor first;
  std::deque<work> queue;
  bool working = false;  // a work message is on its way (or idling)
  // Statistics.
  std::optional<clock::time_point> started;
  std::optional<clock::time_point> idle_since;
  stage_stats stats;
  // The first stage: the run.
  std::optional<caf::typed_response_promise<std::vector<split_epoch>>> run;
  std::vector<split_epoch> epochs;
  uint32_t epoch = 0;
  uint32_t epoch_count = 0;
  learning::epoch_plan plan;
  size_t next_batch = 0;
  uint64_t batch_ids = 0;
  std::map<uint64_t, batch_state> in_flight;
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t samples = 0;
  // Evaluation after an epoch.
  bool evaluating = false;
  size_t test_batches_left = 0;
  int64_t test_correct = 0;
  int64_t test_samples = 0;
  double training_seconds = 0;
  clock::time_point epoch_start;
  std::mt19937_64 rng;

  bool is_first() const { return args.trainer->is_first(); }
  bool is_last() const { return args.trainer->is_last(); }
  bool synthetic() const { return args.trainer->mode() == learning::stage_mode::synthetic; }
  int64_t window() const { return synthetic() ? std::max<int64_t>(args.in_flight, 1) : 1; }
};

using self_ptr = stage_impl::stateful_pointer<stage_state>;

void pump(self_ptr self);

/// Queues a message and starts working if idle.
void enqueue(self_ptr self, work_kind kind, held_weights m) {
  auto& st = self->state;
  if (!st.started)
    st.started = clock::now();
  st.queue.push_back({kind, std::move(m)});
  if (!st.working) {
    if (st.idle_since)
      st.stats.idle_seconds += seconds(clock::now() - *st.idle_since);
    st.idle_since.reset();
    st.working = true;
    self->send(self, work_atom::value);
  }
}

void send_up(self_ptr self, work_kind kind, uint64_t batch, const torch::Tensor& output,
             const torch::Tensor& labels) {
  auto& st = self->state;
  auto m = tensor_message(batch, {"input", "labels"}, {output, labels});
  if (kind == work_kind::forward)
    st.stats.bytes_up += m.wire_bytes;
  if (kind == work_kind::infer)
    self->send(st.above, infer_atom::value, std::move(m));
  else
    self->send(st.above, forward_atom::value, std::move(m));
}

void send_down(self_ptr self, uint64_t batch, const torch::Tensor& gradient) {
  auto& st = self->state;
  if (!st.below || !gradient.defined())
    return;
  auto m = tensor_message(batch, {"gradient"}, {gradient});
  st.stats.bytes_down += m.wire_bytes;
  self->send(st.below, backward_atom::value, std::move(m));
}

/// The last stage tells the first what a batch gave.
void report(self_ptr self, uint64_t batch, bool test, double loss_sum, int64_t correct,
            int64_t samples) {
  auto& st = self->state;
  if (st.is_first())
    self->send(self, finished_atom::value, batch, test, loss_sum, correct, samples);
  else
    self->send(st.first, finished_atom::value, batch, test, loss_sum, correct, samples);
}

/// Serves one message of the queue.
void serve(self_ptr self, work w) {
  auto& st = self->state;
  auto& t = *st.args.trainer;
  const auto batch = w.message.value.iteration;
  switch (w.kind) {
    case work_kind::forward: {
      auto input = tensor_of(w.message, "input", torch::kFloat);
      auto labels = tensor_of(w.message, "labels", torch::kLong);
      if (st.is_last()) {
        auto r = t.loss_step(batch, input, labels);
        ++st.stats.batches;
        send_down(self, batch, r.input_gradient);
        report(self, batch, false, r.loss * static_cast<double>(r.samples), r.correct, r.samples);
      } else {
        auto r = t.forward(batch, input, labels);
        ++st.stats.batches;
        send_up(self, work_kind::forward, batch, r.output, labels);
        send_down(self, batch, r.input_gradient);  // synthetic mode
      }
      break;
    }
    case work_kind::backward: {
      auto r = t.backward(batch, tensor_of(w.message, "gradient", torch::kFloat));
      send_down(self, batch, r.input_gradient);  // backprop mode
      if (st.is_first() && !st.synthetic()) {
        auto i = st.in_flight.find(batch);
        if (i != st.in_flight.end())
          i->second.returned = true;
      }
      break;
    }
    case work_kind::infer: {
      auto input = tensor_of(w.message, "input", torch::kFloat);
      auto labels = tensor_of(w.message, "labels", torch::kLong);
      auto out = t.infer(input);
      if (st.is_last()) {
        auto correct = out.argmax(1).eq(labels).sum().item<int64_t>();
        report(self, batch, true, 0.0, correct, labels.size(0));
      } else {
        send_up(self, work_kind::infer, batch, out, labels);
      }
      break;
    }
  }
}

/// The first stage: the next epoch's batches into the pipeline, as far as
/// its window lets; the epoch's end once every batch is done.
void pump(self_ptr self) {
  auto& st = self->state;
  if (!st.run || st.evaluating)
    return;
  auto done = [&](const batch_state& b) { return b.finished && (st.synthetic() || st.is_last() || b.returned); };
  for (auto i = st.in_flight.begin(); i != st.in_flight.end();)
    i = done(i->second) ? st.in_flight.erase(i) : std::next(i);
  auto& data = *st.args.train_set;
  while (static_cast<int64_t>(st.in_flight.size()) < st.window()
         && st.next_batch < st.plan.batches.size()) {
    const auto& idx = st.plan.batches[st.next_batch++];
    auto index = torch::tensor(idx, torch::kLong);
    const auto id = st.batch_ids++;
    st.in_flight[id] = {};
    auto m = tensor_message(id, {"input", "labels"},
                            {data.images.index_select(0, index), data.labels.index_select(0, index)});
    enqueue(self, work_kind::forward, std::move(m));
  }
  if (!st.in_flight.empty() || st.next_batch < st.plan.batches.size())
    return;
  // The epoch is trained: evaluate the chained stages on the test set.
  st.training_seconds += seconds(clock::now() - st.epoch_start);
  st.evaluating = true;
  const auto& test = *st.args.test_set;
  const int64_t n = test.size(), b = 1000;
  st.test_batches_left = static_cast<size_t>((n + b - 1) / b);
  st.test_correct = st.test_samples = 0;
  for (int64_t from = 0; from < n; from += b) {
    auto m = tensor_message(st.batch_ids++, {"input", "labels"},
                            {test.images.slice(0, from, std::min(n, from + b)),
                             test.labels.slice(0, from, std::min(n, from + b))});
    enqueue(self, work_kind::infer, std::move(m));
  }
}

void begin_epoch(self_ptr self) {
  auto& st = self->state;
  std::vector<int64_t> all(static_cast<size_t>(st.args.train_set->size()));
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int64_t>(i);
  st.plan = learning::shuffled_plan(all, st.args.batch, 1.0, st.rng);
  st.next_batch = 0;
  st.loss_sum = 0;
  st.correct = st.samples = 0;
  st.epoch_start = clock::now();
  pump(self);
}

stage_impl::behavior_type stage(self_ptr self, stage_args args) {
  auto& st = self->state;
  st.rng.seed(args.seed);
  st.args = std::move(args);
  auto refuse = [self](const char* what, const std::exception& e) {
    spdlog::warn("stage: refused a {} message: {}", what, e.what());
  };
  return {
    [self](forward_atom, held_weights& m) { enqueue(self, work_kind::forward, std::move(m)); },
    [self](backward_atom, held_weights& m) { enqueue(self, work_kind::backward, std::move(m)); },
    [self](infer_atom, held_weights& m) { enqueue(self, work_kind::infer, std::move(m)); },
    [self](link_atom, caf::actor& below, caf::actor& above, caf::actor& first) {
      auto& st = self->state;
      st.below = caf::actor_cast<stage_actor>(below);
      st.above = caf::actor_cast<stage_actor>(above);
      st.first = caf::actor_cast<stage_actor>(first);
    },
    [self, refuse](work_atom) {
      auto& st = self->state;
      if (st.queue.empty()) {
        st.working = false;
        st.idle_since = clock::now();
        return;
      }
      auto w = std::move(st.queue.front());
      st.queue.pop_front();
      const auto t0 = clock::now();
      const char* what = w.kind == work_kind::forward    ? "forward"
                         : w.kind == work_kind::backward ? "backward"
                                                         : "evaluation";
      try {
        serve(self, std::move(w));
      } catch (const learning::stage_error& e) {
        refuse(what, e);
      } catch (const std::exception& e) {
        refuse(what, e);
      }
      const double compute = seconds(clock::now() - t0);
      const double idle = compute * std::max(st.args.slowdown - 1.0, 0.0);
      st.stats.busy_seconds += compute + idle;
      if (st.is_first())
        pump(self);
      if (idle > 0)
        self->delayed_send(self, std::chrono::microseconds(static_cast<int64_t>(idle * 1e6)),
                           work_atom::value);
      else
        self->send(self, work_atom::value);
    },
    [self](finished_atom, uint64_t batch, bool test, double loss_sum, int64_t correct,
           int64_t samples) {
      auto& st = self->state;
      if (!st.run)
        return;
      if (test) {
        st.test_correct += correct;
        st.test_samples += samples;
        if (st.test_batches_left > 0 && --st.test_batches_left == 0) {
          split_epoch e;
          e.epoch = st.epoch;
          e.train_loss = st.samples ? st.loss_sum / static_cast<double>(st.samples) : 0.0;
          e.train_accuracy = st.samples ? static_cast<double>(st.correct) / st.samples : 0.0;
          e.test_accuracy = st.test_samples ? static_cast<double>(st.test_correct) / st.test_samples : 0.0;
          e.seconds = st.training_seconds;
          st.epochs.push_back(e);
          st.evaluating = false;
          if (++st.epoch >= st.epoch_count) {
            st.run->deliver(st.epochs);
            st.run.reset();
            return;
          }
          begin_epoch(self);
        }
        return;
      }
      st.loss_sum += loss_sum;
      st.correct += correct;
      st.samples += samples;
      auto i = st.in_flight.find(batch);
      if (i != st.in_flight.end())
        i->second.finished = true;
      pump(self);
    },
    [self](run_atom, uint32_t epochs) -> caf::result<std::vector<split_epoch>> {
      auto& st = self->state;
      if (!st.is_first() || !st.args.train_set || !st.args.test_set)
        return make_error(ec::bad_request, "stage: only the first stage, with the data, runs");
      if (st.run)
        return make_error(ec::bad_request, "stage: a run is in progress");
      st.run = self->make_response_promise<std::vector<split_epoch>>();
      st.epochs.clear();
      st.epoch = 0;
      st.epoch_count = epochs;
      st.training_seconds = 0;
      begin_epoch(self);
      return *st.run;
    },
    [self](stats_atom) -> stage_stats {
      auto& st = self->state;
      auto s = st.stats;
      if (st.started)
        s.wall_seconds = seconds(clock::now() - *st.started);
      if (st.idle_since)
        s.idle_seconds += seconds(clock::now() - *st.idle_since);
      return s;
    },
  };
}

} // namespace

stage_actor spawn_stage(caf::actor_system& sys, stage_args args) {
  return caf::actor_cast<stage_actor>(sys.spawn(stage, std::move(args)));
}

void link_stages(const std::vector<stage_actor>& stages) {
  for (size_t k = 0; k < stages.size(); ++k)
    caf::anon_send(stages[k], link_atom::value,
                   k > 0 ? caf::actor_cast<caf::actor>(stages[k - 1]) : caf::actor{},
                   k + 1 < stages.size() ? caf::actor_cast<caf::actor>(stages[k + 1]) : caf::actor{},
                   caf::actor_cast<caf::actor>(stages.front()));
}

} // namespace eg::actors
