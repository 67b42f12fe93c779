// `edgegossip bench NAME`: the command line of every benchmark, kept here so
// that adding a benchmark touches bench/ only.

#include "bench/bench.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

namespace eg::bench {

struct cli_state {
  options opt;
  tta_options tta_opt;
  std::string name;
};

std::function<int()> add_subcommand(CLI::App& app) {
  auto st = std::make_shared<cli_state>();
  auto* bench = app.add_subcommand("bench", "run a benchmark: tta (time to accuracy of GoSGD "
                                            "and EdgeGossip), framework");
  bench->add_option("name", st->name, "benchmark to run")
    ->required()
    ->check(CLI::IsMember({"tta", "framework"}));
  bench->add_option("-c,--config", st->tta_opt.config_file,
                    "tta: cluster file (default: 4 platforms, slowdowns 1 1 3 5)");
  bench->add_option("--target", st->tta_opt.target, "tta: target test accuracy (default 0.87)");
  bench->add_option("--epochs", st->tta_opt.epochs, "tta: epochs of every strategy (default 12)");
  bench->add_option("--strategies", st->tta_opt.strategies, "tta: strategies to compare");
  bench->add_option("--set", st->tta_opt.overrides,
                    "tta: override a key, e.g. --set cluster.seed=2");
  bench->add_option("--samples", st->opt.samples, "samples per measurement");
  bench->add_option("--threads", st->opt.threads, "cores to use (default: all)");
  bench->add_option("--data", st->opt.data_dir, "Fashion-MNIST directory");
  bench->add_option("--out", st->opt.out_dir, "directory for results and plots");
  return [st, bench]() -> int {
    if (!*bench)
      return -1;
    spdlog::set_pattern("[%H:%M:%S.%e] %l %v");
    spdlog::set_level(spdlog::level::warn);
    if (st->name == "tta")
      return tta(st->opt, st->tta_opt);
    return framework(st->opt);
  };
}

} // namespace eg::bench
