#pragma once
// Programs a node starts beside itself (stress-ng co-runners, cpulimit).
// No CAF, no torch.

#include <sys/types.h>

#include <string>
#include <vector>

namespace eg::actors {

/// Starts `args` (args[0] found on PATH, or a path) as a child process with
/// no signal blocked and SIGINT, SIGTERM and SIGHUP at their defaults: a
/// node blocks SIGINT and SIGTERM in its threads (its signal watcher takes
/// them) and a child inherits the mask across exec, so stress-ng started
/// without this ignored the node's SIGTERM and outlived it. With
/// `quiet_stdout` its standard output goes to /dev/null. Returns its pid;
/// throws std::runtime_error naming the program when it cannot be started.
pid_t spawn_child(const std::vector<std::string>& args, bool quiet_stdout = false);

} // namespace eg::actors
