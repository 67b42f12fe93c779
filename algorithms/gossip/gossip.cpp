#include "algorithms/gossip/gossip.hpp"
#include "common/error.hpp"
#include "models/serialize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <torch/torch.h>

#include <stdexcept>
#include <utility>

namespace eg::learning {

gosgd::gosgd(double initial_weight, double exchange_probability)
    : weight_(initial_weight), configured_p_(exchange_probability), p_(exchange_probability) {
  if (!(initial_weight > 0))
    throw argument_error("gosgd: initial weight must be positive");
  if (!(exchange_probability >= 0 && exchange_probability <= 1))
    throw argument_error("gosgd: exchange probability " +
                                std::to_string(exchange_probability) + " is not in [0, 1]");
}

std::vector<double> equal_split(size_t targets) {
  return std::vector<double>(targets, 1.0 / static_cast<double>(targets + 1));
}

rounds_split split_rounds(const std::vector<std::vector<std::string>>& rounds) {
  rounds_split out;
  double kept = 1;
  for (const auto& round : rounds) {
    // Past a millionth kept, further rounds would move no weight worth the
    // rounding of 1 - (what is given).
    if (round.empty() || kept < 1e-6)
      continue;
    const double each = kept / static_cast<double>(round.size() + 1);
    for (const auto& peer : round) {
      auto at = std::find(out.peers.begin(), out.peers.end(), peer);
      if (at == out.peers.end()) {
        out.peers.push_back(peer);
        out.fractions.push_back(each);
      } else {
        out.fractions[static_cast<size_t>(at - out.peers.begin())] += each;
      }
    }
    kept = each;
  }
  return out;
}

namespace {

/// Rates of a merge by rate: positive and finite, or argument_error.
void check_rates(const char* who, double own_rate, double received_rate) {
  if (!(own_rate > 0) || !std::isfinite(own_rate) || !(received_rate > 0)
      || !std::isfinite(received_rate))
    throw argument_error(std::string(who) + "::merge: rates " + std::to_string(own_rate) + " and "
                         + std::to_string(received_rate) + " (each must be positive)");
}

/// A split's fractions, each in (0, 1) and their sum below 1: what it
/// gives away, or argument_error.
double checked_split(const std::vector<double>& split) {
  double given = 0;
  for (double f : split) {
    if (!(f > 0 && f < 1))
      throw argument_error("gossip: a share of " + std::to_string(f) + " of the weight");
    given += f;
  }
  if (!(given < 1))
    throw argument_error("gossip: shares adding up to " + std::to_string(given) +
                         " of the weight (below 1: some is kept)");
  return given;
}

/// Checks a received model against `params` and its weight, naming the
/// strategy in what it throws.
void check_received(const char* who, const std::vector<torch::Tensor>& params,
                    const std::vector<torch::Tensor>& received, double received_weight) {
  const std::string w = who;
  if (params.size() != received.size())
    throw mismatch_error(w + "::merge: received " + std::to_string(received.size()) +
                                " tensors, the model has " + std::to_string(params.size()));
  if (!(received_weight > 0) || !std::isfinite(received_weight))
    throw mismatch_error(w + "::merge: received weight must be positive");
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].sizes().equals(received[i].sizes()))
      throw mismatch_error(w + "::merge: tensor " + std::to_string(i) +
                                  " has another shape than the model's");
  // A model that ran away (NaN or infinity) would spread to every platform
  // that merged it, and from them to the rest.
  if (auto i = first_non_finite(received))
    throw mismatch_error(w + "::merge: tensor " + std::to_string(*i) +
                         " holds a value that is not a finite number (the sender's model ran "
                         "away)");
}

/// params <- keep * params + take * received, in place.
void mix(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& received,
         double keep, double take) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i)
    params[i].mul_(keep).add_(received[i], take);
}

} // namespace

void gosgd::merge(const std::vector<torch::Tensor>& params,
                  const std::vector<torch::Tensor>& received, double received_weight,
                  double own_rate, double received_rate) {
  check_received("gosgd", params, received, received_weight);

  if (!(own_rate > 0) || !(received_rate > 0) || !std::isfinite(own_rate) ||
      !std::isfinite(received_rate))
    throw mismatch_error("gosgd::merge: rates must be positive");
  const double total = weight_ + received_weight;
  const double mine = weight_ * own_rate, theirs = received_weight * received_rate;
  mix(params, received, mine / (mine + theirs), theirs / (mine + theirs));
  weight_ = total;
}

void gosgd::scale_exchange(double factor) {
  if (!(factor > 0))
    throw argument_error("gosgd: exchange scale " + std::to_string(factor) +
                                " is not positive");
  p_ = std::min(1.0, configured_p_ * factor);
}

std::vector<send_order> gosgd::after_step(const std::vector<torch::Tensor>&,
                                          const std::vector<double>& split, std::mt19937_64& rng) {
  const size_t targets = split.size();
  if (targets == 0 || !std::bernoulli_distribution(p_)(rng))
    return {};
  size_t peer = 0;
  if (targets > 1)
    peer = std::uniform_int_distribution<size_t>(0, targets - 1)(rng);
  // Half the weight travels with the copy, so the total weight stays 1.
  weight_ /= 2;
  return {send_order{peer, weight_}};
}

push_sum::push_sum(double initial_weight) : weight_(initial_weight) {
  if (!(initial_weight > 0) || !std::isfinite(initial_weight))
    throw argument_error("push-sum: initial weight must be positive");
}

void push_sum::set_weight(double w) {
  if (!(w > 0) || !std::isfinite(w))
    throw argument_error("push-sum: weight " + std::to_string(w) + " is not positive");
  weight_ = w;
}

void push_sum::merge(const std::vector<torch::Tensor>& params,
                     const std::vector<torch::Tensor>& received, double received_weight,
                     double own_rate, double received_rate) {
  check_received("push-sum", params, received, received_weight);
  check_rates("push-sum", own_rate, received_rate);
  const double mine = weight_ * own_rate, theirs = received_weight * received_rate;
  mix(params, received, mine / (mine + theirs), theirs / (mine + theirs));
  weight_ += received_weight;
}

std::vector<send_order> push_sum::after_step(const std::vector<torch::Tensor>&,
                                             const std::vector<double>& split, std::mt19937_64&) {
  // Column-stochastic: (x, w) split in shares (d + 1 equal ones for one
  // round), the rest kept. z = x / w is the same in every share, so the
  // parameters stay as they are. A weight halved some thousand times
  // without a share coming back would reach 0: below the smallest normal
  // double it is kept whole instead (a column of the identity, still
  // column-stochastic).
  const double given = checked_split(split);
  const double kept = weight_ * (1 - given);
  if (split.empty() || !(kept >= std::numeric_limits<double>::min()))
    return {};
  std::vector<send_order> orders;
  orders.reserve(split.size());
  for (size_t i = 0; i < split.size(); ++i)
    orders.push_back({i, weight_ * split[i]});
  weight_ = kept;
  return orders;
}

gossip_payload gossip_strategy::payload(const send_order&, const std::string&,
                                       const std::vector<std::string>& names,
                                       const std::vector<torch::Tensor>& params) {
  gossip_payload p;
  p.tensors = to_views(names, params);
  return p;
}

void gossip_strategy::merge_sparse(const std::vector<torch::Tensor>&, const std::string&,
                                   const messages::weights&, double, double) {
  throw mismatch_error(name() + " merges whole models; a sparse message was refused");
}

void gossip_strategy::withdraw(const std::vector<torch::Tensor>&, const std::string& to,
                               const messages::weights& message) {
  const double s = message.gossip_weight;
  if (!(s >= 0) || !std::isfinite(s))
    throw mismatch_error(name() + ": a message to " + to + " came back with weight " +
                         std::to_string(s));
  if (s > 0)
    set_weight(weight() + s);
}

sparse_push::sparse_push(flat_layout layout, sparse_push_options options, double initial_weight)
    : options_(options), weight_(initial_weight), generation_(std::random_device{}() | 1),
      model_copies_(layout, options.density, options.values) {
  generation_ = (generation_ << 32) ^ std::random_device{}();
  if (!(initial_weight > 0) || !std::isfinite(initial_weight))
    throw argument_error("sparse-push: initial weight must be positive");
  if (!(options.consensus_step > 0 && options.consensus_step <= 1))
    throw argument_error("sparse-push: consensus step " +
                                std::to_string(options.consensus_step) + " is not in (0, 1]");
  if (!(options.drift_memory >= 0 && options.drift_memory < 1))
    throw argument_error("scsp: drift memory " + std::to_string(options.drift_memory) +
                                " is not in [0, 1)");
  if (!(options.drift_gain >= 0) || !std::isfinite(options.drift_gain))
    throw argument_error("scsp: drift gain " + std::to_string(options.drift_gain) +
                                " is not a number of 0 or more");
}

void sparse_push::set_weight(double w) {
  if (!(w > 0) || !std::isfinite(w))
    throw argument_error("sparse-push: weight " + std::to_string(w) + " is not positive");
  weight_ = w;
}

void sparse_push::start(const std::vector<torch::Tensor>& params) {
  flatten_into(params, 1.0, z_);
  if (z_.numel() != model_copies_.layout().numel())
    throw mismatch_error("sparse-push: the parameters do not fit the layout");
  model_copies_.start(z_);
  if (options_.compensate) {
    correction_ = torch::zeros_like(z_);
    last_step_ = z_.clone();
    step_norm_ = 0;
  }
  out_.clear();
  in_.clear();
  requests_.clear();
}

void sparse_push::restored(const std::vector<torch::Tensor>& params) {
  flatten_into(params, 1.0, z_);
  if (options_.compensate && correction_.defined()) {
    // A checkpoint holds no correction: it starts again from 0, and the
    // jump to the restored model is no message's pull.
    correction_.zero_();
    last_step_.copy_(z_);
    step_norm_ = 0;
  }
}

void sparse_push::peers_changed(const std::vector<std::string>& live) {
  std::set<std::string> now(live.begin(), live.end());
  for (auto& p : now)
    if (!live_.count(p))
      if (auto e = out_.find(p); e != out_.end())
        e->second.keyframe = true;  // it was gone: its copy of our edge may be lost
  live_ = std::move(now);
}

void sparse_push::merge(const std::vector<torch::Tensor>&, const std::vector<torch::Tensor>&,
                        double, double, double) {
  throw mismatch_error(name() + " merges sparse messages; a whole model was refused");
}

void sparse_push::withdraw(const std::vector<torch::Tensor>& params, const std::string& to,
                           const messages::weights& message) {
  if (!z_.defined())
    throw std::logic_error("sparse-push: a message taken back before start");
  const double s = message.gossip_weight;
  if (!(s >= 0) || !std::isfinite(s))
    throw mismatch_error(name() + ": a message to " + to + " came back with weight " +
                         std::to_string(s));
  if (message.sparse.size() != 1)
    throw mismatch_error(name() + ": a message to " + to + " came back with " +
                         std::to_string(message.sparse.size()) + " sparse parts");
  auto part = decode(message.sparse[0], model_copies_.layout());
  if (message.generation != generation_)
    throw mismatch_error(name() + ": a message to " + to + " came back from another sender");
  auto e = out_.find(to);
  if (e == out_.end()) {  // the edges restarted since (start()): the weight alone
    weight_ += s;
    return;
  }
  auto& edge = e->second;
  torch::NoGradGuard no_grad;
  // The numerator comes back as it left, s times the edge's copy: exact
  // while no later message on the edge went before this one came back.
  if (s > 0) {
    flatten_into(params, 1.0, z_);
    const double keep = weight_ / (weight_ + s), take = s / (weight_ + s);
    z_.mul_(keep).add_(model_copies_.sent_copy(to), take);
    weight_ += s;
    unflatten_into(z_, 1.0, params);
  }
  if (message.keyframe && message.edge_seq == edge.keyframe_seq) {
    edge.keyframe = true;  // the receiver's copy never restarted: restart it again
  } else if (message.edge_seq > edge.keyframe_seq) {
    model_copies_.withdraw(to, part);
    ++edge.withdrawn;
  }
  // (A message older than the edge's last keyframe: that keyframe restarted
  // both copies without it.)
}

std::vector<std::string> sparse_push::keyframe_requests() {
  return std::exchange(requests_, {});
}

void sparse_push::keyframe_requested(const std::string& from) {
  if (auto e = out_.find(from); e != out_.end())
    e->second.keyframe = true;
}

void sparse_push::out_of_step_on(const std::string& from, in_edge& edge) {
  ++out_of_step_;
  if (edge.since_request++ % 16 == 0
      && std::find(requests_.begin(), requests_.end(), from) == requests_.end())
    requests_.push_back(from);
}

void sparse_push::merge_sparse(const std::vector<torch::Tensor>& params, const std::string& from,
                               const messages::weights& message, double own_rate,
                               double received_rate) {
  if (!z_.defined())
    throw std::logic_error("sparse-push: merge before start");
  if (message.sparse.size() != 1)
    throw mismatch_error(name() + " takes 1 sparse part a message, received " +
                                std::to_string(message.sparse.size()));
  if (!message.tensors.empty())
    throw mismatch_error(name() + ": a message with whole tensors beside sparse parts");
  // A share may be 0: a message that carried almost nothing of a lagging
  // copy moves no weight, but its part must still reach the copy.
  const double s = message.gossip_weight;
  if (!(s >= 0) || !std::isfinite(s))
    throw mismatch_error(name() + ": received weight must be a non-negative number");
  check_rates(name().c_str(), own_rate, received_rate);
  if (message.edge_seq == 0 || message.withdrawn >= message.edge_seq)
    throw mismatch_error(name() + ": message " + std::to_string(message.edge_seq) +
                         " on its edge with " + std::to_string(message.withdrawn) +
                         " taken back before it");
  // Everything checked before anything changes: a bad message changes nothing.
  auto model_part = decode(message.sparse[0], model_copies_.layout());

  // Is the message the next one on its edge? Its place among the messages
  // not taken back is seq - withdrawn.
  const uint64_t place = message.edge_seq - message.withdrawn;
  auto [it, unknown] = in_.try_emplace(from);
  auto& edge = it->second;
  if (!unknown && edge.generation == message.generation && !message.keyframe
      && message.edge_seq < edge.restart_seq) {
    // Sent before the keyframe that restarted the edge, which overtook it:
    // its part is in neither copy any more; its weight counts.
    weight_ += s;
    return;
  }
  bool fresh = false, in_step;
  if (unknown || edge.generation != message.generation) {
    edge.generation = message.generation;
    fresh = place == 1 && !message.keyframe;  // a sender that (re)started
    in_step = message.keyframe || fresh;
    edge.unexplained = 0;
    edge.restart_seq = 0;  // the numbers of another run of the sender's
  } else if (message.keyframe) {
    in_step = true;
    edge.unexplained = 0;
  } else if (!edge.valid) {
    in_step = false;
  } else if (place == edge.taken + 1) {
    in_step = true;
    edge.unexplained = 0;
  } else {
    // Later than the next: messages before it were taken back after it was
    // sent (it will not count them; the next ones will), or lost. A few in a
    // row are taken; more mean a loss. Earlier: out of order.
    in_step = place > edge.taken + 1 && ++edge.unexplained <= max_unexplained;
  }
  edge.valid = in_step;
  if (in_step) {
    edge.taken = message.keyframe || fresh ? place : edge.taken + 1;
    edge.since_request = 0;
    if (message.keyframe || fresh)
      edge.restart_seq = message.edge_seq;
  }

  torch::NoGradGuard no_grad;
  flatten_into(params, 1.0, z_);
  // By rate (push_sum::merge); a share of 0 takes nothing.
  const double mine = weight_ * own_rate, theirs = s * received_rate;
  const double keep = mine / (mine + theirs), take = theirs / (mine + theirs);
  if (in_step) {
    const auto& copy = model_copies_.receive(from, model_part, message.keyframe, fresh);
    // SCSP: a message that restarts its edge (a keyframe, or the first of a
    // restarted sender) moves z once, toward wherever that peer is now: no
    // drift to learn from, so the move is left out of the pull.
    const bool restarts = options_.compensate && (message.keyframe || fresh);
    if (restarts)
      last_step_.sub_(z_);
    // SCSP under rates other than 1: the pull counts push-sum's own move,
    // (w z + s c) / (w + s) - z, not the lean toward the platform that
    // trained more. That lean is progress, not drift, and it does not cancel
    // over the platforms: counted, it turned into steps toward the fast
    // platforms on every slow one, and the models ran away (edgegossip+scsp
    // on bench tta's skewed profile ended at chance accuracy in 3 seeds of 3).
    const double lean = weight_ + s > 0 ? take - s / (weight_ + s) : 0;
    if (options_.compensate && !restarts && lean != 0)  // last_step_ += lean (copy - z)
      last_step_.add_(copy, lean).sub_(z_, lean);
    z_.mul_(keep).add_(copy, take);
    if (restarts)
      last_step_.add_(z_);
    unflatten_into(z_, 1.0, params);
  } else {
    out_of_step_on(from, edge);  // the weight alone: as if merging a copy equal to z
  }
  weight_ += s;
}

std::vector<send_order> sparse_push::after_step(const std::vector<torch::Tensor>& params,
                                                const std::vector<double>& split,
                                                std::mt19937_64&) {
  checked_split(split);
  const size_t targets = split.size();
  if (!z_.defined())
    throw std::logic_error("sparse-push: step before start");
  torch::NoGradGuard no_grad;
  flatten_into(params, 1.0, scratch_);
  if (options_.compensate) {
    // k <- beta k - (1 - beta) g (z before this step - z after the last):
    // what the messages moved z by since the last step, and z <- z - k.
    const double beta = options_.drift_memory, c = (1 - beta) * options_.drift_gain;
    correction_.mul_(beta).add_(last_step_, c).sub_(z_, c);
    // |k| is held to the moving norm of the steps: a steady drift is part of
    // a step, and a transient (a peer back from a stale checkpoint) must not
    // turn into steps larger than the training's own.
    const double step = torch::dist(z_, scratch_).item<double>();
    step_norm_ = step_norm_ > 0 ? beta * step_norm_ + (1 - beta) * step : step;
    const double k = correction_.norm().item<double>();
    if (k > step_norm_)
      correction_.mul_(step_norm_ / k);
    scratch_.sub_(correction_);
    last_step_.copy_(scratch_);
    unflatten_into(scratch_, 1.0, params);
  }
  std::swap(z_, scratch_);
  // Each share is offered out of the weight held now; payload() takes them
  // off one by one, and what they add up to stays below it.
  std::vector<send_order> orders;
  for (size_t i = 0; i < targets; ++i) {
    const double share = options_.consensus_step * weight_ * split[i];
    if (!(share >= std::numeric_limits<double>::min()))
      return {};
    orders.push_back({i, share});
  }
  return orders;
}

// kept: keeping half of the removal ended 0.37 points further below SGP
// than keeping none on bench traffic (IID, density 0.005 every 2 steps, seed
// 1); keeping none would leave the local steps free to grow the residuals
// without a message ever shrinking them.
double sparse_push::share_bound(double w, double lacked, double left, double cross,
                                size_t others) {
  // E L e^2 + 2 (L + X) e + (L - R) <= -kept (R - L), i.e. a e^2 + b e + c <= 0
  // with c = -(1 - kept) (R - L) <= 0: e up to the larger root.
  const double removed = std::max(0.0, lacked - left);
  if (!(removed > 0))
    return 0;  // the message carried nothing: it may move no weight
  const double a = static_cast<double>(others + 1) * left, b = 2 * (left + cross),
               c = -(1 - kept) * removed;
  double e;
  if (a <= 1e-12 * removed) {  // nothing left: only the cross term limits it
    if (b <= 0)
      return w;
    e = -c / b;
  } else {
    e = (-b + std::sqrt(b * b - 4 * a * c)) / (2 * a);
  }
  if (!(e > 0) || !std::isfinite(e))
    return std::isinf(e) ? w : 0;
  return w * e / (1 + e);
}

gossip_payload sparse_push::payload(const send_order& order, const std::string& to,
                                    const std::vector<std::string>&,
                                    const std::vector<torch::Tensor>& params) {
  if (!z_.defined())
    throw std::logic_error("sparse-push: a payload before start");
  double s = order.weight;
  if (!(s > 0) || !(s < weight_))
    throw std::logic_error("sparse-push: a share of " + std::to_string(s) + " out of a weight of " +
                           std::to_string(weight_));
  torch::NoGradGuard no_grad;
  auto& edge = out_[to];
  gossip_payload p;
  p.edge_seq = ++edge.seq;
  p.generation = generation_;
  p.keyframe = edge.keyframe;
  p.withdrawn = edge.withdrawn;
  if (p.keyframe)
    edge.keyframe_seq = p.edge_seq;
  edge.keyframe = false;
  auto parts = std::make_shared<std::vector<encoded_part>>();
  double captured = 1;
  parts->push_back(model_copies_.send(to, z_, p.keyframe, &captured));
  // The share is bounded by what the copy lacks before and after this
  // message. A keyframe, or a message that left the copy lacking nothing
  // but the rounding of its sums (captured within 1e-4 of 1: at density 1
  // float32's sum of squares rarely comes out at exactly 1), lets the
  // whole share go: from so small a residual the bound came out 0, and a
  // message that carried the whole model moved no weight.
  double limit = weight_;
  if (!p.keyframe && captured < 1 - 1e-4) {
    const auto r = model_copies_.residuals_after(to, z_);
    const double lacked = r.left / (1 - captured);  // captured = (R - L) / R
    limit = share_bound(weight_, lacked, r.left, r.cross, r.others);
  }
  s = std::max(0.0, std::min(s, limit));
  p.weight = s;
  // The share leaves as s times the edge's copy (what the receiver merges),
  // so the numerators' sum is exact: w z <- w z - s z^, w <- w - s. What the
  // copy lacks of z stays here and goes with the next messages.
  const double keep = weight_ / (weight_ - s), give = s / (weight_ - s);
  z_.mul_(keep).sub_(model_copies_.sent_copy(to), give);
  weight_ -= s;
  unflatten_into(z_, 1.0, params);
  for (auto& part : *parts)
    p.sparse.push_back(part.view());
  p.hold = std::move(parts);
  return p;
}

config::registry<gossip_factory>& gossip_rules() {
  static config::registry<gossip_factory> r{"gossip strategy"};
  return r;
}

gossip_registration::gossip_registration(const std::string& name, config::strategy_traits traits,
                                         gossip_factory make) {
  if (traits.family == config::strategy_family::parameter_server)
    throw std::logic_error("strategy '" + name + "': a gossip rule for a parameter-server strategy");
  config::strategies().add(name, std::move(traits));
  gossip_rules().add(name, std::move(make));
}

std::unique_ptr<gossip_strategy> make_strategy(const std::string& name, int64_t platforms,
                                               double exchange_probability,
                                               const flat_layout& layout,
                                               const sparse_push_options& sparse) {
  if (platforms <= 0)
    throw argument_error("make_strategy: the number of platforms must be positive");
  return gossip_rules().at(name)({platforms, exchange_probability, layout, sparse});
}

namespace {

// The strategies of this file. GoSGD's rule also serves gosgd-async (no
// epoch barrier) and EdgeGossip (the balancer's plans on top).
std::unique_ptr<gossip_strategy> make_gosgd(const gossip_setup& s) {
  return std::make_unique<gosgd>(1.0 / static_cast<double>(s.platforms), s.exchange_probability);
}
std::unique_ptr<gossip_strategy> make_sparse_push(const gossip_setup& s, bool compensate) {
  auto o = s.sparse;
  o.compensate = compensate;
  return std::make_unique<sparse_push>(s.layout, o, 1.0);
}
using config::strategy_family;
const gossip_registration gosgd_strategy{
  "gosgd", {strategy_family::gossip, false, false, "GoSGD (Blot et al. 2016), epoch-synchronous"},
  make_gosgd};
const gossip_registration gosgd_async_strategy{
  "gosgd-async", {strategy_family::gossip, true, false, "GoSGD without the epoch barrier"},
  make_gosgd};
const gossip_registration edgegossip_strategy{
  "edgegossip",
  {strategy_family::gossip, false, true,
   "EdgeGossip (Han et al. 2021): GoSGD with the predictor, balancer and accuracy-aware trainer"},
  make_gosgd};
const gossip_registration sgp_strategy{
  "sgp", {strategy_family::push_sum, false, false, "Stochastic gradient push (Assran et al. 2019)"},
  [](const gossip_setup&) { return std::make_unique<push_sum>(1.0); }};
const gossip_registration sparse_push_strategy{
  "sparse-push",
  {strategy_family::push_sum, false, false, "Sparse-Push (Aketi et al. 2021): top-k push-sum",
   true},
  [](const gossip_setup& s) { return make_sparse_push(s, false); }};
const gossip_registration scsp_strategy{
  "scsp",
  {strategy_family::push_sum, false, false, "Sparse-Push with skew compensation", true},
  [](const gossip_setup& s) { return make_sparse_push(s, true); }};

} // namespace

namespace {

messages::dtype to_wire(torch::ScalarType t, const std::string& name) {
  switch (t) {
  case torch::kFloat32: return messages::dtype::float32;
  case torch::kFloat64: return messages::dtype::float64;
  case torch::kInt64: return messages::dtype::int64;
  case torch::kInt32: return messages::dtype::int32;
  case torch::kUInt8: return messages::dtype::uint8;
  default:
    throw mismatch_error("tensor '" + name + "': dtype " + std::string(c10::toString(t)) +
                                " cannot be sent");
  }
}

torch::ScalarType from_wire(messages::dtype t, const std::string& name) {
  switch (t) {
  case messages::dtype::float32: return torch::kFloat32;
  case messages::dtype::float64: return torch::kFloat64;
  case messages::dtype::int64: return torch::kInt64;
  case messages::dtype::int32: return torch::kInt32;
  case messages::dtype::uint8: return torch::kUInt8;
  }
  throw mismatch_error("tensor '" + name + "': unknown dtype " +
                              std::to_string(static_cast<int>(t)));
}

} // namespace

std::vector<messages::tensor_view> to_views(const std::vector<std::string>& names,
                                            const std::vector<torch::Tensor>& tensors) {
  if (names.size() != tensors.size())
    throw mismatch_error("to_views: " + std::to_string(names.size()) + " names for " +
                                std::to_string(tensors.size()) + " tensors");
  std::vector<messages::tensor_view> views;
  views.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous())
      throw mismatch_error("tensor '" + names[i] + "': not a contiguous CPU tensor");
    messages::tensor_view v;
    v.name = names[i];
    v.type = to_wire(t.scalar_type(), names[i]);
    v.shape.assign(t.sizes().begin(), t.sizes().end());
    v.data = t.data_ptr();
    v.bytes = t.nbytes();
    views.push_back(std::move(v));
  }
  return views;
}

std::vector<torch::Tensor> from_views(const std::vector<messages::tensor_view>& views,
                                      const std::vector<std::string>& names,
                                      const std::vector<torch::Tensor>& like) {
  if (views.size() != names.size() || views.size() != like.size())
    throw mismatch_error("from_views: received " + std::to_string(views.size()) +
                                " tensors, the model has " + std::to_string(like.size()));
  std::vector<torch::Tensor> out;
  out.reserve(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const auto& v = views[i];
    if (v.name != names[i])
      throw mismatch_error("tensor '" + names[i] + "': received '" + v.name +
                                  "' in its place");
    const auto type = from_wire(v.type, names[i]);
    if (type != like[i].scalar_type())
      throw mismatch_error("tensor '" + names[i] + "': dtype " +
                                  std::string(c10::toString(type)) + ", expected " +
                                  std::string(c10::toString(like[i].scalar_type())));
    if (!like[i].sizes().equals(v.shape))
      throw mismatch_error("tensor '" + names[i] + "': shape " +
                                  c10::str(c10::IntArrayRef(v.shape)) + ", expected " +
                                  c10::str(like[i].sizes()));
    const auto expected_bytes = static_cast<size_t>(like[i].numel()) * c10::elementSize(type);
    if (v.bytes != expected_bytes || (expected_bytes > 0 && !v.data))
      throw mismatch_error("tensor '" + names[i] + "': " + std::to_string(v.bytes) +
                                  " bytes, expected " + std::to_string(expected_bytes));
    // Merging only reads the received tensors, so the const buffer is safe.
    out.push_back(torch::from_blob(const_cast<void*>(v.data), v.shape, torch::dtype(type)));
  }
  return out;
}

std::vector<torch::Tensor> average(const std::vector<std::vector<torch::Tensor>>& models,
                                   const std::vector<double>& weights) {
  if (models.empty())
    throw argument_error("average: no models");
  if (!weights.empty() && weights.size() != models.size())
    throw argument_error("average: " + std::to_string(weights.size()) + " weights for " +
                                std::to_string(models.size()) + " models");
  double total = 0;
  for (double w : weights) {
    if (!(w >= 0) || !std::isfinite(w))
      throw argument_error("average: weight " + std::to_string(w) +
                                  " is not a finite non-negative number");
    total += w;
  }
  if (!weights.empty() && !(total > 0))
    throw argument_error("average: the weights are all 0");
  auto share = [&](size_t k) {
    return weights.empty() ? 1.0 / static_cast<double>(models.size()) : weights[k] / total;
  };
  const size_t n = models.front().size();
  for (const auto& m : models)
    if (m.size() != n)
      throw mismatch_error("average: the models have different numbers of tensors");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> mean;
  mean.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto sum = models.front()[i].detach().mul(share(0));
    for (size_t k = 1; k < models.size(); ++k) {
      if (!models[k][i].sizes().equals(sum.sizes()))
        throw mismatch_error("average: tensor " + std::to_string(i) +
                                    " has different shapes across models");
      sum.add_(models[k][i], share(k));
    }
    mean.push_back(sum);
  }
  return mean;
}

std::vector<torch::Tensor> average_by_class(const std::vector<std::vector<torch::Tensor>>& models,
                                            const std::vector<double>& weights,
                                            const std::vector<std::vector<double>>& class_weights,
                                            size_t output_tensors) {
  auto mean = average(models, weights);
  if (class_weights.size() != models.size())
    throw argument_error("average_by_class: " + std::to_string(class_weights.size()) +
                                " class weights for " + std::to_string(models.size()) + " models");
  const size_t classes = class_weights.front().size();
  for (const auto& w : class_weights) {
    if (w.size() != classes)
      throw mismatch_error("average_by_class: the models count different classes");
    for (double x : w)
      if (!(x >= 0) || !std::isfinite(x))
        throw argument_error("average_by_class: class weight " + std::to_string(x) +
                                    " is not a finite non-negative number");
  }
  const size_t n = mean.size();
  if (output_tensors > n)
    throw mismatch_error("average_by_class: the models have fewer tensors than the "
                                "output layer");
  torch::NoGradGuard no_grad;
  for (size_t i = n - output_tensors; i < n; ++i) {
    if (mean[i].dim() == 0 || mean[i].size(0) != static_cast<int64_t>(classes))
      throw mismatch_error("average_by_class: tensor " + std::to_string(i) + " has " +
                                  (mean[i].dim() ? std::to_string(mean[i].size(0)) : "no") +
                                  " rows, not one per class (" + std::to_string(classes) + ")");
    for (size_t c = 0; c < classes; ++c) {
      double total = 0;
      for (const auto& w : class_weights)
        total += w[c];
      if (!(total > 0))
        continue;  // no model trained class c: average()'s row stands
      auto row = mean[i].select(0, static_cast<int64_t>(c));
      row.zero_();
      for (size_t k = 0; k < models.size(); ++k)
        if (class_weights[k][c] > 0)
          row.add_(models[k][i].select(0, static_cast<int64_t>(c)), class_weights[k][c] / total);
    }
  }
  return mean;
}

} // namespace eg::learning
