// VisionTower: the frozen vision encoder of Qwen3-VL and Qwen3.5 ("model.visual.*"): patch embedding, the learned
// position table bilinearly interpolated to each image's grid, 2-D rotary attention blocks per frame, the 2x2
// patch merger into the language model's width, and Qwen3-VL's deepstack mergers. No LoRA, no gradients.
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "engine/engine.h"
#include "engine/weights.h"

namespace tinkerd::engine {

// Letters: Np patches of all images, Cv vision width, Hv heads, Dv head dim, P patch values, Nv merged image
// tokens (Np / merge²), C the language model's width.
struct VisionFeatures {
    torch::Tensor embeds;                  // [Nv, C] merged image tokens, images in order, act dtype
    std::vector<torch::Tensor> deepstack;  // one [Nv, C] per deepstack layer: added after text layer i
};

class VisionTower {
  public:
    // Loads model.visual.* (names exactly as transformers saves them), shape-checked.
    static Result<std::unique_ptr<VisionTower>> load(const WeightLoader & loader, const model::ModelConfig & config,
                                                     torch::ScalarType act, torch::Device device);
    // The features of the images (each prepared and checked: image_layout.h), without autograd.
    VisionFeatures encode(const std::vector<const ImageInput *> & images) const;

  private:
    struct Linear {
        torch::Tensor weight;  // [out, in] compute dtype
        torch::Tensor bias;    // [out] act dtype
        torch::Tensor operator()(const torch::Tensor & x) const;
    };
    struct Norm {
        torch::Tensor weight, bias;  // LayerNorm [width], act dtype
    };
    struct Block {
        Norm norm1, norm2;
        Linear qkv, proj, fc1, fc2;
    };
    struct Merger {
        Norm norm;  // [Cv] before the merge, or [Cv·merge²] after it (the deepstack mergers)
        Linear fc1, fc2;
        bool norm_after_merge = false;
    };

    VisionTower(const model::VisionConfig & config, torch::ScalarType act, torch::Device device)
        : config_(config), act_(act), device_(device) {}
    static Result<Linear> load_linear(const WeightLoader & loader, const std::string & prefix, int64_t out, int64_t in);
    static Result<Norm> load_norm(const WeightLoader & loader, const std::string & prefix, int64_t width);
    Result<void> load_blocks(const WeightLoader & loader);
    Result<Merger> load_merger(const WeightLoader & loader, const std::string & prefix, bool norm_after_merge) const;

    // The interpolated position embeddings of each image's patches, in the processor's patch order: [Np, Cv].
    torch::Tensor position_embeddings(const std::vector<const ImageInput *> & images) const;
    // cos, sin [Np, 1, Dv] of the 2-D rotary embedding (row frequencies, then column frequencies).
    std::pair<torch::Tensor, torch::Tensor> rotary_tables(const std::vector<const ImageInput *> & images) const;
    torch::Tensor block_forward(const Block & block, const torch::Tensor & x, const torch::Tensor & cos,
                                const torch::Tensor & sin, const std::vector<int64_t> & frame_lengths) const;
    torch::Tensor merge(const Merger & merger, const torch::Tensor & x) const;  // [Np, Cv] -> [Nv, C]

    model::VisionConfig config_;
    std::string prefix_ = "model.visual.";  // where the checkpoint keeps the tower
    torch::ScalarType act_;
    torch::Device device_;
    Linear patch_embed_;       // [Cv, P]: the Conv3d whose kernel is its stride, as a product
    torch::Tensor pos_table_;  // [G², Cv] act dtype, a G x G grid
    std::vector<Block> blocks_;
    Merger merger_;
    std::vector<Merger> deepstack_mergers_;  // in deepstack_visual_indexes order
};

}  // namespace tinkerd::engine
