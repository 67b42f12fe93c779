#include "actors/stage_state.hpp"
#include "actors/census.hpp"
#include "common/error.hpp"

#include <time.h>

#include <cmath>
#include <limits>

namespace eg::actors {
namespace stage_parts {

/// Queues a message and starts working if idle.
void enqueue(self_ptr self, held_stage_batch m) {
  auto& st = self->state;
  if (m.value.batch < st.live_from)
    return;  // the pipeline lost it (a stage went down, a rollback): sent again under a new id
  if (!st.started)
    st.started = clock::now();
  st.queue.push_back(std::move(m));
  kick(self);
}

void kick(self_ptr self) {
  auto& st = self->state;
  if (!st.working && !st.queue.empty()) {
    if (st.idle_since)
      st.stats.idle_seconds += seconds(clock::now() - *st.idle_since);
    st.idle_since.reset();
    st.working = true;
    self->send(self, work_atom::value);
  }
}

/// Sends tensors to another stage: on the weights lane to a stage on
/// another node, as a typed message else. Returns the bytes sent.
size_t send_to(self_ptr self, const neighbour& to, held_stage_batch m) {
  auto& st = self->state;
  const size_t bytes = m.wire_bytes;
  const auto kind = m.value.direction;
  if (to.lane && st.args.lane) {
    messages::envelope e;
    e.hdr = {st.args.cluster_id, messages::protocol_version, st.me};
    e.payload = std::move(m.value);
    auto pieces = std::make_shared<const messages::gathered>(
      messages::encode_gathered(e, std::move(m.hold)));
    const size_t size = pieces->size();
    const auto target =
      stage_name(kind == stage_direction::backward ? st.args.index - 1 : st.args.index + 1);
    if (!st.args.lane->send(*to.lane, target, std::move(pieces)))
      spdlog::warn("stage {}: the weights lane dropped a message for {} (sent again later)",
                   st.me, target);
    return size;
  }
  self->send(caf::actor_cast<stage_actor>(to.handle), batch_atom::value, std::move(m));
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

void send_up(self_ptr self, stage_direction kind, uint64_t batch, const torch::Tensor& output,
             const torch::Tensor& labels, bool last) {
  auto& st = self->state;
  if (st.holding) {
    st.outbox.push_back([self, kind, batch, output, labels, last] {
      send_up(self, kind, batch, output, labels, last);
    });
    return;
  }
  auto m = tensor_message(kind, batch, {"input", "labels"}, {output, labels});
  m.value.last = last;
  if (!st.above) {
    hold(st.waiting_up, std::move(m));
    return;
  }
  auto bytes = send_to(self, st.above, std::move(m));
  if (kind == stage_direction::forward)
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
  auto m = tensor_message(stage_direction::backward, batch, {"gradient"}, {gradient});
  if (!st.below) {
    hold(st.waiting_down, std::move(m));
    return;
  }
  st.stats.bytes_down += send_to(self, st.below, std::move(m));
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
      auto& m = st.waiting_up.front();
      const bool forward = m.value.direction == stage_direction::forward;
      auto bytes = send_to(self, st.above, std::move(m));
      if (forward)
        st.stats.bytes_up += bytes;
    }
  if (st.below)
    for (; !st.waiting_down.empty(); st.waiting_down.pop_front())
      st.stats.bytes_down += send_to(self, st.below, std::move(st.waiting_down.front()));
  if (st.first)
    for (; !st.waiting_reports.empty(); st.waiting_reports.pop_front()) {
      auto& r = st.waiting_reports.front();
      report(self, r.batch, r.test, r.loss_sum, r.correct, r.samples);
    }
}

/// After a step: the guard hears its gradient's norm (and the loss, at the
/// last stage); a runaway is told to the first stage.
void guard_step(self_ptr self, std::optional<double> loss) {
  auto& st = self->state;
  if (!st.guard || st.diverging)
    return;
  auto& trainer = *st.args.trainer;
  auto why = st.guard->gradient_norm(trainer.gradient_norm(), [&trainer] {
    double squares = 0;
    for (auto& p : trainer.parameters())
      squares += p.detach().pow(2).sum().item<double>();
    return squares > 0 ? trainer.learning_rate() * trainer.gradient_norm() / std::sqrt(squares)
                       : std::numeric_limits<double>::infinity();
  });
  if (!why && loss)
    why = st.guard->loss(*loss);
  if (!why)
    return;
  st.diverging = true;
  spdlog::warn("stage {}: running away: {}", st.me, *why);
  if (st.is_first())
    self->send(self, diverged_atom::value, uint64_t{st.args.index}, *why);
  else if (st.first)
    self->send(caf::actor_cast<stage_actor>(st.first), diverged_atom::value,
               uint64_t{st.args.index}, *why);
  else
    st.diverging = false;  // no first stage known to tell: the next step tries again
}

/// Serves one message of the queue.
void serve(self_ptr self, held_stage_batch m) {
  auto& st = self->state;
  auto& t = *st.args.trainer;
  const auto batch = m.value.batch;
  const auto updates = t.steps() + t.skipped_steps();
  std::optional<double> loss;
  switch (m.value.direction) {
    case stage_direction::forward: {
      auto input = tensor_of(m, "input", torch::kFloat);
      auto labels = tensor_of(m, "labels", torch::kLong);
      if (st.is_last()) {
        auto r = t.loss_step(batch, input, labels);
        ++st.stats.batches;
        loss = r.loss;
        send_down(self, batch, r.input_gradient);
        report(self, batch, false, r.loss * static_cast<double>(r.samples), r.correct, r.samples);
      } else {
        auto r = t.forward(batch, input, labels);
        ++st.stats.batches;
        send_up(self, stage_direction::forward, batch, r.output, labels, m.value.last);
        send_down(self, batch, r.input_gradient);  // synthetic mode
      }
      break;
    }
    case stage_direction::backward: {
      auto r = t.backward(batch, tensor_of(m, "gradient", torch::kFloat));
      send_down(self, batch, r.input_gradient);  // backprop mode
      if (st.is_first() && st.driver) {
        st.last_progress = clock::now();
        st.driver->returned(batch);
      }
      break;
    }
    case stage_direction::infer: {
      auto input = tensor_of(m, "input", torch::kFloat);
      auto labels = tensor_of(m, "labels", torch::kLong);
      auto out = t.infer(input);
      if (st.is_last()) {
        auto correct = out.argmax(1).eq(labels).sum().item<int64_t>();
        report(self, batch, true, 0.0, correct, labels.size(0));
      } else {
        send_up(self, stage_direction::infer, batch, out, labels);
      }
      break;
    }
  }
  if (t.steps() + t.skipped_steps() != updates)
    guard_step(self, loss);
}


/// The queued message to serve next (none: wait). In the order they came,
/// but under the one-forward-one-backward schedule (stage_args::
/// forward_limit): the first forward while the stage holds fewer batches
/// than its limit and the epoch's last forward has not gone through, else
/// the first backward; evaluation batches, which change nothing, at once.
std::optional<size_t> next_message(const stage_state& st) {
  if (st.queue.empty())
    return std::nullopt;
  if (st.args.forward_limit <= 0 || st.is_last() || !st.pipelined() || st.drained)
    return 0;
  const bool forward =
    static_cast<int64_t>(st.args.trainer->in_flight()) < st.args.forward_limit;
  for (size_t i = 0; i < st.queue.size(); ++i) {
    const auto d = st.queue[i].value.direction;
    if (d == stage_direction::infer || (d == stage_direction::forward) == forward)
      return i;
  }
  return std::nullopt;
}

/// CPU seconds this thread has run.
double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Serves the next message of the queue (the results of the last one go
/// first: held for an emulated slowdown), then the next, after the idle time
/// the slowdown owes.
void do_work(self_ptr self) {
  auto& st = self->state;
  // The results of the last message, held for an emulated slowdown.
  auto ready = std::move(st.outbox);
  st.outbox.clear();
  for (auto& send : ready)
    send();
  const auto next = next_message(st);
  if (!next) {  // nothing, or not what the schedule waits for
    st.working = false;
    st.idle_since = clock::now();
    return;
  }
  auto m = std::move(st.queue[*next]);
  st.queue.erase(st.queue.begin() + static_cast<std::ptrdiff_t>(*next));
  if (m.value.direction == stage_direction::forward)
    st.drained = m.value.last;
  const auto t0 = clock::now();
  const auto direction = m.value.direction;
  const char* what = direction == stage_direction::forward    ? "forward"
                     : direction == stage_direction::backward ? "backward"
                                                              : "evaluation";
  const double cpu0 = thread_cpu_seconds();
  st.holding = st.args.slowdown > 1.0;
  try {
    serve(self, std::move(m));
  } catch (const std::exception& e) {
    spdlog::warn("stage {}: refused a {} message: {}", st.me, what, eg::describe(e));
  }
  st.holding = false;
  const double compute = seconds(clock::now() - t0);
  const double cpu = thread_cpu_seconds() - cpu0;
  if (direction != stage_direction::infer)
    st.stats.train_cpu_seconds += cpu;
  // A machine `slowdown` times slower takes that many times this thread's
  // CPU time for the work, in all: the wall time it took here counts toward
  // it, and the rest is idled. Not the wall time times the slowdown: the
  // wall time also counts waits for a core that the other stages of this
  // process held, which a machine of its own would not have.
  const double idle =
    st.args.slowdown > 1.0 ? std::max(st.args.slowdown * cpu - compute, 0.0) : 0.0;
  st.stats.busy_seconds += compute + idle;
  if (st.is_first())
    pump(self);
  if (idle > 0)
    self->delayed_send(self, std::chrono::microseconds(static_cast<int64_t>(idle * 1e6)),
                       work_atom::value);
  else
    self->send(self, work_atom::value);
}

/// Every stage of the run and their lanes; a first stage starts its run
/// once every stage is there.
void take_stages(self_ptr self, const std::vector<caf::actor>& all,
                 const std::vector<std::string>& lanes) {
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
}

} // namespace stage_parts

int64_t one_forward_one_backward_limit(int64_t in_flight, size_t index) {
  return std::max<int64_t>(1, in_flight - static_cast<int64_t>(index));
}

namespace stage_parts {

stage_impl::behavior_type stage(self_ptr self, stage_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.me = stage_name(st.args.index);
  if (st.args.restore) {
    st.args.trainer->load(st.args.restore->trainer);
    st.epochs = st.args.restore->history;
    st.good_epochs = st.args.restore->epochs_done;
    spdlog::info("stage {}: resumed from its checkpoint after epoch {} of run {}", st.me,
                 st.args.restore->epochs_done, st.args.restore->run);
  }
  // What a runaway before the first checkpoint goes back to.
  st.good = st.args.trainer->save();
  st.start = st.good;
  st.guard.emplace(st.args.runaway, st.args.trainer->stage().shape().classes);
  return {
    [self](batch_atom, held_stage_batch& m) { enqueue(self, std::move(m)); },
    [self](link_atom, std::vector<caf::actor>& all) {
      auto& st = self->state;
      const auto k = st.args.index;
      st.below = {k > 0 && k - 1 < all.size() ? all[k - 1] : caf::actor{}, std::nullopt};
      st.above = {k + 1 < all.size() ? all[k + 1] : caf::actor{}, std::nullopt};
      st.first = all.empty() ? caf::actor{} : all.front();
      st.all = std::move(all);
      st.complete = true;
    },
    [self](stages_atom, const std::vector<caf::actor>& all, const std::vector<std::string>& lanes) {
      take_stages(self, all, lanes);
    },
    [self](forget_atom, uint64_t below_id) { forget(self, below_id); },
    [self](checkpoint_atom, const std::string& run, uint32_t epochs) { save(self, run, epochs); },
    [self](diverged_atom, uint64_t index, const std::string& why) { runaway(self, index, why); },
    [self](rollback_atom, double factor, uint64_t live, bool to_start) {
      return roll_back(self, factor, live, to_start);
    },
    [self](work_atom) { do_work(self); },
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
      s.skipped_steps = st.args.trainer->skipped_steps();
      s.learning_rate = st.args.trainer->learning_rate();
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

} // namespace stage_parts

using namespace stage_parts;

std::string stage_name(size_t index) { return "@stage" + std::to_string(index); }

std::string stage_checkpoint_key(size_t index, uint32_t epochs) {
  return storage::key(stage_name(index), epochs);
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
  // Detached: a thread of its own, as a stage has a machine of its own. A
  // stage's messages are milliseconds of LibTorch work; on the scheduler's
  // shared workers it moved between threads and cores (its caches cold) and
  // held a worker the other stages' messages waited for. conv8's first stage
  // took 8.3-8.9 ms of CPU per batch there, 6.4-6.6 detached (docs/SPLIT.md,
  // "A thread per stage").
  auto what = "stage " + stage_name(args.index);
  return census::counted(
    caf::actor_cast<stage_actor>(sys.spawn<caf::detached>(stage, std::move(args))), what);
}

void link_stages(const std::vector<stage_actor>& stages) {
  std::vector<caf::actor> all;
  for (auto& s : stages)
    all.push_back(caf::actor_cast<caf::actor>(s));
  for (auto& s : stages)
    caf::anon_send(s, link_atom::value, all);
}

} // namespace eg::actors
