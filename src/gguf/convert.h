// Turning a GGUF file into an ordinary Hugging Face model directory (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json, generation_config.json) that the rest of tinkerd loads
// unchanged. Supported architectures: llama, qwen2, qwen3, qwen3moe; anything else is named in the error.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gguf/gguf_file.h"
#include "model/safetensors.h"

namespace tinkerd::gguf {

// config.json from the `<arch>.*` metadata (and tensor shapes where metadata is silent).
Result<nlohmann::json> hf_config(const GgufFile & file);

// The Hugging Face name of a GGUF tensor ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"), or
// "" when it has none. A qwen3moe expert tensor keeps its experts stacked: "blk.3.ffn_gate_exps.weight" ->
// "model.layers.3.mlp.experts.gate_proj" ([E, out, in], no ".weight": the per-expert names are HF's).
std::string hf_tensor_name(const std::string & gguf_name, int64_t n_layers);

// The weights under Hugging Face names, shapes checked against config. Quantised tensors become F32
// (exact); F32, F16 and BF16 tensors keep their type. Undoes llama.cpp's row permutation of the llama
// q/k projections. qwen3moe's stacked experts are split per expert ("model.layers.N.mlp.experts.E.gate_proj.weight"
// [out, in]), their shapes checked against num_experts / moe_intermediate_size / hidden_size. `quantised` is set
// when any weight was quantised.
Result<std::map<std::string, model::OwnedTensor>> hf_tensors(const GgufFile & file, const nlohmann::json & config,
                                                             bool & quantised);

// tokenizer.json (byte-level BPE for tokenizer.ggml.model "gpt2", SentencePiece-style BPE with byte
// fallback for "llama") and tokenizer_config.json (special tokens, add_bos_token, chat_template).
Result<nlohmann::json> hf_tokenizer(const GgufFile & file);
Result<nlohmann::json> hf_tokenizer_config(const GgufFile & file);

// Writes the whole directory into out_dir (created; files replaced). `quantised` as in hf_tensors.
Result<void> convert_gguf(const GgufFile & file, const std::string & out_dir, bool & quantised);

struct ConvertedModel {
    std::string dir;         // the Hugging Face directory to load
    bool quantised = false;  // some weights were quantised in the GGUF (dequantised to F32)
};

// The converted directory of gguf_path under cache_root/<file name>-<size>-<mtime>/, written once (to a
// temporary sibling, then renamed) and reused while the source file's size and mtime are unchanged.
Result<ConvertedModel> ensure_converted(const std::string & gguf_path, const std::string & cache_root);

// True when path names a GGUF file (ends in .gguf, or starts with the GGUF magic).
bool looks_like_gguf(const std::string & path);

}  // namespace tinkerd::gguf
