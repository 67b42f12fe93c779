#include "actors/balancer/balancer_state.hpp"
#include "actors/census.hpp"
#include "common/error.hpp"

#include <algorithm>

namespace eg::actors {
namespace balancer_parts {

/// A control command to one platform; a checkpoint is noted once the store
/// has it.
void console_send(self_ptr self, const std::string& name, const platform_actor& handle,
                  messages::verb what) {
  self->request(handle, defaults::control_timeout, control_atom::value, control{what, {}})
    .then(
      [self, name, what](bool ok) {
        if (what == messages::verb::checkpoint && ok)
          self->state.console.checkpointed(name);
      },
      [self, name, what](caf::error& err) {
        spdlog::warn("balancer: console: {} on platform {}: {}", messages::to_string(what), name,
                     self->system().render(err));
      });
}


/// The predictors of the live platforms, asked for their predicted
/// throughput (planning, the console's snapshot).
void gather_predictions(self_ptr self, std::chrono::milliseconds timeout,
                        std::function<void(std::map<std::string, prediction>&)> done) {
  std::vector<std::pair<std::string, predictor_actor>> targets;
  for (auto& name : self->state.epochs.live())
    if (auto& h = self->state.handles[name]; h.predictor)
      targets.emplace_back(name, h.predictor);
  gather<prediction>(self, targets, timeout, predict_atom::value, "prediction",
                     [done = std::move(done)](std::vector<prediction>& answers) {
                       std::map<std::string, prediction> by_name;
                       for (auto& p : answers)
                         by_name[p.platform] = p;
                       done(by_name);
                     });
}

/// Sends every live platform its plan for the epoch; logs Algorithm 1's.
void send_plans(self_ptr self, const epoch_plan& plan) {
  auto& st = self->state;
  if (plan.balanced || !plan.line.empty()) {  // Algorithm 1's, or the first epoch's shares
    for (auto& warning : plan.warnings)
      spdlog::warn("balancer: {}", warning);
    spdlog::info("balancer: epoch {} plan:{}", plan.epoch + 1, plan.line);
    st.console.planned(plan);
  }
  for (auto& [name, p] : plan.plans) {
    if (!st.norm_text.empty())
      self->send(st.handles[name].platform, norm_atom::value, st.norm_text);
    self->send(st.handles[name].platform, plan_atom::value, p);
  }
}

/// Plans `epoch`: GoSGD at once; EdgeGossip once the predictors answered.
void send_plan(self_ptr self, uint32_t epoch) {
  auto& st = self->state;
  if (!st.args.settings.strategy.edgegossip()) {
    send_plans(self, st.epochs.plan(epoch, {}, clock::now()));
    return;
  }
  if (!st.planning.insert(epoch).second)
    return;  // its predictions are being gathered
  gather_predictions(self, defaults::prediction_timeout,
                     [self, epoch](std::map<std::string, prediction>& predictions) {
                       self->state.planning.erase(epoch);
                       send_plans(self,
                                  self->state.epochs.plan(epoch, predictions, clock::now()));
                     });
}

/// The run directory's tables, metrics.csv and cluster.csv, as they stand:
/// rewritten after every epoch, so that a run stopped midway (a signal, a
/// wall-time limit, a crash) leaves the epochs it ended.
void write_tables(self_ptr self) {
  auto& st = self->state;
  if (st.run.empty())
    return;
  namespace fs = std::filesystem;
  auto dir = fs::path(st.args.settings.output_dir) / st.run;
  try {
    fs::create_directories(dir);
    write_platform_csv((dir / "metrics.csv").string(), st.epochs.all_reports());
    write_cluster_csv((dir / "cluster.csv").string(), st.epochs.evaluated_epochs());
  } catch (const std::exception& e) {
    if (!st.tables_failed)
      spdlog::error("cannot write the run's tables in {}: {}", dir.string(), eg::describe(e));
    st.tables_failed = true;
  }
}

/// Sends the run state to the node, which keeps it in every node's store,
/// and writes the run directory's tables.
void save_run_state(self_ptr self) {
  auto& st = self->state;
  storage::run_state r{st.args.fingerprint, st.run, st.finished, st.epochs.evaluated_epochs(),
                       {}, st.started_unix, st.norm_text};
  for (auto& report : st.epochs.all_reports())
    r.reports.push_back(storage::encode_report(report, st.args.settings.cluster_id));
  self->send(st.args.node, run_atom::value, storage::frame_run_state(r));
  write_tables(self);
}

/// The rest of the run directory at the run's end (save_run_state wrote
/// the tables): the averaged model (state dict and TorchScript) and the
/// cluster file.
void write_outputs(self_ptr self) {
  auto& st = self->state;
  namespace fs = std::filesystem;
  auto dir = fs::path(st.args.settings.output_dir) / st.run;
  try {
    fs::create_directories(dir);
    const auto& data = st.args.data;
    auto model = learning::make_classifier(
      st.args.settings.model, st.args.settings.seed,
      learning::model_shape{data.shape, static_cast<int64_t>(data.classes.size())});
    if (!st.averaged_model->empty())
      learning::load_model(*model, *st.averaged_model);
    learning::write_state_dict(*model, (dir / "model.pt").string());
    // The same model for Python with the normalisation built in:
    // torch.jit.load(path)(images) gives the class scores (docs/MODELS.md).
    try {
      learning::write_torchscript(*model, data.norm, data.classes,
                                  (dir / "model_scripted.pt").string());
    } catch (const std::exception& e) {
      spdlog::error("cannot write the TorchScript model: {}", eg::describe(e));
    }
    std::ofstream((dir / "config.toml").string()) << st.args.settings.cluster_file;
    spdlog::info("run directory: {}", dir.string());
  } catch (const std::exception& e) {
    spdlog::error("cannot write the run directory {}: {}", dir.string(), eg::describe(e));
  }
}

void finish(self_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  if (st.args.interactive)
    std::fputc('\n', stderr);
  save_run_state(self);
  write_outputs(self);
  for (auto& name : st.epochs.live())
    self->send(st.handles[name].platform, done_atom::value, st.run);
  self->send(st.args.node, done_atom::value, messages::role::balancer, std::string{}, st.run);
}

/// The cluster's normalisation, fixed for the run: the one a continued run
/// used (`saved`), else every joined node's data sums combined (no sample
/// leaves its node). The exported model carries it; every platform gets it
/// before each plan, every tester with each model.
void decide_normalisation(self_ptr self, const std::string& saved) {
  auto& st = self->state;
  if (!saved.empty()) {
    try {
      st.args.data.norm = data::parse_normalisation(saved);
      st.norm_text = saved;
      return;
    } catch (const data::data_error& e) {
      spdlog::warn("balancer: the run's saved normalisation is unusable ({}): combining the "
                   "nodes' statistics again",
                   e.what());
    }
  }
  if (st.node_stats.empty())
    return;  // none announced: every node keeps its own
  data::moments all;
  std::string nodes;
  for (auto& [node, m] : st.node_stats) {
    all += m;
    nodes += (nodes.empty() ? "" : ", ") + node;
  }
  st.args.data.norm = all.finish();
  st.norm_text = data::to_text(st.args.data.norm);
  if (st.node_stats.size() > 1)
    spdlog::info("balancer: the data's normalisation combined from the statistics of nodes {}",
                 nodes);
}

void start(self_ptr self) {
  auto& st = self->state;
  if (st.started)
    return;
  st.started = true;
  st.last_line = clock::now();
  st.epochs.start(st.last_line);
  uint32_t next = 0;
  auto& resume = st.args.resume;
  const auto expected = st.epochs.settings().expected.size();
  if (resume)
    st.members_changed = true;  // the platforms' weights are what they kept
  if (resume && !resume->run.empty()) {
    st.run = resume->run;
    st.started_unix = resume->started_unix;
    std::vector<std::string> unusable;
    next = st.epochs.resume(*resume, st.args.settings.cluster_id, unusable);
    for (auto& problem : unusable)
      spdlog::warn("balancer: a saved report is unusable: {}", problem);
    spdlog::info("balancer: continuing run {} at epoch {}/{} with {} of {} platforms", st.run,
                 next + 1, st.last_epoch() + 1, st.epochs.up(), expected);
  } else {
    st.run = new_run_name(st.args.settings.cluster_id);
    st.started_unix = storage::unix_now();
    if (resume)  // a successor with no saved state (the run's first epoch was not over)
      spdlog::info("balancer: starting run {} with {} of {} platforms", st.run, st.epochs.up(),
                   expected);
    else
      spdlog::info("{} of {} platforms joined; training run {} ({} {}, {} epochs)",
                   st.epochs.platforms().size(), expected, st.run,
                   st.args.settings.strategy.name,
                   config::to_string(st.args.settings.strategy.schedule),
                   st.last_epoch() + 1);
    resume.reset();
  }
  decide_normalisation(self, resume ? resume->norm : std::string{});
  save_run_state(self);
  self->delayed_send(self, defaults::progress_interval, tick_atom::value);
  if (next > st.last_epoch()) {
    finish(self);
    return;
  }
  send_plan(self, next);
}


// -- inspection console -------------------------------------------------------------

/// Sends a control command (pause, resume, checkpoint) to every live
/// platform.
inspection::answer console_control(self_ptr self, messages::verb what) {
  auto& st = self->state;
  if (st.finished)
    return {false, "the run is over"};
  auto live = st.epochs.live();
  for (auto& name : live)
    console_send(self, name, st.handles[name].platform, what);
  auto text = st.console.command(what, live, st.epochs, clock::now());
  spdlog::info("balancer: console: {}", text);
  return {true, text};
}

caf::result<std::string> console_command(self_ptr self, const control& c,
                                         const std::string& via) {
  auto& st = self->state;
  switch (c.verb) {
    case messages::verb::snapshot: {
      // Predicted throughputs asked now, of every live platform's predictor.
      auto rp = self->make_response_promise<std::string>();
      gather_predictions(
        self, defaults::console_prediction_timeout,
        [self, rp, via](std::map<std::string, prediction>& predictions) mutable {
          auto& st = self->state;
          inspection::run_status run{st.run, st.started, st.finished,
                                     st.started ? st.epochs.elapsed(clock::now()) : 0.0};
          rp.deliver(inspection::to_json(inspection::console_snapshot(
            st.args.settings.layout, st.epochs, st.console, run, predictions, via)));
        });
      return rp;
    }
    case messages::verb::history:
      if (!st.epochs.expects(c.argument))
        return make_error(ec::unknown_platform, "no platform named '" + c.argument + "'");
      return inspection::to_json(inspection::history_of(c.argument, st.epochs.all_reports()));
    case messages::verb::pause:
    case messages::verb::resume:
      if (via == "majority") {  // (node_roles.cpp: its node lost or regained a majority)
        st.minority = c.verb == messages::verb::pause;
        auto answer = inspection::to_json(console_control(self, c.verb));
        if (!st.minority && !st.finished)
          check_epochs(self);  // what came in while it was paused
        return answer;
      }
      return inspection::to_json(console_control(self, c.verb));
    case messages::verb::checkpoint:
      return inspection::to_json(console_control(self, c.verb));
    default:
      return make_error(ec::bad_request, std::string{"the console cannot ask for "}
                                           + messages::to_string(c.verb));
  }
}

// -- joins --------------------------------------------------------------------------

/// Why platform `name` may not join the run ("" when it may): one model
/// for the whole cluster, so a platform whose data has another shape or
/// other classes cannot gossip with the others, nor one whose node runs
/// another model, strategy or run.
std::string refusal_of(self_ptr self, const std::string& data, const std::string& run) {
  auto& st = self->state;
  const auto ours = data::signature(st.args.data);
  if (!data.empty() && data != ours)
    return "its data is " + data + ", the cluster's (this balancer's) is " + ours;
  return config::join_settings_differences(st.args.settings.join_settings, run);
}

/// Refuses platform `name` of `node`: the run stops expecting it (it starts
/// or goes on with the others), and the platform's node hears why, which
/// stops it (exit code 2).
/// The barrier stops expecting platform `name` of `node` (`said`: how the
/// log line begins); said once per reason.
void stop_expecting(self_ptr self, const std::string& name, const std::string& node,
                    const std::string& why, const std::string& said) {
  auto& st = self->state;
  if (!st.epochs.refuse(name, why))
    return;
  spdlog::error("balancer: {}: {}; the run goes on without it", said, why);
  st.console.refused(name, node, why);
}

void refuse(self_ptr self, const std::string& name, const std::string& node,
            const platform_actor& handle, const std::string& why) {
  auto& st = self->state;
  stop_expecting(self, name, node, why, "refused platform " + name + " of node " + node);
  self->request(handle, defaults::control_timeout, control_atom::value,
                control{messages::verb::refuse, why})
    .then([](bool) {},
          [self, name](caf::error& err) {
            spdlog::warn("balancer: platform {} was not told of its refusal: {}", name,
                         self->system().render(err));
          });
  if (!st.started && st.epochs.has_quorum())
    start(self);
}

/// Node `node` could not start (its own data is unusable): its platforms
/// that are not up are refused as at join.
void node_cannot_start(self_ptr self, const std::string& node,
                       const std::vector<std::string>& platforms, const std::string& why) {
  auto& st = self->state;
  if (st.finished)
    return;
  for (auto& name : platforms) {
    auto* known = st.epochs.find(name);
    if (known && known->up)
      continue;  // (it is up: a platform of that name that did start)
    if (st.epochs.expects(name) || st.epochs.refused().count(name))
      stop_expecting(self, name, node, why,
                     "node " + node + " could not start, platform " + name + " is refused");
  }
  if (!st.started && st.epochs.has_quorum())
    start(self);
}

void joined(self_ptr self, const std::string& name, const std::string& node, caf::actor handle,
            caf::actor predictor, const std::string& data, uint64_t samples,
            const std::string& stats, const std::string& run) {
  auto& st = self->state;
  const bool refused_before = st.epochs.refused().count(name) > 0;
  if (!st.epochs.expects(name) && !refused_before) {
    spdlog::warn("balancer: platform '{}' of node '{}' is not in the cluster file; ignored", name,
                 node);
    return;
  }
  if (auto why = refusal_of(self, data, run); !why.empty()) {
    refuse(self, name, node, caf::actor_cast<platform_actor>(handle), why);
    return;
  }
  if (refused_before) {  // its node was set right and started again
    st.epochs.expect(name);
    spdlog::info("balancer: platform {} of node {} was refused before; its data and settings "
                 "are the cluster's now",
                 name, node);
  }
  if (!stats.empty() && !st.node_stats.count(node)) {
    try {
      auto m = data::parse_moments(stats);
      const auto channels = static_cast<size_t>(st.args.data.shape.channels);
      if (channels > 0 && m.sum.size() != channels)
        throw data::data_error("sums of " + std::to_string(m.sum.size()) +
                               " channels for data of " + st.args.data.shape.to_string());
      st.node_stats[node] = std::move(m);
    } catch (const data::data_error& e) {
      spdlog::warn("balancer: node {}'s data statistics are left out of the normalisation: {}",
                   node, e.what());
    }
  }
  auto h = caf::actor_cast<platform_actor>(handle);
  // The same platform again: nothing new while it is up; after it was down
  // (its node froze past cluster.peer_timeout and woke up) it rejoins like a
  // restarted one.
  auto* entry = st.epochs.find(name);
  if (entry && entry->up && st.handles[name].platform == h)
    return;
  self->monitor(h);
  st.handles[name] = {h, caf::actor_cast<predictor_actor>(predictor)};
  const bool running = st.started && !st.finished;
  auto j = st.epochs.join(name, node, running, samples);
  st.console.joined(name, node, j.again);
  if (st.console.paused)  // the cluster is paused: so is a platform that joins now
    console_send(self, name, h, messages::verb::pause);
  if (running) {
    // Joins a run in progress (a restarted node, a node that joined the
    // cluster): it takes part from the next epoch (synchronous schedule), or
    // at once with the epoch the others are in (asynchronous), from the
    // averaged model unless it trained already.
    st.members_changed = true;
    if (!st.latest_model.empty())
      self->send(h, adopt_atom::value, st.latest_model);
    if (j.plan) {
      if (!st.norm_text.empty())
        self->send(h, norm_atom::value, st.norm_text);
      self->send(h, plan_atom::value, *j.plan);
    }
    spdlog::info("balancer: platform {} {} from node {}; training from epoch {}", name,
                 j.again ? "is back" : "joined", node, j.first_epoch + 1);
    return;
  }
  spdlog::info("balancer: platform {} joined from node {} ({}/{})", name, node,
               st.epochs.platforms().size(), st.epochs.settings().expected.size());
  if (!st.started && st.epochs.has_quorum())
    start(self);
}

/// A monitored platform is down: it holds no epoch back any more; when every
/// platform left on its own, the run ends.
void platform_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto& [name, h] : st.handles)
    if (h.platform.address() == dm.source && st.epochs.down(name)) {
      auto& node = st.epochs.find(name)->node;
      st.members_changed = true;
      // A platform that ended on its own (its model kept running away)
      // exits normally, which CAF words as "none".
      const auto why = dm.reason ? caf::to_string(dm.reason) : std::string("it left the run");
      if (!dm.reason)
        st.left.insert(name);
      st.console.down(name, node, why);
      if (!st.finished)
        spdlog::warn("balancer: platform {} on node {} is down ({}); {} platforms left", name,
                     node, why, st.epochs.up());
      // Whatever is asked of it is not waited for any longer.
      for (auto& w : std::vector<std::weak_ptr<pending_gather>>(st.gathers))
        if (auto g = w.lock())
          g->lost(name);
    }
  // Every platform left on its own: none will come back (a node that
  // died may be started again; a platform that left stays gone), and an
  // epoch with nobody to train it would be waited for forever.
  if (!st.finished && st.epochs.up() == 0 && !st.handles.empty() &&
      std::all_of(st.handles.begin(), st.handles.end(),
                  [&](const auto& h) { return st.left.count(h.first) > 0; })) {
    spdlog::error("balancer: every platform left the run (their models kept running away "
                  "after train.max_rollbacks rollbacks; each one's log says why): the run "
                  "ends here, a smaller train.lr may train");
    finish(self);
    return;
  }
  if (!st.finished)
    check_epochs(self);
}

balancer_actor::behavior_type balancer(self_ptr self, balancer_args args) {
  auto& st = self->state;
  st.epochs = epoch_barrier{args.settings.barrier};
  st.evaluator = caf::actor_cast<caf::actor>(spawn_evaluator(
    self->system(), {args.settings.model, args.settings.seed,
                     learning::model_shape{args.data.shape,
                                           static_cast<int64_t>(args.data.classes.size())},
                     st.averaged_model}));
  self->link_to(st.evaluator);
  st.args = std::move(args);
  if (st.args.resume) {
    // Continuing a run: platforms that do not join within a few seconds
    // (their node is down) do not hold it back; they join again later.
    self->delayed_send(self, defaults::resume_grace, start_atom::value);
  }
  self->set_down_handler([self](const caf::down_msg& dm) { platform_down(self, dm); });
  return {
    [self](failed_atom, const std::string& node, const std::string& why) {
      self->state.console.store_failed(node, why);
    },
    [self](withdraw_atom, const std::string& node, const std::vector<std::string>& platforms,
           const std::string& why) { node_cannot_start(self, node, platforms, why); },
    [self](server_atom, const std::string& node) { self->state.console.server_at(node); },
    [self](member_atom, const std::string& node, const std::string& host, uint16_t port,
           const std::vector<std::string>& platforms) {
      auto& st = self->state;
      st.args.settings.layout.joined({node, host, port, platforms});
      for (auto& p : platforms)
        if (st.epochs.expect(p))
          spdlog::info("balancer: node {} joined the cluster; its platform {} joins the run "
                       "when it is up",
                       node, p);
    },
    [self](testers_atom, const std::vector<std::string>& nodes,
           const std::vector<caf::actor>& testers, const std::vector<uint64_t>& samples) {
      auto& st = self->state;
      st.testers.clear();
      for (size_t i = 0; i < nodes.size() && i < testers.size() && i < samples.size(); ++i)
        if (testers[i] && samples[i] > 0) {
          st.testers[nodes[i]] = {caf::actor_cast<tester_actor>(testers[i]), samples[i]};
          st.untested.erase(nodes[i]);  // said again if it goes
        }
    },
    [self](join_atom, const std::string& name, const std::string& node, caf::actor handle,
           caf::actor predictor, const std::string& data, uint64_t samples,
           const std::string& stats, const std::string& run) {
      joined(self, name, node, handle, predictor, data, samples, stats, run);
    },
    [self](report_atom, epoch_report& r) {
      auto& st = self->state;
      const auto now = clock::now();
      if (!st.epochs.record(r, now))
        return;  // sent again (a balancer took over): already counted
      st.console.reported(r);
      if (auto wait = st.epochs.arm_deadline(r, now))
        self->delayed_send(self, micros(*wait), deadline_atom::value, r.epoch);
      check_epochs(self);
    },
    [self](weights_atom, held_weights& model) { lane_model_arrived(self, std::move(model)); },
    [self](progress_atom, const epoch_report& r) {
      self->state.epochs.progress(r);
      self->state.console.restoring.erase(r.platform);
    },
    [self](tick_atom) {
      auto& st = self->state;
      if (st.finished)
        return;
      expire_lane_models(self);
      if (st.args.interactive) {
        std::fprintf(stderr, "\r\033[K%s", st.epochs.progress_line(clock::now()).c_str());
        std::fflush(stderr);
      } else if (clock::now() - st.last_line >= defaults::progress_log_interval) {
        st.last_line = clock::now();
        spdlog::info("{}", st.epochs.progress_line(clock::now()));
      }
      self->delayed_send(self, defaults::progress_interval, tick_atom::value);
    },
    [self](start_atom) {
      if (self->state.epochs.platforms().empty())  // none joined yet: later
        return self->delayed_send(self, defaults::progress_interval, start_atom::value);
      start(self);
    },
    [self](deadline_atom, uint32_t epoch) { deadline_passed(self, epoch); },
    [self](inspect_atom, const control& command, const std::string& via) {
      return console_command(self, command, via);
    },
  };
}

} // namespace balancer_parts

using namespace balancer_parts;

balancer_settings balancer_settings::of(const config::cluster_config& cluster,
                                        std::map<std::string, uint64_t> shard_sizes) {
  balancer_settings s;
  s.cluster_id = cluster.id;
  s.output_dir = cluster.output_dir;
  s.model = cluster.train.model;
  s.seed = cluster.seed;
  s.strategy = cluster.strategy;
  s.barrier = barrier_settings::of(cluster);
  s.average_by_rate = cluster.strategy.edgegossip() && cluster.strategy.push_sum()
                      && cluster.edgegossip.merge == config::merge_rule::rate;
  s.barrier.shard_sizes = std::move(shard_sizes);
  s.layout = inspection::cluster_layout::of(cluster);
  auto shown = cluster;
  if (!shown.secret.empty())
    shown.secret = "(not written)";  // run directories get copied around
  s.cluster_file = config::to_toml(shown);
  s.join_settings = config::join_settings(cluster);
  return s;
}

double model_weight(const balancer_settings& s, double gossip_weight, double points) {
  if (!s.strategy.push_sum())
    return points;
  return s.average_by_rate ? gossip_weight * points : gossip_weight;
}

balancer_actor spawn_balancer(caf::actor_system& sys, balancer_args args) {
  return census::counted(sys.spawn(balancer, std::move(args)), "balancer");
}

} // namespace eg::actors
