// The command line (command_line.h): defaults, every flag reaching its Options field, both value forms,
// errors that name the bad flag and value, the data-parallel combinations, and the usage text and
// README.md's flag table naming exactly the flags the parser knows.
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/command_line.h"
#include "cli/usage.h"

namespace tinkerd::cli {
namespace {

Options parse_ok(const std::vector<std::string> & args) {
    auto parsed = parse_command_line(args);
    EXPECT_TRUE(parsed.ok()) << parsed.error().message;
    return parsed.ok() ? *parsed : Options{};
}

std::string parse_error(const std::vector<std::string> & args) {
    auto parsed = parse_command_line(args);
    EXPECT_FALSE(parsed.ok()) << "accepted a bad command line";
    return parsed.ok() ? "" : parsed.error().message;
}

TEST(CommandLine, DefaultsWithoutFlags) {
    setenv("HOME", "/home/someone", 1);
    const Options o = parse_ok({});
    EXPECT_FALSE(o.help);
    EXPECT_TRUE(o.models.empty());
    EXPECT_EQ(o.host, "127.0.0.1");
    EXPECT_EQ(o.port, 8000);
    EXPECT_EQ(o.data_dir, "/home/someone/.local/share/tinkerd");
    EXPECT_EQ(o.dtype, "auto");
    EXPECT_EQ(o.device, "cpu");
    EXPECT_EQ(o.max_body_bytes, 256LL << 20);
    EXPECT_EQ(o.kv_cache_mib, 4096);
    EXPECT_EQ(o.dist.dp, 1);
    EXPECT_EQ(o.dist.world_size, 1);
    EXPECT_EQ(o.replicas.count, 0);
}

TEST(CommandLine, EveryFlagReachesItsField) {
    const Options o = parse_ok({"--model",
                                "a=/m/a",
                                "--model",
                                "Org/b",
                                "--host",
                                "0.0.0.0",
                                "--port",
                                "0",
                                "--data-dir",
                                "/d",
                                "--database",
                                "postgresql://u@h:5/db",
                                "--api-keys",
                                "/k",
                                "--dtype",
                                "bf16",
                                "--device",
                                "cuda:1",
                                "--threads",
                                "3",
                                "--io-threads",
                                "4",
                                "--session-timeout-seconds",
                                "1.5",
                                "--poll-timeout-seconds",
                                "2",
                                "--max-body-bytes",
                                "2048",
                                "--kv-cache-mib",
                                "5",
                                "--max-sampler-adapters",
                                "6",
                                "--seq-gap-timeout-seconds",
                                "7",
                                "--disk-reserve-mib",
                                "0",
                                "--header-timeout-seconds",
                                "8",
                                "--body-timeout-seconds",
                                "9",
                                "--max-connections",
                                "10",
                                "--snapshot-ttl-seconds",
                                "0",
                                "--snapshot-disk-mib",
                                "11",
                                "--max-metric-points",
                                "12",
                                "--max-event-streams",
                                "0",
                                "--dist-timeout-seconds",
                                "13",
                                "--dist-keepalive-seconds",
                                "0",
                                "--sampling-replicas",
                                "2"});
    ASSERT_EQ(o.models.size(), 2u);
    EXPECT_EQ(o.models[0], (std::pair<std::string, std::string>{"a", "/m/a"}));
    EXPECT_EQ(o.models[1], (std::pair<std::string, std::string>{"Org/b", ""}));
    EXPECT_EQ(o.host, "0.0.0.0");
    EXPECT_EQ(o.port, 0);
    EXPECT_EQ(o.data_dir, "/d");
    EXPECT_EQ(o.database, "postgresql://u@h:5/db");
    EXPECT_EQ(o.api_keys_file, "/k");
    EXPECT_EQ(o.dtype, "bf16");
    EXPECT_EQ(o.device, "cuda:1");
    EXPECT_EQ(o.threads, 3);
    EXPECT_EQ(o.io_threads, 4);
    EXPECT_DOUBLE_EQ(o.session_timeout_seconds, 1.5);
    EXPECT_DOUBLE_EQ(o.poll_timeout_seconds, 2);
    EXPECT_EQ(o.max_body_bytes, 2048);
    EXPECT_EQ(o.kv_cache_mib, 5);
    EXPECT_EQ(o.max_sampler_adapters, 6);
    EXPECT_DOUBLE_EQ(o.seq_gap_timeout_seconds, 7);
    EXPECT_EQ(o.disk_reserve_mib, 0);
    EXPECT_EQ(o.header_timeout_seconds, 8);
    EXPECT_EQ(o.body_timeout_seconds, 9);
    EXPECT_EQ(o.max_connections, 10);
    EXPECT_DOUBLE_EQ(o.snapshot_ttl_seconds, 0);
    EXPECT_EQ(o.snapshot_disk_mib, 11);
    EXPECT_EQ(o.max_metric_points, 12);
    EXPECT_EQ(o.max_event_streams, 0);
    EXPECT_DOUBLE_EQ(o.dist.timeout_seconds, 13);
    EXPECT_DOUBLE_EQ(o.dist.keepalive_seconds, 0);
    EXPECT_EQ(o.replicas.count, 2);
}

TEST(CommandLine, InlineValueAndLastOneWins) {
    const Options o = parse_ok({"--port=9000", "--model=n=/dir=x", "--threads", "2", "--threads=5"});
    EXPECT_EQ(o.port, 9000);
    ASSERT_EQ(o.models.size(), 1u);
    EXPECT_EQ(o.models[0].first, "n");
    EXPECT_EQ(o.models[0].second, "/dir=x");
    EXPECT_EQ(o.threads, 5);
}

TEST(CommandLine, HelpAnywhereWinsOverErrors) {
    EXPECT_TRUE(parse_ok({"--port", "x", "--help"}).help);
    EXPECT_TRUE(parse_ok({"-h"}).help);
}

TEST(CommandLine, BadNumbersNameTheFlagAndValue) {
    struct Case {
        std::vector<std::string> args;
        std::string expected;
    };
    const std::vector<Case> cases = {
        {{"--port", "abc"}, "--port must be an integer from 0 to 65535, got 'abc'"},
        {{"--port", "70000"}, "--port must be an integer from 0 to 65535, got '70000'"},
        {{"--port", "80x"}, "got '80x'"},
        {{"--port="}, "--port must be an integer"},
        {{"--kv-cache-mib", "0"}, "--kv-cache-mib must be an integer from 1 to"},
        {{"--kv-cache-mib", "99999999999999"}, "--kv-cache-mib must be an integer from 1 to"},
        {{"--max-body-bytes", "1023"}, "--max-body-bytes must be an integer >= 1024, got '1023'"},
        {{"--io-threads", "0"}, "--io-threads must be an integer >= 1"},
        {{"--threads", "-1"}, "--threads must be an integer >= 0"},
        {{"--header-timeout-seconds", "99999999999"}, "--header-timeout-seconds must be an integer from 1 to"},
        {{"--max-metric-points", "3"}, "--max-metric-points must be an integer >= 4"},
        {{"--session-timeout-seconds", "0"}, "--session-timeout-seconds must be a number of seconds > 0"},
        {{"--poll-timeout-seconds", "nan"}, "--poll-timeout-seconds must be a number of seconds > 0"},
        {{"--seq-gap-timeout-seconds", "1e300"}, "at most 1e9"},
        {{"--snapshot-ttl-seconds", "-1"}, "--snapshot-ttl-seconds must be a number of seconds >= 0"},
        {{"--dp", "0"}, "--dp must be an integer from 1 to 256"},
        {{"--sampling-replicas", "65"}, "--sampling-replicas must be an integer from 0 to 64"},
    };
    for (const Case & c : cases) {
        const std::string message = parse_error(c.args);
        EXPECT_NE(message.find(c.expected), std::string::npos) << c.args[0] << ": " << message;
    }
}

TEST(CommandLine, BadWordsAndStrings) {
    EXPECT_EQ(parse_error({"--dtype", "fp16"}), "--dtype must be one of auto, bf16, fp32, got 'fp16'");
    EXPECT_NE(parse_error({"--model", "=dir"}).find("--model must be NAME=DIR"), std::string::npos);
    EXPECT_NE(parse_error({"--model", "name="}).find("got 'name='"), std::string::npos);
    EXPECT_NE(parse_error({"--database", "mysql://x"}).find("--database must be a PostgreSQL URI"), std::string::npos);
    EXPECT_NE(parse_error({"--host", ""}).find("--host must be a non-empty value"), std::string::npos);
    EXPECT_NE(parse_error({"--replica-init", "/tmp/x"}).find("--replica-init must be file://PATH"), std::string::npos);
}

TEST(CommandLine, UnknownFlagsAndMissingValues) {
    EXPECT_EQ(parse_error({"--prot", "80"}), "unknown flag '--prot'");
    EXPECT_EQ(parse_error({"serve"}), "unknown flag 'serve'");
    EXPECT_EQ(parse_error({"--model", "a=/b", "--port"}), "--port needs a value");
    EXPECT_EQ(parse_error({"--api-keys", "--port", "80"}), "--api-keys needs a value");
}

TEST(CommandLine, DataParallelCombinations) {
    const Options dp = parse_ok({"--dp", "3"});
    EXPECT_EQ(dp.dist.world_size, 3);
    EXPECT_TRUE(dp.dist.enabled());
    const Options rank = parse_ok({"--dist-init", "tcp://h:1", "--rank", "1", "--world-size", "2"});
    EXPECT_TRUE(rank.dist.follower());
    EXPECT_NE(parse_error({"--dp", "2", "--dist-init", "tcp://h:1"}).find("--dp starts its own group"),
              std::string::npos);
    EXPECT_NE(parse_error({"--dist-init", "http://h:1"}).find("--dist-init must be tcp://HOST:PORT"),
              std::string::npos);
    EXPECT_EQ(parse_error({"--world-size", "2"}), "--world-size > 1 needs --dist-init tcp://HOST:PORT");
    EXPECT_NE(parse_error({"--dist-init", "tcp://h:1", "--rank", "2", "--world-size", "2"})
                  .find("--rank must be below --world-size (got --rank 2 with --world-size 2)"),
              std::string::npos);
}

// The --flags a text names: "--word" tokens, without the pieces of longer words ("re--x") or dashes in prose.
std::set<std::string> flags_named_in(const std::string & text) {
    std::set<std::string> names;
    const std::regex flag(R"((^|[^A-Za-z0-9-])(--[a-z][a-z0-9-]*[a-z0-9]))");
    for (std::sregex_iterator it(text.begin(), text.end(), flag), end; it != end; ++it) {
        names.insert((*it)[2]);
    }
    return names;
}

TEST(CommandLine, UsageNamesExactlyThePublicFlags) {
    std::set<std::string> known;
    std::set<std::string> public_flags;
    for (const FlagName & f : known_flags()) {
        known.insert(f.name);
        if (!f.internal) {
            public_flags.insert(f.name);
        }
    }
    std::set<std::string> in_usage = flags_named_in(USAGE);
    in_usage.erase("--help");
    in_usage.erase("--flag");  // "--flag VALUE", the syntax line
    EXPECT_EQ(in_usage, public_flags);
    EXPECT_NE(std::string(USAGE).find("-h | --help"), std::string::npos);
    EXPECT_TRUE(known.count("--replica-index") && !public_flags.count("--replica-index"));
}

TEST(CommandLine, ReadmeFlagTableNamesEveryPublicFlag) {
    const char * source = std::getenv("TINKERD_SOURCE_DIR");
    ASSERT_NE(source, nullptr) << "TINKERD_SOURCE_DIR is set by ctest";
    std::ifstream readme(std::string(source) + "/README.md");
    ASSERT_TRUE(readme.good());
    std::string table;  // the rows of the flag table: lines that start with "| `--"
    for (std::string line; std::getline(readme, line);) {
        if (line.rfind("| `--", 0) == 0) {
            table += line.substr(0, line.find(" | ")) + "\n";  // the first column only
        }
    }
    const std::set<std::string> in_readme = flags_named_in(table);
    for (const FlagName & f : known_flags()) {
        EXPECT_EQ(in_readme.count(f.name), f.internal ? 0u : 1u) << f.name << " in README.md's flag table";
    }
    for (const std::string & name : in_readme) {
        bool known = false;
        for (const FlagName & f : known_flags()) {
            known = known || f.name == name;
        }
        EXPECT_TRUE(known) << "README.md's flag table names " << name << ", which tinkerd does not know";
    }
}

}  // namespace
}  // namespace tinkerd::cli
