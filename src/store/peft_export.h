// A PEFT-loadable copy of an adapter whose native (Tinker) layout PEFT cannot load as is: Qwen3.5's three LoRAs
// on the row slices of a Gated DeltaNet layer's fused in_proj_qkv become ONE LoRA on in_proj_qkv of rank 3R,
// exactly: A = [A_q; A_k; A_v] [3R, C], B = blockdiag(B_q, B_k, B_v) [2Kd + Vd, 3R], scaled (3α)/(3R) = α/R
// through PEFT's rank_pattern / alpha_pattern. Checkpoints keep the native layout (our importer reads it back).
#pragma once

#include "common/status.h"
#include "store/checkpoint_files.h"

namespace tinkerd::store {

struct PeftAdapter {
    AdapterConfig config;
    Tensors tensors;
};

// The adapter (config + tensors as write_checkpoint takes them, without optimizer keys) in PEFT's layout:
// in_proj_q/k/v merged per layer as above (target_modules lists in_proj_qkv instead), everything else copied.
// The experts' shared-outer factors (experts.w1/w3/w2) have no PEFT module: they stay in the file and leave
// target_modules (PEFT loads the rest and ignores them). Errors name the key of a missing or mis-shaped factor.
Result<PeftAdapter> peft_loadable_adapter(const AdapterConfig & config, const Tensors & tensors);

}  // namespace tinkerd::store
