// gguf_tool: the GGUF module from the command line, for the reference tests and for people.
//   gguf_tool info FILE                      architecture, metadata count, one line per tensor
//   gguf_tool dequant FILE TENSOR OUT.bin    the tensor dequantised to little-endian float32
//   gguf_tool convert FILE OUTDIR            the Hugging Face directory tinkerd loads
//   gguf_tool convert-keep FILE OUTDIR       the same with quantised weights kept (--base-quant gguf)
//   gguf_tool encode DIR < TEXT              token ids of stdin by DIR's tokenizer.json, one line
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

#include "gguf/convert.h"
#include "gguf/dequant.h"
#include "tokenizer/tokenizer.h"

namespace {

using tinkerd::gguf::GgufFile;

int fail(const std::string & message) {
    std::fprintf(stderr, "gguf_tool: %s\n", message.c_str());
    return 1;
}

int info(const GgufFile & file) {
    auto arch = file.get_string("general.architecture");
    std::printf("version %u, architecture %s, %zu metadata keys, %zu tensors\n", file.version(),
                arch.ok() ? arch->c_str() : "?", file.metadata().size(), file.tensors().size());
    for (const auto & t : file.tensors()) {
        std::string shape;
        for (int64_t d : t.shape)
            shape += (shape.empty() ? "" : "x") + std::to_string(d);
        std::printf("%s %s %s\n", t.name.c_str(), tinkerd::gguf::ggml_type_name(static_cast<uint32_t>(t.type)).c_str(),
                    shape.c_str());
    }
    return 0;
}

int dequant(const GgufFile & file, const std::string & name, const std::string & out_path) {
    const auto * t = file.find_tensor(name);
    if (!t)
        return fail("no tensor '" + name + "' in " + file.name());
    std::vector<float> values(static_cast<size_t>(t->numel()));
    auto status = tinkerd::gguf::dequantize(t->type, t->data, t->n_bytes, t->numel(), values.data());
    if (!status.ok())
        return fail(status.error().message);
    std::ofstream out(out_path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(values.data()), static_cast<std::streamsize>(values.size() * 4));
    return out ? 0 : fail("cannot write " + out_path);
}

int encode(const std::string & dir) {
    auto tok = tinkerd::tokenizer::Tokenizer::load(dir);
    if (!tok.ok())
        return fail(tok.error().message);
    const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    for (int32_t id : (*tok)->encode(text, false))
        std::printf("%d ", id);
    std::printf("\n");
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 2 && args[0] == "encode")
        return encode(args[1]);
    if (args.size() < 2) {
        return fail(
            "usage: gguf_tool info FILE | dequant FILE TENSOR OUT.bin | convert[-keep] FILE OUTDIR | encode DIR");
    }
    auto file = GgufFile::open(args[1]);
    if (!file.ok())
        return fail(file.error().message);
    if (args[0] == "info")
        return info(**file);
    if (args[0] == "dequant" && args.size() == 4)
        return dequant(**file, args[2], args[3]);
    if ((args[0] == "convert" || args[0] == "convert-keep") && args.size() == 3) {
        bool quantised = false;
        const std::string keep = args[0] == "convert-keep" ? std::filesystem::absolute(args[1]).string() : "";
        auto status = tinkerd::gguf::convert_gguf(**file, args[2], quantised, keep);
        if (!status.ok())
            return fail(status.error().message);
        std::printf("converted into %s%s\n", args[2].c_str(),
                    !quantised     ? ""
                    : keep.empty() ? " (dequantised to F32)"
                                   : " (quantised weights kept)");
        return 0;
    }
    return fail("unknown command or wrong arguments: " + args[0]);
}
