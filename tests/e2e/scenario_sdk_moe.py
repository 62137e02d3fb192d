# Qwen3-MoE through the official SDK: a tiny random Qwen3MoeForCausalLM made by transformers (layer 0 with
# 8 routed experts, top 2; layer 1 dense) served with --model. get_server_capabilities lists it; a LoRA run
# (experts included, the shared-outer layout) learns a fixed batch; the sampler weights' compute_logprobs
# equal the trainer's forward and sampled tokens' logprobs equal compute_logprobs of the whole sequence; save_state + create_training_client_from_state_with_optimizer resumes
# bit-exactly; an attention-only run beside it in the same batches keeps its own numbers.
import os

import sdk_common as sdk
from harness import check, check_abs

MODEL = "tiny/qwen3-moe"
VOCAB = 256
LR = 1e-2


def write_model(out_dir):
    """A seeded tiny Qwen3-MoE saved by transformers (one safetensors tensor per expert, as on the Hub)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    config = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
                            num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                            max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1,
                            eos_token_id=2)
    return sdk.save_random_hf_model(Qwen3MoeForCausalLM, config, 11, out_dir)


def check_capabilities(svc):
    names = [m.model_name for m in svc.get_server_capabilities().supported_models]
    check(MODEL in names, "capabilities lack %s: %r" % (MODEL, names))


def check_learns(svc, batch):
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0, base_model=MODEL))
    return tc, sdk.learn_fixed_batch(tc, batch, LR)


def check_mixed_runs(svc, batch):
    """An attention-only run trained alone and then beside an expert run: the same losses."""
    def client(rank, seed, **kw):
        return sdk.resolved(sdk.new_training_client(svc, rank=rank, seed=seed, base_model=MODEL, **kw))

    solo = sdk.train(client(4, 9, train_mlp=False), batch, [LR] * 3)
    attn, experts = client(4, 9, train_mlp=False), client(8, 2)
    mixed = []
    for _ in range(3):
        a = attn.forward_backward(batch, "cross_entropy")
        e = experts.forward_backward(batch, "cross_entropy")
        oa, oe = attn.optim_step(sdk.adam(LR)), experts.optim_step(sdk.adam(LR))
        mixed.append(a.result().metrics["loss:sum"])
        e.result(), oa.result(), oe.result()
    check_abs(mixed, solo, 1e-4 * max(abs(x) for x in solo), "attention-only run beside an expert run vs alone")


def run(ctx):
    model_dir = write_model(os.path.join(ctx.scratch_dir(), "qwen3-moe"))
    srv = ctx.start_server(extra=["--model", "%s=%s" % (MODEL, model_dir)])
    svc = sdk.service(srv)
    batch = sdk.sft_batch(seed=21, vocab=VOCAB)
    ctx.case("capabilities list the MoE model", check_capabilities, svc)
    learned = ctx.case("expert LoRA learns a fixed batch", check_learns, svc, batch)
    if learned:
        tc, nll = learned
        ctx.case("sampler weights equal the trainer", sdk.check_sampler_matches_trainer, tc, batch, "moe-12")
        ctx.case("resume with optimizer is bit-exact", sdk.check_resume_bit_exact, svc, tc, batch, LR, "moe-state")
    ctx.case("mixed runs keep their own numbers", check_mixed_runs, svc, batch)
    ctx.finish()
    return "Qwen3-MoE (8 experts, top 2): NLL %.3f -> %.3f in 12 steps" % (nll[0], nll[-1]) if learned else "failed"
