// Offline lookup of a model in the local Hugging Face hub cache: `--model ORG/NAME` alone resolves to
// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, as models--ORG--NAME/snapshots/<rev>.
#pragma once

#include <string>

#include "common/status.h"

namespace tinkerd::model {

// The hub cache directory from the environment (HF_HUB_CACHE, HF_HOME, HOME).
std::string hf_hub_cache_dir();

// The snapshot directory of `repo_id` ("Qwen/Qwen3-0.6B") in `cache_dir`: the revision named by
// refs/main when present, else the only snapshot that has a config.json. Errors say where it looked.
Result<std::string> resolve_hf_snapshot(const std::string & cache_dir, const std::string & repo_id);

}  // namespace tinkerd::model
