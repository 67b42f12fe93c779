#pragma once
// `edgegossip launch`: every node of a cluster file as its own process on
// this machine, their output streamed with the node's name in front, and
// SIGINT / SIGTERM passed on to all of them.

#include <string>
#include <vector>

namespace eg::launcher {

/// Starts `program node --config <config> --node <name> <extra...>` for each
/// node name, streams their output, waits for all. Returns 0 when every
/// node exited 0, else the first non-zero exit code (128 + signal number for
/// a node killed by a signal).
int launch_nodes(const std::string& program, const std::string& config,
                 const std::vector<std::string>& nodes, const std::vector<std::string>& extra);

} // namespace eg::launcher
