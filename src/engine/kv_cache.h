// KV cache for sampling: one SequenceCache per sequence holds every attention layer's K and V as
// [KV, capacity, D] slabs in the act dtype (grown by the caller's reserve, never paged) and every Gated DeltaNet
// layer's recurrent state (conv + delta rule, fixed size), and cached_attention runs new queries against a
// sequence's cached keys/values (causal within the new rows).
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

namespace tinkerd::engine {

// What one sequence caches per layer: K/V slabs of attention layers (per token), or the fixed-size state of a
// linear-attention (Gated DeltaNet) layer: its conv inputs [Cc, K-1] and delta-rule state [HV, Dk, Dv].
struct CacheShape {
    int64_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
    std::vector<bool> recurrent;                          // [n_layers] true: a linear-attention layer (state, no K/V)
    int64_t conv_dim = 0, conv_width = 0;                 // Cc, K-1
    int64_t v_heads = 0, k_head_dim = 0, v_head_dim = 0;  // HV, Dk, Dv
    torch::ScalarType dtype = torch::kFloat32;            // the act dtype (fp32; fp64 in fp64 mode)
    torch::Device device = torch::kCPU;

    bool is_recurrent(int64_t layer) const { return recurrent[static_cast<size_t>(layer)]; }
    int64_t attention_layers() const;
    // K and V bytes per cached token (attention layers only).
    int64_t kv_bytes_per_token() const;
    // Bytes of one sequence's recurrent state (every linear-attention layer; 0 without any).
    int64_t state_bytes() const;
};

class SequenceCache {
  public:
    SequenceCache() = default;
    explicit SequenceCache(std::shared_ptr<const CacheShape> shape);

    int64_t length() const { return length_; }      // tokens cached (= position of the next token)
    int64_t capacity() const { return capacity_; }  // tokens that fit without growing
    // Makes room for n_tokens in total (grows every attention layer's slabs to exactly that, keeping their contents).
    void reserve(int64_t n_tokens);
    // Writes layer's new k, v [n, KV, D] at positions [length, length + n) (length moves in advance()).
    void write(int64_t layer, const torch::Tensor & k, const torch::Tensor & v);
    // Keys / values of layer for positions [0, n) as views [KV, n, D].
    torch::Tensor keys(int64_t layer, int64_t n) const { return k_[layer].narrow(1, 0, n); }
    torch::Tensor values(int64_t layer, int64_t n) const { return v_[layer].narrow(1, 0, n); }
    // The layer's whole K / V slab [KV, capacity, D] (undefined for a linear-attention layer): decode_layers.h
    // writes and reads it in place.
    const torch::Tensor & key_slab(int64_t layer) const { return k_[layer]; }
    const torch::Tensor & value_slab(int64_t layer) const { return v_[layer]; }
    // A linear-attention layer's state after length() tokens (zeros before the first), updated in place:
    // conv inputs [Cc, K-1] (oldest first) and delta-rule state [HV, Dk, Dv].
    torch::Tensor & conv_state(int64_t layer) { return conv_[layer]; }
    torch::Tensor & recurrent_state(int64_t layer) { return recurrent_[layer]; }
    // Added to length() for the rope position of the next token: after a prompt with images, mrope positions
    // advance slower than tokens (image_layout.h), so later tokens continue from the prompt's next position.
    int64_t position_offset() const { return position_offset_; }
    void set_position_offset(int64_t offset) { position_offset_ = offset; }
    // Commits n written tokens after every layer has written them.
    void advance(int64_t n) { length_ += n; }
    // A deep copy (its own tensors) with the same length and capacity.
    SequenceCache fork() const;

  private:
    std::shared_ptr<const CacheShape> shape_;
    std::vector<torch::Tensor> k_, v_;             // per attention layer [KV, capacity, D]; undefined otherwise
    std::vector<torch::Tensor> conv_, recurrent_;  // per linear-attention layer; undefined otherwise
    int64_t length_ = 0, capacity_ = 0;
    int64_t position_offset_ = 0;
};

// The attention of one cached forward: new rows of several sequences, sequence s owning rows
// [offsets[s], offsets[s] + lengths[s]). Sequences with equal (new, total) lengths share one batched call.
class CachedAttention {
  public:
    CachedAttention(const std::vector<int64_t> & lengths, const std::vector<SequenceCache *> & caches,
                    torch::Device device);
    // Appends layer's new k, v [T, KV, D] to the caches, then attends q [T, H, D] -> [T, H*D].
    torch::Tensor run(int64_t layer, const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v) const;

  private:
    // Decode steps (one new row per sequence, fp32 caches on the CPU): attention read in place from the
    // slabs (kernels/attention_decode.h); undefined when the step does not qualify.
    torch::Tensor decode_in_place(int64_t layer, const torch::Tensor & q) const;

    struct Group {
        std::vector<size_t> seqs;  // sequence indices
        int64_t n = 0;             // new rows per sequence
        int64_t total = 0;         // cached + new
        torch::Tensor rows;        // [B*n] int64 rows of q, sequence-major
    };
    std::vector<int64_t> offsets_, lengths_;
    std::vector<SequenceCache *> caches_;
    std::vector<Group> groups_;
    torch::Tensor inverse_;  // [T] row of the concatenated group outputs for each packed row (undefined: identity)
};

// Attention of the new rows of B sequences that share n new tokens and total length L (cached + new).
// q [B, n, H, D]; k, v [B, KV, L, D]; new row i sits at position L - n + i and sees keys [0, L - n + i].
// Returns [B, n, H*D]. Query head h uses kv head h / (H / KV), as packed_causal_attention.
torch::Tensor cached_attention(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v);

}  // namespace tinkerd::engine
