#include "actors/balancer/evaluator.hpp"
#include "actors/census.hpp"
#include "common/error.hpp"

#include "actors/wire.hpp"
#include "models/dataset.hpp"
#include "algorithms/gossip/gossip.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "train/trainer.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <string>

namespace eg::actors {
namespace {

/// A model of the run's architecture that takes the values it is given:
/// the evaluator's average, a tester's copy of it.
struct model_slot {
  std::shared_ptr<learning::classifier> model;
  std::vector<std::string> names;
  std::vector<torch::Tensor> like;  ///< its parameters

  model_slot(const std::string& name, uint64_t seed, const learning::model_shape& shape)
      : model(learning::make_classifier(name, seed, shape)),
        names(learning::parameter_names(*model)),
        like(learning::parameters(*model)) {}

  void load(const std::vector<torch::Tensor>& values) {
    torch::NoGradGuard guard;
    for (size_t i = 0; i < values.size() && i < like.size(); ++i)
      like[i].copy_(values[i]);
  }
};

} // namespace

evaluator_actor spawn_evaluator(caf::actor_system& sys, evaluator_args args) {
  struct state : model_slot {
    using model_slot::model_slot;
    evaluator_args args;
    bool class_rows = true;
  };
  auto st = std::make_shared<state>(args.model, args.seed, args.shape);
  // The average by class needs the output layer last, a row per class (every
  // zoo model); a model scripted in Python may end otherwise.
  st->class_rows = st->like.size() >= 2;
  for (size_t i = st->like.size() >= 2 ? st->like.size() - 2 : 0; i < st->like.size(); ++i)
    st->class_rows = st->class_rows && st->like[i].dim() > 0 &&
                     st->like[i].size(0) == args.shape.classes;
  st->args = std::move(args);
  auto handle = sys.spawn([st]() -> evaluator_actor::behavior_type {
    return {
      [st](evaluate_atom, const std::vector<held_weights>& answers,
           const std::vector<double>& weights,
           const std::vector<std::vector<double>>& class_weights) -> held_weights {
        std::vector<std::vector<torch::Tensor>> models;
        std::vector<double> samples;
        std::vector<std::vector<double>> classes;
        bool by_class = st->class_rows;
        for (size_t i = 0; i < answers.size(); ++i) {
          try {
            models.push_back(learning::from_views(answers[i].value.tensors, st->names, st->like));
          } catch (const std::exception& e) {
            spdlog::warn("balancer: ignoring weights of {} that cannot be averaged: {}",
                         answers[i].sender, eg::describe(e));
            continue;
          }
          samples.push_back(i < weights.size() ? weights[i] : 1.0);
          classes.push_back(i < class_weights.size() ? class_weights[i] : std::vector<double>{});
          by_class = by_class &&
                     classes.back().size() == static_cast<size_t>(st->args.shape.classes);
        }
        if (models.empty())
          return {};
        // By points trained, and each class's output row by the points of
        // that class (learning::average_by_class).
        auto avg = by_class ? learning::average_by_class(models, samples, classes)
                            : learning::average(models, samples);
        st->load(avg);
        if (st->args.latest)
          *st->args.latest = learning::save_model(*st->model);
        held_weights out;
        out.sender = "average";
        out.value.gossip_weight = 1;
        out.value.tensors = learning::to_views(st->names, st->like);
        return messages::copy_held(out);
      },
    };
  });
  return census::counted(handle, "evaluator");
}

tester_actor spawn_tester(caf::actor_system& sys, tester_args args) {
  struct state : model_slot {
    using model_slot::model_slot;
    tester_args args;
  };
  auto st = std::make_shared<state>(args.model, args.seed, args.shape);
  st->args = std::move(args);
  auto handle = sys.spawn([st]() -> tester_actor::behavior_type {
    return {
      [st](test_atom, const held_weights& averaged,
           const std::string& norm) -> caf::result<double, uint64_t, uint64_t> {
        try {
          st->load(learning::from_views(averaged.value.tensors, st->names, st->like));
        } catch (const std::exception& e) {
          return make_error(ec::bad_request,
                            std::string("the averaged model does not fit this node's: ") +
                              e.what());
        }
        if (!norm.empty()) {
          // The cluster's normalisation: the test samples stay as they are
          // (shared), only what batches are normalised with changes.
          try {
            st->args.test_set =
              data::with_normalisation(st->args.test_set, data::parse_normalisation(norm));
          } catch (const data::data_error& e) {
            return make_error(ec::bad_request, std::string("the cluster's normalisation: ") +
                                                 e.what());
          }
        }
        auto eval = learning::evaluate(*st->model, *st->args.test_set);
        return {eval.loss * static_cast<double>(eval.samples),
                static_cast<uint64_t>(eval.correct), static_cast<uint64_t>(eval.samples)};
      },
    };
  });
  return census::counted(handle, "tester");
}

} // namespace eg::actors
