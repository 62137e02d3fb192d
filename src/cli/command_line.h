// tinkerd's command line: parse_command_line reads the flags into Options and checks each value and their
// combinations; an error names the flag, what it takes and what it got. The usage text is in usage.h.
#pragma once

#include <string>
#include <vector>

#include "cli/options.h"
#include "common/status.h"

namespace tinkerd::cli {

// `args` without the program name: `--flag VALUE` or `--flag=VALUE`; -h / --help anywhere only sets
// Options::help. A flag given twice keeps its last value, except --model (repeatable).
Result<Options> parse_command_line(const std::vector<std::string> & args);
Result<Options> parse_command_line(int argc, const char * const * argv);

// Every flag parse_command_line knows; `internal` ones are set by rank 0 on the processes it starts
// (sampling replicas) and are not in the usage text.
struct FlagName {
    std::string name;
    bool internal = false;
};
std::vector<FlagName> known_flags();

}  // namespace tinkerd::cli
