// Turning a GGUF file into an ordinary Hugging Face model directory (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json, generation_config.json) that the rest of tinkerd loads
// unchanged. Supported architectures: llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe (Qwen3.5: qwen35.h); anything
// else is named in the error.
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

// How a GGUF's quantised weights are loaded (--base-quant): dequantised to F32 at conversion (DEQUANT), kept
// as the file's blocks and multiplied by the engine's quantised kernels (GGUF), or AUTO: kept when the
// dequantised model would not fit comfortably (choose_base_quant).
enum class BaseQuant { AUTO, GGUF, DEQUANT };
bool parse_base_quant(const std::string & word, BaseQuant & out);  // "auto", "gguf", "dequant"

// The types the engine multiplies in their quantised form: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool can_keep_quantised(GgmlType type);
// A kept tensor's shape as raw blocks: [..., in] -> [..., in / block elements, block bytes] (U8).
std::vector<int64_t> blocks_shape(const TensorInfo & t);
// True when tensor t is used where it lies in the file when quantised weights are kept: a kept type, a
// matrix, and not one of llama's row-permuted q/k projections nor a transformed Qwen3.5 tensor (those are
// written, permuted, as U8 blocks, or dequantised) nor an MTP layer's. A Qwen3.5 ssm_out whose tiled V heads
// split blocks is kept as it lies, under its name + kTiledColumnsSuffix (qwen35.h).
bool kept_in_place(const GgufFile & file, const TensorInfo & t);

// The weights under Hugging Face names, shapes checked against config. Quantised tensors become F32
// (exact), or with keep_quantised their raw blocks (U8, blocks_shape) where the type is kept, and the
// tensors kept_in_place are left out (external_manifest names them); F32, F16 and BF16 tensors keep their
// type. Undoes llama.cpp's row permutation of the llama q/k projections and its Qwen3.5 transforms (qwen35.h;
// MTP layers skipped). qwen3moe's stacked experts, when
// not kept in place, are split per expert ("model.layers.N.mlp.experts.E.gate_proj.weight" [out, in]), their
// shapes checked against num_experts / moe_intermediate_size / hidden_size. `quantised` is set when any
// weight was quantised.
Result<std::map<std::string, model::OwnedTensor>> hf_tensors(const GgufFile & file, const nlohmann::json & config,
                                                             bool & quantised, bool keep_quantised = false);
// The model/safetensors.h EXTERNAL_WEIGHTS manifest of the tensors kept_in_place in the file at source_path.
Result<nlohmann::json> external_manifest(const GgufFile & file, const nlohmann::json & config,
                                         const std::string & source_path);

// tokenizer.json (byte-level BPE for tokenizer.ggml.model "gpt2", SentencePiece-style BPE with byte
// fallback for "llama") and tokenizer_config.json (special tokens, add_bos_token, chat_template).
Result<nlohmann::json> hf_tokenizer(const GgufFile & file);
Result<nlohmann::json> hf_tokenizer_config(const GgufFile & file);

// Writes the whole directory into out_dir (created; files replaced). `quantised` as in hf_tensors. With
// keep_source (the GGUF's absolute path) quantised weights are kept (hf_tensors, external_manifest).
Result<void> convert_gguf(const GgufFile & file, const std::string & out_dir, bool & quantised,
                          const std::string & keep_source = "");

struct ConvertedModel {
    std::string dir;              // the Hugging Face directory to load
    bool quantised = false;       // some weights were quantised in the GGUF
    bool kept_quantised = false;  // ... and are kept so (BaseQuant::GGUF, or AUTO's choice)
};

// GGUF or DEQUANT for a file: AUTO keeps the quantised blocks when the model's weights in bf16 would take
// more than half of physical_bytes (the machine's memory), so that a model that fits runs in bf16.
BaseQuant choose_base_quant(const GgufFile & file, BaseQuant asked, uint64_t physical_bytes);

// The converted directory of gguf_path under cache_root/<file name>-<size>[-q]/, written once (to a
// temporary sibling, then renamed) and reused while the source file's size and mtime are unchanged.
// "-q" directories keep the quantised blocks (the weights stay in the GGUF: it must not move).
Result<ConvertedModel> ensure_converted(const std::string & gguf_path, const std::string & cache_root,
                                        BaseQuant mode = BaseQuant::DEQUANT);

// True when path names a GGUF file (ends in .gguf, or starts with the GGUF magic).
bool looks_like_gguf(const std::string & path);

}  // namespace tinkerd::gguf
