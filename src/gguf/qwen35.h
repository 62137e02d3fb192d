// Qwen3.5 GGUFs (llama.cpp's `qwen35` / `qwen35moe`): the config.json fields of the hybrid (Gated DeltaNet
// sizes, layer types, partial rotary, shared expert) and the inverse of each value transform llama.cpp's
// convert_hf_to_gguf.py applies (docs/quantised-base.md has the table): V heads back from tiled to grouped
// order, A = -exp(A_log) back to A_log, (1 + w) norms back to w, conv1d's squeezed middle dim restored.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gguf/gguf_file.h"
#include "model/safetensors.h"

namespace tinkerd::gguf {

bool is_qwen35(const std::string & arch);  // "qwen35" or "qwen35moe"

// The multi-token-prediction (nextn) layers a file appends after the model's own: `<arch>.nextn_predict_layers`,
// 0 when absent. Their tensors (blk.N, N >= block_count - this) are skipped.
int64_t qwen35_mtp_layers(const GgufFile & file, const std::string & arch);
// True for a tensor of one of those layers ("blk.N...." with N >= block_count - nextn_predict_layers).
bool qwen35_mtp_tensor(const GgufFile & file, const std::string & gguf_name);

// Adds the Qwen3.5 fields to a config built from the common metadata: num_hidden_layers without MTP layers,
// layer_types, linear_*, rope_parameters with partial_rotary_factor, and for qwen35moe the expert fields.
Result<void> add_qwen35_fields(const GgufFile & file, const std::string & arch, nlohmann::json & config);

// True when tensor `gguf_name` of a Qwen3.5 file was transformed by the converter (so it cannot be used
// where it lies); `needs_f32` is set when undoing it takes arithmetic, a reshape (conv1d) or a column
// permutation that splits blocks (a V head of Dv columns not a whole number of blocks), which a quantised
// tensor gets only after dequantisation (a row permutation moves whole block rows, a block-aligned column
// permutation whole blocks).
bool qwen35_transformed(const GgufFile & file, const std::string & gguf_name, bool & needs_f32);

// The name suffix (after the Hugging Face name) of a tensor kept quantised with its columns still in llama.cpp's
// tiled V-head order: ssm_out (out_proj) when its V heads of Dv columns are not whole blocks (a Q4_K's 256 values
// span two heads of 128), so no block-moving permutation can undo the tiling. The engine multiplies it by its
// input in the same tiled order instead (exact: the same products, the input's columns moved).
inline constexpr char kTiledColumnsSuffix[] = ".v_heads_tiled";

// True for such a tensor: a tiled Qwen3.5 file's ssm_out of a kept type whose block does not divide Dv.
bool qwen35_tiled_columns(const GgufFile & file, const std::string & gguf_name);

// Undoes the transform of tensor `gguf_name` on its data (F32, F16, BF16, or U8 blocks [rows, blocks, bytes]
// for row permutations), shape in Hugging Face order; a no-op for untransformed tensors.
Result<void> undo_qwen35(const GgufFile & file, const std::string & gguf_name, model::OwnedTensor & data);

}  // namespace tinkerd::gguf
