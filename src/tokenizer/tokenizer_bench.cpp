// tokenizer_bench: encode (and decode) throughput in MB/s on ~1 MB of varied text for stories260K,
// Qwen3 and Llama-3.1 when their files are present. Usage: tokenizer_bench [NAME=MODEL_DIR ...];
// defaults: stories260K (hf-f32) and Qwen3 from $TINKERD_SOURCE_DIR/../shared/models, Llama-3.1 from
// $TINKERD_LLAMA3_1_TOKENIZER_DIR when set.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

using tinkerd::tokenizer::Tokenizer;

namespace {

// ~1 MB of text: a paragraph repeated with varied words, numbers, punctuation and non-ASCII text.
std::string bench_text(size_t target_bytes) {
    static const char * words[] = {"apple",     "river",  "Mountain",  "quietly",  "electricity", "über",
                                   "résumé",    "jumped", "tokenizer", "naïve",    "HTTP/2",      "snake_case",
                                   "CamelCase", "don't",  "they'll",   "ÅNGSTRÖM", "данные",      "données"};
    const size_t n_words = sizeof(words) / sizeof(words[0]);
    std::string text;
    for (size_t i = 0; text.size() < target_bytes; ++i) {
        text += "Paragraph " + std::to_string(i) + ": the " + words[i % n_words] + " and the " +
                words[(i * 7 + 3) % n_words] + " met " + std::to_string(i * 7919 % 100000) +
                " times. Prices: $12,345.67 (+4.5%) on 2024-05-" + std::to_string(1 + i % 28) +
                "; \"quoted\" text, x = y + z * " + std::to_string(i % 97) + " — 日本語のテキスト、中文字符。 😀🎉\n";
        if (i % 5 == 4) {
            text += "\n    indented code { return a[i] != b; }  \n\n";
        }
    }
    return text;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const std::string & name, const std::string & dir, const std::string & text) {
    auto tok = Tokenizer::load(dir);
    if (!tok.ok()) {
        std::printf("%-12s skipped: %s\n", name.c_str(), tok.error().message.c_str());
        return;
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = (*tok)->encode(text, false);
    const double cold = seconds_since(t0);
    const int reps = 3;
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
        ids = (*tok)->encode(text, false);
    }
    const double warm = seconds_since(t0) / reps;
    t0 = std::chrono::steady_clock::now();
    const std::string back = (*tok)->decode(ids, false);
    const double dec = seconds_since(t0);
    std::printf(
        "%-12s %.2f MB -> %zu tokens: encode %.1f MB/s (first pass, cold cache %.1f MB/s), decode %.1f MB/s%s\n",
        name.c_str(), mb, ids.size(), mb / warm, mb / cold, mb / dec, back == text ? "" : "  [round trip differs]");
}

}  // namespace

int main(int argc, char ** argv) {
    std::vector<std::pair<std::string, std::string>> models;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const size_t eq = arg.find('=');
        models.emplace_back(eq == std::string::npos ? arg : arg.substr(0, eq),
                            eq == std::string::npos ? arg : arg.substr(eq + 1));
    }
    if (models.empty()) {
        const char * src = std::getenv("TINKERD_SOURCE_DIR");
        const std::filesystem::path shared = std::filesystem::path(src ? src : ".") / ".." / "shared" / "models";
        models.emplace_back("stories260K", (shared / "stories260K" / "hf-f32").string());
        models.emplace_back("qwen3", (shared / "tokenizers" / "qwen3").string());
        if (const char * llama = std::getenv("TINKERD_LLAMA3_1_TOKENIZER_DIR")) {  // Meta's file is not shipped
            models.emplace_back("llama3_1", llama);
        }
    }
    const std::string text = bench_text(1 << 20);
    for (const auto & [name, dir] : models) {
        bench(name, dir, text);
    }
    return 0;
}
