#include "actors/stage_state.hpp"
#include "common/error.hpp"

// The first stage's run of a split model: epochs, the in-flight window,
// checkpoints after every epoch, a missing stage, the end.

namespace eg::actors::stage_parts {

void save(self_ptr self, const std::string& run, uint32_t epochs) {
  auto& st = self->state;
  stage_checkpoint c;
  c.fingerprint = st.args.fingerprint;
  c.run = run;
  c.epochs_done = epochs;
  if (st.is_first())
    c.history = st.epochs;
  try {
    c.trainer = st.args.trainer->save();
  } catch (const std::exception& e) {
    spdlog::error("stage {}: cannot save its checkpoint: {}", st.me, eg::describe(e));
    return;
  }
  // A runaway goes back to this (the same bytes as the store's checkpoint).
  st.good = c.trainer;
  st.good_epochs = epochs;
  if (!st.args.store)
    return;
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
void end_run(self_ptr self, const std::string& failure) {
  auto& st = self->state;
  st.running = false;
  if (st.run) {
    if (failure.empty())
      st.run->deliver(st.epochs);
    else
      st.run->deliver(make_error(ec::diverged, failure));
    st.run.reset();
  }
  if (!st.args.output_dir.empty() && !st.args.run.empty()) {
    namespace fs = std::filesystem;
    try {
      auto dir = fs::path(st.args.output_dir) / st.args.run;
      fs::create_directories(dir);
      write_split_csv((dir / "split-metrics.csv").string(), st.epochs);
    } catch (const std::exception& e) {
      spdlog::error("stage {}: cannot write the run's metrics: {}", st.me, eg::describe(e));
    }
  }
  if (st.args.failure && !failure.empty())
    *st.args.failure = failure;
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
    const auto kind = o.test ? stage_direction::infer : stage_direction::forward;
    auto m = tensor_message(kind, o.id, {"input", "labels"},
                            {data.batch(index), data.labels.index_select(0, index)});
    m.value.last = o.last;
    enqueue(self, std::move(m));
  }
}

/// Drops what this stage holds of batches below `below_id`: the pipeline
/// lost them and the first stage sends them again under new ids.
void forget(self_ptr self, uint64_t below_id) {
  auto& st = self->state;
  st.live_from = below_id;
  const auto n = st.args.trainer->forget_before(below_id);
  if (n > 0)
    spdlog::info("stage {}: dropped {} batches the pipeline lost", st.me, n);
  auto stale = [&](const held_stage_batch& m) { return m.value.batch < below_id; };
  std::deque<held_stage_batch> keep;
  for (auto& m : st.queue)
    if (!stale(m))
      keep.push_back(std::move(m));
  st.queue = std::move(keep);
  st.drained = false;  // what is sent again comes as forwards
  kick(self);
  for (auto* q : {&st.waiting_up, &st.waiting_down}) {
    std::deque<held_stage_batch> left;
    for (auto& x : *q)
      if (!stale(x))
        left.push_back(std::move(x));
    *q = std::move(left);
  }
}

/// Every stage is there again (or for the first time): the batches that
/// were in the pipeline go again, and the stages forget them.
void resume(self_ptr self) {
  auto& st = self->state;
  if (!st.driver || !st.running || st.rolling_back > 0)
    return;  // a rollback resumes when every stage has gone back
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
  o.window = st.pipelined() ? std::max<int64_t>(st.args.in_flight, 1) : 1;
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
          spdlog::warn("stage {}: {}", st.me, eg::describe(e));
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

double roll_back(self_ptr self, double factor, uint64_t live, bool to_start) {
  auto& st = self->state;
  auto& t = *st.args.trainer;
  forget(self, live);
  try {
    // Slower than now: a second rollback to the same checkpoint slows again.
    const double lr = t.learning_rate();
    t.load(to_start ? st.start : st.good);
    t.scale_learning_rate(lr * factor / t.learning_rate());
  } catch (const std::exception& e) {
    spdlog::error("stage {}: cannot go back to its checkpoint: {}", st.me, eg::describe(e));
  }
  st.guard->restart();
  st.diverging = false;
  ++st.stats.rollbacks;
  if (to_start)
    spdlog::info("stage {}: back to where it began (stuck), learning rate {:.3g}", st.me,
                 t.learning_rate());
  else
    spdlog::info("stage {}: back to its checkpoint after epoch {}, learning rate {:.3g}", st.me,
                 st.good_epochs, t.learning_rate());
  return t.learning_rate();
}

namespace {

/// A stage answered the rollback (or could not): when all have, the epoch
/// starts again.
void rolled_back(self_ptr self) {
  auto& st = self->state;
  if (st.rolling_back == 0 || --st.rolling_back > 0)
    return;
  if (!st.running || !st.driver)
    return;
  st.last_progress = clock::now();
  if (st.complete)
    resume(self);  // otherwise when the missing stage is back (place)
}

} // namespace

void runaway(self_ptr self, uint64_t index, const std::string& why) {
  auto& st = self->state;
  if (!st.is_first() || !st.driver || !st.running || st.rolling_back > 0)
    return;  // one rollback at a time: another stage's report of the same runaway
  const auto& o = st.args.runaway;
  const auto epoch = st.driver->epochs_done() + 1;
  if (st.rollbacks >= o.max_rollbacks) {
    const auto text = "split run " + st.args.run + ": " + stage_name(index) + " ran away in epoch " +
                      std::to_string(epoch) + " (" + why + ") after " +
                      std::to_string(st.rollbacks) + " rollbacks (split.max_rollbacks); the run "
                      "stops. The checkpoints after epoch " + std::to_string(st.good_epochs) +
                      " are kept; a smaller train.lr may train";
    spdlog::error("{}", text);
    training_clock(st);
    end_run(self, text);
    return;
  }
  ++st.rollbacks;
  const bool to_start = learning::is_stuck(why);
  spdlog::warn("split run {}: {} ran away in epoch {} ({}); every stage goes back to {} with its "
               "learning rate x {} and the epoch starts again (rollback {} of at most {})",
               st.args.run, stage_name(index), epoch, why,
               to_start ? std::string{"where it began"}
                        : "its checkpoint after epoch " + std::to_string(st.good_epochs),
               o.slow, st.rollbacks, o.max_rollbacks);
  training_clock(st);
  st.driver->pause();
  training_clock(st);
  st.driver->restart_epoch();
  const auto live = st.driver->first_live_id();
  roll_back(self, o.slow, live, to_start);
  st.rolling_back = 1;  // this stage's own answer, given below
  for (auto& s : st.all) {
    if (!s || s == caf::actor_cast<caf::actor>(self))
      continue;
    ++st.rolling_back;
    self->request(caf::actor_cast<stage_actor>(s), std::chrono::seconds(60), rollback_atom::value,
                  o.slow, live, to_start)
      .then([self](double) { rolled_back(self); },
            [self](caf::error& e) {
              spdlog::warn("split run {}: a stage did not answer the rollback ({}); it starts "
                           "from its checkpoint when it comes back",
                           self->state.args.run, self->system().render(e));
              rolled_back(self);
            });
  }
  rolled_back(self);
}

} // namespace eg::actors::stage_parts
