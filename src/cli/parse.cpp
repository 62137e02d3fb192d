// parse_command_line (command_line.h): walks the arguments over the flag table (flags.cpp), then checks
// what no single value shows (the data-parallel combinations) and fills the defaults that depend on the
// environment (the data dir under $HOME).
#include <cstdlib>

#include "cli/command_line.h"
#include "cli/flag_table.h"

namespace tinkerd::cli {

namespace {

// --dp, --dist-init, --rank and --world-size together; fills --world-size from --dp on rank 0.
Result<void> check_dist(dist::DistFlags & flags) {
    if (flags.dp > 1 && flags.rank == 0 && flags.init.empty()) {
        flags.world_size = flags.dp;  // the store path is made when the followers are started
        return {};
    }
    if (flags.dp > 1 && flags.rank == 0) {
        return invalid_argument(
            "--dp starts its own group on this machine; use --dist-init/--rank/--world-size "
            "for a group over several machines");
    }
    if (flags.world_size > 1 && flags.init.empty()) {
        return invalid_argument("--world-size > 1 needs --dist-init tcp://HOST:PORT");
    }
    if (flags.rank > 0 && flags.rank >= flags.world_size) {
        return invalid_argument("--rank must be below --world-size (got --rank " + std::to_string(flags.rank) +
                                " with --world-size " + std::to_string(flags.world_size) + ")");
    }
    return {};
}

bool is_help(const std::string & arg) {
    return arg == "-h" || arg == "--help";
}

// One `--flag VALUE` or `--flag=VALUE` at args[i]; advances i past what it used.
Result<void> parse_one(const std::vector<std::string> & args, size_t & i, Options & options) {
    std::string name = args[i];
    std::string value;
    const auto eq = name.find('=');
    const bool inline_value = name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
    }
    const FlagDef * flag = find_flag(name);
    if (flag == nullptr) {
        return invalid_argument("unknown flag '" + name + "'");
    }
    if (!inline_value) {
        if (i + 1 >= args.size() || find_flag(args[i + 1]) != nullptr) {
            return invalid_argument(name + " needs a value");
        }
        value = args[++i];
    }
    return flag->set(value, options);
}

}  // namespace

Result<Options> parse_command_line(const std::vector<std::string> & args) {
    Options options;
    for (const std::string & arg : args) {
        if (is_help(arg)) {
            options.help = true;
            return options;
        }
    }
    for (size_t i = 0; i < args.size(); ++i) {
        auto status = parse_one(args, i, options);
        if (!status.ok()) {
            return status.error();
        }
    }
    auto dist = check_dist(options.dist);
    if (!dist.ok()) {
        return dist.error();
    }
    if (options.data_dir.empty()) {
        const char * home = std::getenv("HOME");
        options.data_dir = std::string(home ? home : ".") + "/.local/share/tinkerd";
    }
    return options;
}

Result<Options> parse_command_line(int argc, const char * const * argv) {
    return parse_command_line(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
}

std::vector<FlagName> known_flags() {
    std::vector<FlagName> names;
    for (const FlagDef & flag : flag_table()) {
        names.push_back({flag.name, flag.internal});
    }
    return names;
}

}  // namespace tinkerd::cli
