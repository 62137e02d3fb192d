// The table of flags inside src/cli: each flag's name and the setter that checks one value and stores it in
// Options (flags.cpp); parse.cpp walks the command line over it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "common/status.h"

namespace tinkerd::cli {

struct FlagDef {
    std::string name;  // "--port"
    bool internal = false;
    std::function<Result<void>(const std::string & value, Options & options)> set;  // an error names the flag
};

const std::vector<FlagDef> & flag_table();
// nullptr for an unknown flag.
const FlagDef * find_flag(const std::string & name);

}  // namespace tinkerd::cli
