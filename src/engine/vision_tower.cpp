// VisionTower (vision_tower.h): loading model.visual.* and the encoder's forward, after transformers'
// Qwen3VLVisionModel (patch embed, fast_pos_embed_interpolate, rot_pos_emb, blocks, merger, deepstack).
#include "engine/vision_tower.h"

#include <algorithm>

#include "engine/attention.h"
#include "engine/kernels/matmul.h"

namespace tinkerd::engine {

namespace {
constexpr double LAYER_NORM_EPS = 1e-6;

// LayerNorm over the last dim from plain ops (torch's fused kernel has no Meta implementation in libtorch, which the
// device-strict mode needs): x [n, w] -> [n, w].
torch::Tensor layer_norm(const torch::Tensor & x, const torch::Tensor & weight, const torch::Tensor & bias) {
    torch::Tensor centred = x - x.mean(-1, true);
    return centred * torch::rsqrt(centred.square().mean(-1, true) + LAYER_NORM_EPS) * weight + bias;
}

}  // namespace

// The engine's base-weight product (kernels/matmul.h: bf16 weights with fp32 math on the CPU) plus the bias.
torch::Tensor VisionTower::Linear::operator()(const torch::Tensor & x) const {
    return kernels::base_linear(x, weight) + bias;  // [n, out]
}

Result<VisionTower::Linear> VisionTower::load_linear(const WeightLoader & loader, const std::string & prefix,
                                                     int64_t out, int64_t in) {
    Linear linear;
    TRY_STATUS(assign(linear.weight, loader.exact(prefix + ".weight", {out, in}, true)));
    TRY_STATUS(assign(linear.bias, loader.exact(prefix + ".bias", {out}, false)));
    return linear;
}

Result<VisionTower::Norm> VisionTower::load_norm(const WeightLoader & loader, const std::string & prefix,
                                                 int64_t width) {
    Norm norm;
    TRY_STATUS(assign(norm.weight, loader.exact(prefix + ".weight", {width}, false)));
    TRY_STATUS(assign(norm.bias, loader.exact(prefix + ".bias", {width}, false)));
    return norm;
}

Result<void> VisionTower::load_blocks(const WeightLoader & loader) {
    const int64_t cv = config_.hidden_size, fv = config_.intermediate_size;
    for (int64_t b = 0; b < config_.depth; ++b) {
        const std::string p = prefix_ + "blocks." + std::to_string(b) + ".";
        auto norm1 = load_norm(loader, p + "norm1", cv);
        TRY_STATUS(norm1);
        auto norm2 = load_norm(loader, p + "norm2", cv);
        TRY_STATUS(norm2);
        auto qkv = load_linear(loader, p + "attn.qkv", 3 * cv, cv);
        TRY_STATUS(qkv);
        auto proj = load_linear(loader, p + "attn.proj", cv, cv);
        TRY_STATUS(proj);
        auto fc1 = load_linear(loader, p + "mlp.linear_fc1", fv, cv);
        TRY_STATUS(fc1);
        auto fc2 = load_linear(loader, p + "mlp.linear_fc2", cv, fv);
        TRY_STATUS(fc2);
        blocks_.push_back({*norm1, *norm2, *qkv, *proj, *fc1, *fc2});
    }
    return {};
}

Result<VisionTower::Merger> VisionTower::load_merger(const WeightLoader & loader, const std::string & prefix,
                                                     bool norm_after_merge) const {
    const int64_t cv = config_.hidden_size, merged = cv * config_.spatial_merge_size * config_.spatial_merge_size;
    Merger merger;
    merger.norm_after_merge = norm_after_merge;
    auto norm = load_norm(loader, prefix + ".norm", norm_after_merge ? merged : cv);
    TRY_STATUS(norm);
    merger.norm = *norm;
    auto fc1 = load_linear(loader, prefix + ".linear_fc1", merged, merged);
    TRY_STATUS(fc1);
    merger.fc1 = *fc1;
    auto fc2 = load_linear(loader, prefix + ".linear_fc2", config_.out_hidden_size, merged);
    TRY_STATUS(fc2);
    merger.fc2 = *fc2;
    return merger;
}

Result<std::unique_ptr<VisionTower>> VisionTower::load(const WeightLoader & loader, const model::ModelConfig & config,
                                                       torch::ScalarType act, torch::Device device) {
    const model::VisionConfig & v = config.vision;
    std::unique_ptr<VisionTower> tower(new VisionTower(v, act, device));
    const std::vector<int64_t> patch_shape = {v.hidden_size, v.in_channels, v.temporal_patch_size, v.patch_size,
                                              v.patch_size};
    // Checkpoints name the tower "model.visual."; transformers 5 saves Qwen3.5's under the text model's prefix.
    auto patch = loader.exact("model.visual.patch_embed.proj.weight", patch_shape, true);
    if (!patch.ok() && patch.error().kind == ErrorKind::NOT_FOUND) {
        tower->prefix_ = "model.language_model.visual.";
        patch = loader.exact(tower->prefix_ + "patch_embed.proj.weight", patch_shape, true);
    }
    TRY_STATUS(patch);
    const std::string & p = tower->prefix_;
    tower->patch_embed_.weight = patch->reshape({v.hidden_size, v.patch_dim()});  // [Cv, P]
    TRY_STATUS(assign(tower->patch_embed_.bias, loader.exact(p + "patch_embed.proj.bias", {v.hidden_size}, false)));
    TRY_STATUS(assign(tower->pos_table_,
                      loader.exact(p + "pos_embed.weight", {v.num_position_embeddings, v.hidden_size}, false)));
    TRY_STATUS(tower->load_blocks(loader));
    auto merger = tower->load_merger(loader, p + "merger", false);
    TRY_STATUS(merger);
    tower->merger_ = *merger;
    for (size_t i = 0; i < v.deepstack_layers.size(); ++i) {
        auto deep = tower->load_merger(loader, p + "deepstack_merger_list." + std::to_string(i), true);
        TRY_STATUS(deep);
        tower->deepstack_mergers_.push_back(*deep);
    }
    return tower;
}

torch::Tensor VisionTower::position_embeddings(const std::vector<const ImageInput *> & images) const {
    int64_t side = 0;
    while ((side + 1) * (side + 1) <= config_.num_position_embeddings) {
        ++side;
    }
    const int64_t m = config_.spatial_merge_size, cv = config_.hidden_size;
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    std::vector<torch::Tensor> per_image;
    for (const ImageInput * image : images) {
        const int64_t h = image->grid_h, w = image->grid_w;
        torch::Tensor hs = torch::linspace(0, static_cast<double>(side - 1), h, f32);  // [h] fractional grid rows
        torch::Tensor ws = torch::linspace(0, static_cast<double>(side - 1), w, f32);  // [w]
        torch::Tensor h0 = hs.to(torch::kInt64), w0 = ws.to(torch::kInt64);
        torch::Tensor h1 = (h0 + 1).clamp_max(side - 1), w1 = (w0 + 1).clamp_max(side - 1);
        torch::Tensor dh = (hs - h0).unsqueeze(1), dw = (ws - w0).unsqueeze(0);  // [h, 1], [1, w]
        const auto corner = [&](const torch::Tensor & r, const torch::Tensor & c, const torch::Tensor & weight) {
            torch::Tensor index = (r.unsqueeze(1) * side + c.unsqueeze(0)).reshape({-1}).to(device_);  // [h*w]
            return pos_table_.index_select(0, index) * weight.reshape({-1, 1}).to(device_, act_);      // [h*w, Cv]
        };
        torch::Tensor pe = corner(h0, w0, (1 - dh) * (1 - dw)) + corner(h0, w1, (1 - dh) * dw) +
                           corner(h1, w0, dh * (1 - dw)) + corner(h1, w1, dh * dw);  // [h*w, Cv]
        pe = pe.repeat({image->grid_t, 1}).view({image->grid_t, h / m, m, w / m, m, cv});
        per_image.push_back(pe.permute({0, 1, 3, 2, 4, 5}).reshape({-1, cv}));  // merge blocks first
    }
    return torch::cat(per_image);  // [Np, Cv]
}

std::pair<torch::Tensor, torch::Tensor> VisionTower::rotary_tables(
    const std::vector<const ImageInput *> & images) const {
    const int64_t m = config_.spatial_merge_size, dim = config_.hidden_size / config_.n_heads / 2;
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    torch::Tensor inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, dim, 2, f32) / dim);  // [Dv/4]
    std::vector<torch::Tensor> rows, cols;
    for (const ImageInput * image : images) {
        const int64_t bh = image->grid_h / m, bw = image->grid_w / m;
        // (block row, block col, row in block, col in block) -> the patch's row and column
        torch::Tensor r = (torch::arange(bh).view({bh, 1, 1, 1}) * m + torch::arange(m).view({1, 1, m, 1}));
        torch::Tensor c = (torch::arange(bw).view({1, bw, 1, 1}) * m + torch::arange(m).view({1, 1, 1, m}));
        rows.push_back(r.expand({bh, bw, m, m}).reshape({-1}).repeat({image->grid_t}));
        cols.push_back(c.expand({bh, bw, m, m}).reshape({-1}).repeat({image->grid_t}));
    }
    torch::Tensor row = torch::cat(rows).to(torch::kFloat32), col = torch::cat(cols).to(torch::kFloat32);  // [Np]
    torch::Tensor half = torch::cat({torch::outer(row, inv_freq), torch::outer(col, inv_freq)}, 1);        // [Np, Dv/2]
    torch::Tensor emb = torch::cat({half, half}, 1).unsqueeze(1);  // [Np, 1, Dv]
    return {emb.cos().to(device_, act_), emb.sin().to(device_, act_)};
}

torch::Tensor VisionTower::block_forward(const Block & block, const torch::Tensor & x, const torch::Tensor & cos,
                                         const torch::Tensor & sin, const std::vector<int64_t> & frame_lengths) const {
    const int64_t np = x.size(0), cv = config_.hidden_size, heads = config_.n_heads;
    torch::Tensor h = layer_norm(x, block.norm1.weight, block.norm1.bias);
    auto qkv = block.qkv(h).view({np, 3, heads, cv / heads}).unbind(1);  // 3 x [Np, Hv, Dv]
    torch::Tensor q = apply_rope(qkv[0].contiguous(), cos, sin), k = apply_rope(qkv[1].contiguous(), cos, sin);
    std::vector<torch::Tensor> outs;  // each frame attends to itself, without a mask
    int64_t start = 0;
    for (int64_t length : frame_lengths) {
        const auto part = [&](const torch::Tensor & t) {
            return t.narrow(0, start, length).transpose(0, 1).unsqueeze(0);
        };
        torch::Tensor o = at::scaled_dot_product_attention(part(q), part(k), part(qkv[2]));  // [1, Hv, L, Dv]
        outs.push_back(o.squeeze(0).transpose(0, 1).reshape({length, cv}));
        start += length;
    }
    torch::Tensor y = x + block.proj(torch::cat(outs));  // [Np, Cv]
    h = layer_norm(y, block.norm2.weight, block.norm2.bias);
    return y + block.fc2(torch::gelu(block.fc1(h), "tanh"));
}

torch::Tensor VisionTower::merge(const Merger & merger, const torch::Tensor & x) const {
    const int64_t merged = x.size(1) * config_.spatial_merge_size * config_.spatial_merge_size;
    torch::Tensor h = merger.norm_after_merge ? x.reshape({-1, merged}) : x;
    h = layer_norm(h, merger.norm.weight, merger.norm.bias).reshape({-1, merged});
    return merger.fc2(torch::gelu(merger.fc1(h)));  // [Nv, C]
}

VisionFeatures VisionTower::encode(const std::vector<const ImageInput *> & images) const {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> pixels;
    std::vector<int64_t> frame_lengths;
    for (const ImageInput * image : images) {
        pixels.push_back(torch::tensor(image->pixel_values, torch::kFloat32).view({-1, config_.patch_dim()}));
        frame_lengths.insert(frame_lengths.end(), image->grid_t, image->grid_h * image->grid_w);
    }
    torch::Tensor x = patch_embed_(torch::cat(pixels).to(device_, act_));  // [Np, Cv]
    x = x + position_embeddings(images);
    auto [cos, sin] = rotary_tables(images);
    VisionFeatures out;
    for (size_t b = 0; b < blocks_.size(); ++b) {
        x = block_forward(blocks_[b], x, cos, sin, frame_lengths);
        const auto & deep = config_.deepstack_layers;
        if (auto it = std::find(deep.begin(), deep.end(), static_cast<int64_t>(b)); it != deep.end()) {
            out.deepstack.push_back(merge(deepstack_mergers_[it - deep.begin()], x));
        }
    }
    out.embeds = merge(merger_, x);
    return out;
}

}  // namespace tinkerd::engine
