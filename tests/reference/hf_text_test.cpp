// Hugging Face as the second reference for text: our tokenizer's ids == HF `tokenizers` on a seeded corpus
// with random Unicode (Qwen3, stories260K), and our chat template rendering == transformers'
// apply_chat_template on the real Qwen3 tokenizer_config.json (tools, tool calls, reasoning, thinking flag).
// Expected values come from make_hf_fixtures.py (<fixtures>/hf/{tokenizer_ids,chat_renders}.json).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "fixture.h"
#include "tokenizer/tokenizer.h"

namespace tinkerd::testing {
namespace {

using nlohmann::ordered_json;

ordered_json read_fixture(const std::string & file) {
    const std::string path = fixtures_dir() + "/hf/" + file;
    std::ifstream in(path);
    if (!in) {
        throw std::runtime_error("missing " + path + ": run `make fixtures` (tests/reference/make_hf_fixtures.py)");
    }
    return ordered_json::parse(in);
}

std::string ids_text(const std::vector<int64_t> & ids) {
    std::ostringstream out;
    for (int64_t id : ids) {
        out << id << ' ';
    }
    return out.str();
}

void expect_same_ids(const ordered_json & entry) {
    const std::string dir = entry.at("dir");
    auto tok = tokenizer::Tokenizer::load(dir);
    ASSERT_TRUE(tok.ok()) << dir << ": " << tok.error().message;
    size_t mismatches = 0, n_ids = 0;
    for (const auto & c : entry.at("cases")) {
        const std::string text = c.at("text");
        for (const bool special : {false, true}) {
            const auto want = c.at(special ? "ids_special" : "ids").get<std::vector<int64_t>>();
            const auto got32 = (*tok)->encode(text, special);
            const std::vector<int64_t> got(got32.begin(), got32.end());
            n_ids += want.size();
            if (got != want && ++mismatches <= 5) {
                ADD_FAILURE() << entry.at("name").get<std::string>() << " add_special_tokens=" << special << " text "
                              << ordered_json(text).dump() << "\n  ours:       " << ids_text(got)
                              << "\n  tokenizers: " << ids_text(want);
            }
        }
    }
    std::printf(
        "[%s] %zu texts x {add_special_tokens false, true}, %zu ids: %zu encodings differ from "
        "tokenizers %s\n",
        entry.at("name").get<std::string>().c_str(), entry.at("cases").size(), n_ids, mismatches,
        read_fixture("tokenizer_ids.json").at("tokenizers_version").get<std::string>().c_str());
    EXPECT_EQ(mismatches, 0u);
}

void expect_same_ids_for(const std::string & name) {
    const ordered_json fixture = read_fixture("tokenizer_ids.json");
    for (const auto & entry : fixture.at("tokenizers")) {
        if (entry.at("name") == name) {
            expect_same_ids(entry);
            return;
        }
    }
    FAIL() << "no " << name << " entry in tokenizer_ids.json";
}

TEST(HfTokenizers, Qwen3IdsEqualHfTokenizersOnARandomUnicodeCorpus) {
    expect_same_ids_for("qwen3");
}

TEST(HfTokenizers, Stories260KIdsEqualHfTokenizersOnARandomUnicodeCorpus) {
    expect_same_ids_for("stories260K");
}

TEST(HfChatTemplate, Qwen3RendersEqualApplyChatTemplate) {
    const ordered_json fixture = read_fixture("chat_renders.json");
    const std::string config_path = fixture.at("tokenizer_dir").get<std::string>() + "/tokenizer_config.json";
    std::ifstream in(config_path);
    ASSERT_TRUE(in) << "missing " << config_path;
    auto source = chat_template::chat_template_source(nlohmann::json::parse(in));
    ASSERT_TRUE(source.ok()) << source.error().message;
    auto tmpl = chat_template::ChatTemplate::compile(*source);
    ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
    size_t equal = 0;
    for (const auto & c : fixture.at("cases")) {
        const std::string name = c.at("name");
        auto got = tmpl->render(c.at("messages"), c.at("add_generation_prompt").get<bool>(), c.at("extra"),
                                fixture.at("bos_token"), fixture.at("eos_token"), c.at("tools"));
        if (!got.ok()) {
            ADD_FAILURE() << name << ": " << got.error().message;
            continue;
        }
        const std::string want = c.at("expected");
        EXPECT_EQ(*got, want) << name;
        equal += *got == want;
    }
    std::printf(
        "[qwen3 chat template] %zu of %zu conversations byte-identical to transformers %s "
        "apply_chat_template\n",
        equal, fixture.at("cases").size(), fixture.at("transformers_version").get<std::string>().c_str());
    EXPECT_GE(fixture.at("cases").size(), 10u);
}

}  // namespace
}  // namespace tinkerd::testing
