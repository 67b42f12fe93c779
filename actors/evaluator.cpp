#include "actors/evaluator.hpp"

#include "learning/dataset.hpp"
#include "learning/gossip.hpp"
#include "learning/model.hpp"
#include "learning/serialize.hpp"
#include "learning/trainer.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <limits>

namespace eg::actors {

evaluator_actor spawn_evaluator(caf::actor_system& sys, evaluator_args args) {
  struct state {
    evaluator_args args;
    std::shared_ptr<learning::classifier> model;
    std::vector<std::string> names;
    std::vector<torch::Tensor> like;
    bool class_rows = true;
  };
  auto st = std::make_shared<state>();
  st->model = learning::make_classifier(args.model, args.seed, args.shape);
  st->names = learning::parameter_names(*st->model);
  st->like = learning::parameters(*st->model);
  // The average by class needs the output layer last, a row per class (every
  // zoo model); a model scripted in Python may end otherwise.
  st->class_rows = st->like.size() >= 2;
  for (size_t i = st->like.size() >= 2 ? st->like.size() - 2 : 0; i < st->like.size(); ++i)
    st->class_rows = st->class_rows && st->like[i].dim() > 0 &&
                     st->like[i].size(0) == args.shape.classes;
  st->args = std::move(args);
  return sys.spawn([st]() -> evaluator_actor::behavior_type {
    return {
      [st](evaluate_atom, const std::vector<held_weights>& answers,
           const std::vector<double>& weights,
           const std::vector<std::vector<double>>& class_weights)
        -> caf::result<double, double, double> {
        std::vector<std::vector<torch::Tensor>> models;
        std::vector<double> samples;
        std::vector<std::vector<double>> classes;
        bool by_class = st->class_rows;
        for (size_t i = 0; i < answers.size(); ++i) {
          try {
            models.push_back(learning::from_views(answers[i].value.tensors, st->names, st->like));
          } catch (const std::exception& e) {
            spdlog::warn("balancer: ignoring weights of {} that cannot be averaged: {}",
                         answers[i].sender, e.what());
            continue;
          }
          samples.push_back(i < weights.size() ? weights[i] : 1.0);
          classes.push_back(i < class_weights.size() ? class_weights[i] : std::vector<double>{});
          by_class = by_class &&
                     classes.back().size() == static_cast<size_t>(st->args.shape.classes);
        }
        if (models.empty())
          return {0.0, 0.0, 0.0};
        // By points trained, and each class's output row by the points of
        // that class (learning::average_by_class).
        auto avg = by_class ? learning::average_by_class(models, samples, classes)
                            : learning::average(models, samples);
        {
          torch::NoGradGuard guard;
          for (size_t i = 0; i < avg.size(); ++i)
            st->like[i].copy_(avg[i]);
        }
        if (st->args.latest)
          *st->args.latest = learning::save_model(*st->model);
        const auto start = std::chrono::steady_clock::now();
        if (!st->args.test_set) {
          const double nan = std::numeric_limits<double>::quiet_NaN();
          return {nan, nan, 0.0};
        }
        auto eval = learning::evaluate(*st->model, *st->args.test_set);
        const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return {eval.loss, eval.accuracy, seconds};
      },
    };
  });
}

} // namespace eg::actors
