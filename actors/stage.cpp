#include "actors/stage.hpp"

#include "actors/node/node.hpp"
#include "actors/report_files.hpp"
#include "models/dataset.hpp"
#include "algorithms/split/split.hpp"
#include "train/trainer.hpp"
#include "messages/lane.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <filesystem>
#include <sstream>

namespace eg::actors {
namespace {

using clock = std::chrono::steady_clock;
using work_atom = caf::atom_constant<caf::atom("work")>;
using stage_impl = stage_actor::extend<caf::reacts_to<work_atom>, caf::reacts_to<tick_atom>>;

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

/// The tensors' names of each kind of message: the lane's door tells the
/// kinds apart by them (stage_message_kind).
const char* input_name(work_kind k) { return k == work_kind::infer ? "test_input" : "input"; }
const char* labels_name(work_kind k) { return k == work_kind::infer ? "test_labels" : "labels"; }

struct work {
  work_kind kind;
  held_weights message;
};

/// Another stage: its handle and, on another node with a lane, the lane.
struct neighbour {
  caf::actor handle;
  std::optional<messages::lane_endpoint> lane;
  explicit operator bool() const { return static_cast<bool>(handle); }
};

struct stage_state {
  static inline const char* name = "stage";
  stage_args args;
  std::string me;  // "@stageK"
  neighbour below, above;
  caf::actor first;
  std::vector<caf::actor> all;  // every stage, first to last (null: missing)
  bool complete = false;        // every stage is known
  // Messages for a neighbour not known yet (its node not peered with ours
  // yet): sent when it is, at most max_waiting of each.
  std::deque<std::pair<work_kind, held_weights>> waiting_up, waiting_down;
  struct report {
    uint64_t batch;
    bool test;
    double loss_sum;
    int64_t correct, samples;
  };
  std::deque<report> waiting_reports;
  static constexpr size_t max_waiting = 64;
  std::deque<work> queue;
  bool working = false;  // a work message is on its way (or idling)
  // An emulated slower machine (slowdown > 1) has its results ready only
  // after slowdown x the compute time: what a message's work sends waits
  // here until the stage's idle time after it has passed.
  bool holding = false;
  std::vector<std::function<void()>> outbox;
  // Statistics.
  std::optional<clock::time_point> started;
  std::optional<clock::time_point> idle_since;
  stage_stats stats;
  // The first stage: the run.
  std::optional<learning::split_driver> driver;
  std::optional<caf::typed_response_promise<std::vector<split_epoch>>> run;
  bool running = false;
  std::vector<split_epoch> epochs;
  double training_seconds = 0;
  std::optional<clock::time_point> training_since;
  clock::time_point last_progress = clock::now();
  bool watching = false;  // the resend check is armed

  bool is_first() const { return args.trainer->is_first(); }
  bool is_last() const { return args.trainer->is_last(); }
  bool synthetic() const { return args.trainer->mode() == learning::stage_mode::synthetic; }
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

/// Sends tensors to another stage: on the weights lane to a stage on
/// another node, as a typed message else. Returns the bytes sent.
size_t send_to(self_ptr self, const neighbour& to, work_kind kind, held_weights m) {
  auto& st = self->state;
  const size_t bytes = m.wire_bytes;
  if (to.lane && st.args.lane) {
    messages::envelope e;
    e.hdr = {st.args.cluster_id, messages::protocol_version, st.me};
    e.payload = std::move(m.value);
    auto pieces = std::make_shared<const messages::gathered>(
      messages::encode_gathered(e, std::move(m.hold)));
    const size_t size = pieces->size();
    const auto target = stage_name(kind == work_kind::backward ? st.args.index - 1 : st.args.index + 1);
    if (!st.args.lane->send(*to.lane, target, std::move(pieces)))
      spdlog::warn("stage {}: the weights lane dropped a message for {} (sent again later)",
                   st.me, target);
    return size;
  }
  switch (kind) {
    case work_kind::forward:
      self->send(caf::actor_cast<stage_actor>(to.handle), forward_atom::value, std::move(m));
      break;
    case work_kind::backward:
      self->send(caf::actor_cast<stage_actor>(to.handle), backward_atom::value, std::move(m));
      break;
    case work_kind::infer:
      self->send(caf::actor_cast<stage_actor>(to.handle), infer_atom::value, std::move(m));
      break;
  }
  return bytes;
}

/// Holds a message for a neighbour not known yet; the oldest goes when
/// too many wait (the first stage sends its batch again).
template <class T>
void hold(std::deque<T>& q, T x) {
  q.push_back(std::move(x));
  if (q.size() > stage_state::max_waiting)
    q.pop_front();
}

void send_up(self_ptr self, work_kind kind, uint64_t batch, const torch::Tensor& output,
             const torch::Tensor& labels) {
  auto& st = self->state;
  if (st.holding) {
    st.outbox.push_back([self, kind, batch, output, labels] {
      send_up(self, kind, batch, output, labels);
    });
    return;
  }
  auto m = tensor_message(batch, {input_name(kind), labels_name(kind)}, {output, labels});
  if (!st.above) {
    hold(st.waiting_up, {kind, std::move(m)});
    return;
  }
  auto bytes = send_to(self, st.above, kind, std::move(m));
  if (kind == work_kind::forward)
    st.stats.bytes_up += bytes;
}

void send_down(self_ptr self, uint64_t batch, const torch::Tensor& gradient) {
  auto& st = self->state;
  if (st.is_first() || !gradient.defined())
    return;
  if (st.holding) {
    st.outbox.push_back([self, batch, gradient] { send_down(self, batch, gradient); });
    return;
  }
  auto m = tensor_message(batch, {"gradient"}, {gradient});
  if (!st.below) {
    hold(st.waiting_down, {work_kind::backward, std::move(m)});
    return;
  }
  st.stats.bytes_down += send_to(self, st.below, work_kind::backward, std::move(m));
}

/// The last stage tells the first what a batch gave.
void report(self_ptr self, uint64_t batch, bool test, double loss_sum, int64_t correct,
            int64_t samples) {
  auto& st = self->state;
  if (st.holding) {
    st.outbox.push_back([self, batch, test, loss_sum, correct, samples] {
      report(self, batch, test, loss_sum, correct, samples);
    });
    return;
  }
  if (st.is_first())
    self->send(self, finished_atom::value, batch, test, loss_sum, correct, samples);
  else if (st.first)
    self->send(caf::actor_cast<stage_actor>(st.first), finished_atom::value, batch, test,
               loss_sum, correct, samples);
  else
    hold(st.waiting_reports, {batch, test, loss_sum, correct, samples});
}

/// Sends what waited for neighbours that are known now.
void flush_waiting(self_ptr self) {
  auto& st = self->state;
  if (st.above)
    for (; !st.waiting_up.empty(); st.waiting_up.pop_front()) {
      auto& [kind, m] = st.waiting_up.front();
      auto bytes = send_to(self, st.above, kind, std::move(m));
      if (kind == work_kind::forward)
        st.stats.bytes_up += bytes;
    }
  if (st.below)
    for (; !st.waiting_down.empty(); st.waiting_down.pop_front())
      st.stats.bytes_down += send_to(self, st.below, work_kind::backward,
                                     std::move(st.waiting_down.front().second));
  if (st.first)
    for (; !st.waiting_reports.empty(); st.waiting_reports.pop_front()) {
      auto& r = st.waiting_reports.front();
      report(self, r.batch, r.test, r.loss_sum, r.correct, r.samples);
    }
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
      if (st.is_first() && st.driver) {
        st.last_progress = clock::now();
        st.driver->returned(batch);
      }
      break;
    }
    case work_kind::infer: {
      auto input = tensor_of(w.message, "test_input", torch::kFloat);
      auto labels = tensor_of(w.message, "test_labels", torch::kLong);
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

/// Tells every other stage something (the first stage's control).
template <class... Ts>
void tell_all(self_ptr self, Ts&&... xs) {
  for (auto& s : self->state.all)
    if (s && s != caf::actor_cast<caf::actor>(self))
      self->send(caf::actor_cast<stage_actor>(s), xs...);
}

void save(self_ptr self, const std::string& run, uint32_t epochs) {
  auto& st = self->state;
  if (!st.args.store)
    return;
  stage_checkpoint c;
  c.fingerprint = st.args.fingerprint;
  c.run = run;
  c.epochs_done = epochs;
  if (st.is_first())
    c.history = st.epochs;
  try {
    c.trainer = st.args.trainer->save();
  } catch (const std::exception& e) {
    spdlog::error("stage {}: cannot save its checkpoint: {}", st.me, e.what());
    return;
  }
  self->send(*st.args.store, store_atom::value,
             std::string{storage::name(storage::family::checkpoints)},
             stage_checkpoint_key(st.args.index, epochs), encode_stage_checkpoint(c));
}

void training_clock(stage_state& st) {
  const bool training = st.driver && st.driver->training();
  if (training && !st.training_since)
    st.training_since = clock::now();
  if (!training && st.training_since) {
    st.training_seconds += seconds(clock::now() - *st.training_since);
    st.training_since.reset();
  }
}

/// The run is over: the metrics file and the node (a run on a node), or the
/// caller's answer.
void end_run(self_ptr self) {
  auto& st = self->state;
  st.running = false;
  if (st.run) {
    st.run->deliver(st.epochs);
    st.run.reset();
  }
  if (!st.args.output_dir.empty() && !st.args.run.empty()) {
    namespace fs = std::filesystem;
    try {
      auto dir = fs::path(st.args.output_dir) / st.args.run;
      fs::create_directories(dir);
      write_split_csv((dir / "split-metrics.csv").string(), st.epochs);
    } catch (const std::exception& e) {
      spdlog::error("stage {}: cannot write the run's metrics: {}", st.me, e.what());
    }
  }
  if (st.args.node)
    self->send(caf::actor_cast<node_actor>(st.args.node), done_atom::value, messages::role::stage,
               st.me, st.args.run);
}

/// The first stage: what the driver says to send, sent; an epoch evaluated,
/// recorded and checkpointed.
void pump(self_ptr self) {
  auto& st = self->state;
  if (!st.driver || !st.running)
    return;
  if (auto e = st.driver->take_epoch()) {
    training_clock(st);
    e->seconds = st.training_seconds;
    st.epochs.push_back(*e);
    spdlog::info("split run {}: epoch {} done, training loss {:.4f}, test accuracy {:.4f}, "
                 "{:.1f} s",
                 st.args.run, e->epoch + 1, e->train_loss, e->test_accuracy, e->seconds);
    if (st.args.node) {
      // For the console and the node's metrics file.
      messages::epoch_report r;
      r.platform = st.me;
      r.node = st.args.node_name;
      r.epoch = e->epoch;
      r.wall_seconds = e->seconds - (st.epochs.size() > 1 ? st.epochs[st.epochs.size() - 2].seconds : 0.0);
      r.samples = static_cast<uint64_t>(st.args.train_set->size());
      r.train_loss = e->train_loss;
      r.test_accuracy = e->test_accuracy;
      r.bytes_sent = st.stats.bytes_up;
      self->send(caf::actor_cast<node_actor>(st.args.node), report_atom::value, r);
    }
    const auto done = st.driver->epochs_done();
    save(self, st.args.run, done);
    tell_all(self, checkpoint_atom::value, st.args.run, done);
  }
  if (st.driver->over()) {
    training_clock(st);
    end_run(self);
    return;
  }
  training_clock(st);
  auto orders = st.driver->next();
  if (!orders.empty())
    st.last_progress = clock::now();
  for (auto& o : orders) {
    const auto& data = o.test ? *st.args.test_set : *st.args.train_set;
    auto index = torch::tensor(o.rows, torch::kLong);
    const auto kind = o.test ? work_kind::infer : work_kind::forward;
    auto m = tensor_message(o.id, {input_name(kind), labels_name(kind)},
                            {data.batch(index), data.labels.index_select(0, index)});
    enqueue(self, kind, std::move(m));
  }
}

/// Drops what this stage holds of batches below `below_id`: the pipeline
/// lost them and the first stage sends them again under new ids.
void forget(self_ptr self, uint64_t below_id) {
  auto& st = self->state;
  const auto n = st.args.trainer->forget_before(below_id);
  if (n > 0)
    spdlog::info("stage {}: dropped {} batches the pipeline lost", st.me, n);
  auto stale = [&](const held_weights& m) { return m.value.iteration < below_id; };
  std::deque<work> keep;
  for (auto& w : st.queue)
    if (!stale(w.message))
      keep.push_back(std::move(w));
  st.queue = std::move(keep);
  for (auto* q : {&st.waiting_up, &st.waiting_down}) {
    std::deque<std::pair<work_kind, held_weights>> left;
    for (auto& x : *q)
      if (!stale(x.second))
        left.push_back(std::move(x));
    *q = std::move(left);
  }
}

/// Every stage is there again (or for the first time): the batches that
/// were in the pipeline go again, and the stages forget them.
void resume(self_ptr self) {
  auto& st = self->state;
  if (!st.driver || !st.running)
    return;
  st.driver->resume();
  tell_all(self, forget_atom::value, st.driver->first_live_id());
  forget(self, st.driver->first_live_id());
  st.last_progress = clock::now();
  pump(self);
}

/// The first stage's watch: batches with no progress for resend_after
/// seconds are taken as lost.
void watch(self_ptr self) {
  auto& st = self->state;
  if (st.watching || !st.running)
    return;
  st.watching = true;
  self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(st.args.resend_after * 250)),
                     tick_atom::value);
}

void start_run(self_ptr self, uint32_t epochs, uint32_t first, uint64_t first_id) {
  auto& st = self->state;
  learning::split_driver_options o;
  o.batch = st.args.batch;
  o.window = st.synthetic() ? std::max<int64_t>(st.args.in_flight, 1) : 1;
  o.wait_for_gradient = !st.synthetic() && !st.is_last();
  o.test_batch = st.args.test_batch;
  o.seed = st.args.seed;
  st.driver.emplace(st.args.train_set->size(), st.args.test_set->size(), o);
  st.driver->start(epochs, first, first_id);
  st.running = true;
  st.training_since.reset();
  if (!st.complete)
    st.driver->pause();
  st.last_progress = clock::now();
  watch(self);
  pump(self);
}

/// Sets the neighbours from the cluster's stages; pauses or resumes the run.
void place(self_ptr self, const std::vector<caf::actor>& all, const std::vector<std::string>& lanes) {
  auto& st = self->state;
  const size_t k = st.args.index;
  auto at = [&](size_t i) {
    neighbour n;
    if (i < all.size() && all[i]) {
      n.handle = all[i];
      if (i < lanes.size() && !lanes[i].empty()) {
        try {
          n.lane = messages::parse_endpoint(lanes[i]);
        } catch (const std::exception& e) {
          spdlog::warn("stage {}: {}", st.me, e.what());
        }
      }
    }
    return n;
  };
  st.below = k > 0 ? at(k - 1) : neighbour{};
  st.above = at(k + 1);
  st.first = all.empty() ? caf::actor{} : all.front();
  const bool moved = st.all != all;
  st.all = all;
  flush_waiting(self);
  const bool was = st.complete;
  st.complete = !all.empty() && std::all_of(all.begin(), all.end(), [](auto& a) { return bool(a); });
  if (!st.is_first() || !st.driver || !st.running)
    return;
  if (was && !st.complete) {
    spdlog::warn("split run {}: a stage is gone; the pipeline waits for it", st.args.run);
    training_clock(st);
    st.driver->pause();
    training_clock(st);
  } else if (!was && st.complete) {
    if (st.driver->paused())
      spdlog::info("split run {}: every stage is there; the pipeline goes on", st.args.run);
    resume(self);
  } else if (st.complete && moved) {
    // A stage came back in the meantime (another handle at its place): what
    // it held is gone.
    resume(self);
  }
}

stage_impl::behavior_type stage(self_ptr self, stage_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.me = stage_name(st.args.index);
  if (st.args.restore) {
    st.args.trainer->load(st.args.restore->trainer);
    st.epochs = st.args.restore->history;
    spdlog::info("stage {}: resumed from its checkpoint after epoch {} of run {}", st.me,
                 st.args.restore->epochs_done, st.args.restore->run);
  }
  auto refuse = [self](const char* what, const std::exception& e) {
    spdlog::warn("stage {}: refused a {} message: {}", self->state.me, what, e.what());
  };
  return {
    [self](forward_atom, held_weights& m) { enqueue(self, work_kind::forward, std::move(m)); },
    [self](backward_atom, held_weights& m) { enqueue(self, work_kind::backward, std::move(m)); },
    [self](infer_atom, held_weights& m) { enqueue(self, work_kind::infer, std::move(m)); },
    [self](link_atom, caf::actor& below, caf::actor& above, caf::actor& first) {
      auto& st = self->state;
      st.below = {below, std::nullopt};
      st.above = {above, std::nullopt};
      st.first = first;
      st.complete = true;
    },
    [self](stages_atom, const std::vector<caf::actor>& all, const std::vector<std::string>& lanes) {
      place(self, all, lanes);
      auto& st = self->state;
      // A first stage on a node starts its run once every stage is there.
      if (st.is_first() && st.complete && !st.driver && st.args.epochs > 0 && st.args.train_set) {
        uint32_t first = 0;
        uint64_t first_id = 0;
        if (st.args.restore) {
          first = st.args.restore->epochs_done;
          // Ids after a restart must not meet those the other stages hold.
          first_id = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(
              std::chrono::system_clock::now().time_since_epoch()).count());
        }
        spdlog::info("split run {}: {} stages, {} mode, epochs {}..{}", st.args.run, st.all.size(),
                     learning::to_string(st.args.trainer->mode()), first + 1, st.args.epochs);
        start_run(self, st.args.epochs, first, first_id);
        tell_all(self, forget_atom::value, first_id);
      }
    },
    [self](forget_atom, uint64_t below_id) { forget(self, below_id); },
    [self](checkpoint_atom, const std::string& run, uint32_t epochs) { save(self, run, epochs); },
    [self, refuse](work_atom) {
      auto& st = self->state;
      // The results of the last message, held for an emulated slowdown.
      auto ready = std::move(st.outbox);
      st.outbox.clear();
      for (auto& send : ready)
        send();
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
      st.holding = st.args.slowdown > 1.0;
      try {
        serve(self, std::move(w));
      } catch (const std::exception& e) {
        refuse(what, e);
      }
      st.holding = false;
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
      if (!st.driver || !st.running)
        return;
      st.last_progress = clock::now();
      st.driver->finished(batch, test, loss_sum, correct, samples);
      pump(self);
    },
    [self](tick_atom) {
      auto& st = self->state;
      st.watching = false;
      if (!st.running)
        return;
      if (st.driver && !st.driver->paused() && st.driver->outstanding() > 0
          && seconds(clock::now() - st.last_progress) > st.args.resend_after) {
        spdlog::warn("split run {}: no progress for {:.0f} s; sending the {} batches in the "
                     "pipeline again",
                     st.args.run, st.args.resend_after, st.driver->outstanding());
        resume(self);
      }
      watch(self);
    },
    [self](run_atom, uint32_t epochs) -> caf::result<std::vector<split_epoch>> {
      auto& st = self->state;
      if (!st.is_first() || !st.args.train_set || !st.args.test_set)
        return make_error(ec::bad_request, "stage: only the first stage, with the data, runs");
      if (st.running)
        return make_error(ec::bad_request, "stage: a run is in progress");
      st.run = self->make_response_promise<std::vector<split_epoch>>();
      st.epochs.clear();
      st.training_seconds = 0;
      start_run(self, epochs, 0, st.driver ? st.driver->next_id() : 0);
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

uint32_t crc_of(const std::string& bytes) {
  return static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()),
                                     static_cast<uInt>(bytes.size())));
}

} // namespace

std::string stage_name(size_t index) { return "@stage" + std::to_string(index); }

std::string stage_checkpoint_key(size_t index, uint32_t epochs) {
  return storage::key(stage_name(index), epochs);
}

stage_message stage_message_kind(const messages::weights& w) {
  for (auto& t : w.tensors) {
    if (t.name == "gradient")
      return stage_message::backward;
    if (t.name == "test_input")
      return stage_message::infer;
    if (t.name == "input")
      return stage_message::forward;
  }
  return stage_message::unknown;
}

// A stage checkpoint: a text header of "key value" lines, an empty line,
// then the trainer's bytes; the header's last line is the CRC-32 of all
// that follows it.
std::string encode_stage_checkpoint(const stage_checkpoint& c) {
  std::ostringstream body;
  body << "fingerprint " << c.fingerprint << '\n'
       << "run " << c.run << '\n'
       << "epochs " << c.epochs_done << '\n';
  body.precision(17);
  for (auto& e : c.history)
    body << "epoch " << e.epoch << ' ' << e.train_loss << ' ' << e.train_accuracy << ' '
         << e.test_accuracy << ' ' << e.seconds << '\n';
  body << '\n' << c.trainer;
  const auto b = body.str();
  return "edgegossip-stage 1 " + std::to_string(crc_of(b)) + '\n' + b;
}

stage_checkpoint decode_stage_checkpoint(const std::string& bytes) {
  const auto nl = bytes.find('\n');
  std::istringstream first(bytes.substr(0, nl == std::string::npos ? 0 : nl));
  std::string magic;
  int version = 0;
  uint32_t crc = 0;
  if (nl == std::string::npos || !(first >> magic >> version >> crc) || magic != "edgegossip-stage")
    throw learning::stage_error("not a stage checkpoint");
  if (version != 1)
    throw learning::stage_error("a stage checkpoint of version " + std::to_string(version)
                                + " (this build reads version 1)");
  const auto body = bytes.substr(nl + 1);
  if (crc_of(body) != crc)
    throw learning::stage_error("the stage checkpoint is corrupt or truncated (checksum mismatch)");
  const auto end = body.find("\n\n");
  if (end == std::string::npos)
    throw learning::stage_error("the stage checkpoint has no end of header");
  stage_checkpoint c;
  std::istringstream header(body.substr(0, end + 1));
  std::string line;
  while (std::getline(header, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "fingerprint")
      std::getline(in >> std::ws, c.fingerprint);
    else if (key == "run")
      std::getline(in >> std::ws, c.run);
    else if (key == "epochs" || key == "epoch") {
      split_epoch e;
      if (key == "epochs")
        in >> c.epochs_done;
      else if (in >> e.epoch >> e.train_loss >> e.train_accuracy >> e.test_accuracy >> e.seconds)
        c.history.push_back(e);
      if (in.fail())
        throw learning::stage_error("the stage checkpoint's line '" + line + "' is malformed");
    }
  }
  c.trainer = body.substr(end + 2);
  return c;
}

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
