// Checkpoint files on disk: a PEFT adapter directory (adapter_model.safetensors + adapter_config.json),
// plus optimizer_state.safetensors for training checkpoints, plus a `checkpoint_complete` marker.
// Written into a temporary sibling directory and renamed, so a crash never leaves half a checkpoint.
// Also builds the tar archive served by the archive endpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace tinkerd::store {

using Tensors = std::map<std::string, model::OwnedTensor>;

// What adapter_config.json records (PEFT fields plus tinkerd's own).
struct AdapterConfig {
    std::string base_model;  // base_model_name_or_path: the served NAME
    int64_t rank = 32;
    double alpha = 32.0;
    std::vector<std::string> target_modules;  // "q_proj", ..., "lm_head" (model::lora_target_modules)
    // PEFT's per-module overrides, written only when non-empty (peft_export.h: in_proj_qkv of rank 3R)
    std::map<std::string, int64_t> rank_pattern;
    std::map<std::string, double> alpha_pattern;
    bool train_attn = true;
    bool train_mlp = true;
    bool train_unembed = true;
};

// The config of an adapter training the given parts of a model: target_modules lists the module names of
// model::lora_layout's targets for it (q/k/v/o_proj, gate/up/down_proj, Qwen3.5's in_proj_q/k/v/z and out_proj,
// the experts' experts.w1/w3/w2 and shared_expert.*, lm_head).
AdapterConfig make_adapter_config(std::string base_model, int64_t rank, double alpha, const model::ModelConfig & model,
                                  bool train_attn, bool train_mlp, bool train_unembed);

struct CheckpointContents {
    AdapterConfig config;
    Tensors tensors;  // PEFT keys; with the optimizer: also "<key>.exp_avg", "<key>.exp_avg_sq", "optimizer.step"
    bool has_optimizer = false;  // `tensors` holds the optimizer state (read with with_optimizer)
};

// The directory of a checkpoint: <data_dir>/runs/<run_id>/<kind>/<name>, kind "weights" or "sampler_weights".
std::string checkpoint_dir(const std::string & data_dir, const std::string & run_id, const std::string & kind,
                           const std::string & name);

// Writes the checkpoint. `tensors` may hold optimizer keys (".exp_avg", ".exp_avg_sq", "optimizer.step"):
// those go to optimizer_state.safetensors, the rest to adapter_model.safetensors. Replaces an existing
// directory only when `overwrite`; otherwise an existing one is INVALID_ARGUMENT ("already exists").
// Returns the total size in bytes of the files written.
Result<int64_t> write_checkpoint(const std::string & dir, const AdapterConfig & config, const Tensors & tensors,
                                 bool overwrite);

// Reads a checkpoint written by write_checkpoint. with_optimizer: also read optimizer_state (error if
// missing). A directory without `checkpoint_complete` is NOT_FOUND ("incomplete checkpoint").
Result<CheckpointContents> read_checkpoint(const std::string & dir, bool with_optimizer);

// Removes the directory and everything in it (missing = ok).
Result<void> remove_checkpoint(const std::string & dir);

// A POSIX ustar archive of the directory's regular files (adapter_config.json, adapter_model.safetensors,
// checkpoint_complete; optimizer_state.safetensors when present), names without directories.
Result<std::string> tar_directory(const std::string & dir);

}  // namespace tinkerd::store
