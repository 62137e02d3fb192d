# Qwen3.5 (dense Gated DeltaNet hybrid) through the official SDK: a tiny random Qwen3_5ForCausalLM made by
# transformers (3 linear-attention layers, then one gated full-attention layer) served with --model.
# A LoRA on the Gated DeltaNet projections, attention and MLP learns a fixed batch; its sampler weights'
# compute_logprobs equal the trainer's forward and sampled tokens' logprobs (the cached decode: K/V of the
# attention layer, conv + delta-rule state of the linear ones) equal compute_logprobs of the whole sequence;
# a seed gives the same tokens alone and beside base-model and other requests; greedy sampling of the base
# model equals transformers' own cached generate (its conv / recurrent cache) token for token, with the
# same logprobs; save_state + resume with the optimizer is bit-exact.
import os

import sdk_common as sdk
from harness import check, check_abs

MODEL = "tiny/qwen3.5"
VOCAB = 256
LR = 1e-2


def write_model(out_dir):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    config = Qwen3_5TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                               layer_types=["linear_attention"] * 3 + ["full_attention"],
                               num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                               linear_value_head_dim=8, linear_conv_kernel_dim=4, max_position_embeddings=256,
                               tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                "partial_rotary_factor": 0.5})
    return sdk.save_random_hf_model(Qwen3_5ForCausalLM, config, 12, out_dir)


def check_learns_and_resumes(svc, batch):
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0, base_model=MODEL))
    nll = sdk.learn_fixed_batch(tc, batch, LR)
    sdk.check_resume_bit_exact(svc, tc, batch, LR, "q35-state")
    return tc, nll


def check_seed_alone_and_batched(svc, sampler):
    """A seeded request gives the same tokens alone and while base-model requests sample beside it."""
    base = sdk.resolved(svc.create_sampling_client(base_model=MODEL))
    mine = sdk.prompt([5, 6, 7, 8, 9])
    want = sdk.params(max_tokens=12, temperature=1.0, seed=11)
    alone = [list(s.tokens) for s in sampler.sample(mine, 2, want).result().sequences]
    others = [base.sample(sdk.prompt([3 + i] * (4 + 9 * i)), 2, sdk.params(max_tokens=16, seed=i)) for i in range(3)]
    batched = sampler.sample(mine, 2, want)
    together = [list(s.tokens) for s in batched.result().sequences]
    check(all(len(o.result().sequences) == 2 for o in others), "base-model requests beside it")
    check(together == alone, "seeded tokens alone %r vs beside other requests %r" % (alone, together))
    check(alone[0] != alone[1], "two samples of one request should differ: %r" % alone)


def check_greedy_matches_transformers(svc, model_dir):
    """Greedy decoding through tinkerd's caches vs transformers' generate with its own cache, from a prompt
    longer than one 64-row chunk of the delta rule: the same tokens, and logprobs within 1e-4."""
    import torch
    from transformers import Qwen3_5ForCausalLM
    start = [(7 * i + 3) % (VOCAB - 3) + 3 for i in range(70)]
    model = Qwen3_5ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float64).eval()
    with torch.no_grad():
        gen = model.generate(torch.tensor([start]), max_new_tokens=16, do_sample=False, use_cache=True,
                             output_scores=True, return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    want = gen.sequences[0, len(start):].tolist()
    want_lps = [torch.log_softmax(score[0], -1)[t].item() for score, t in zip(gen.scores, want)]
    base = sdk.resolved(svc.create_sampling_client(base_model=MODEL))
    out = base.sample(sdk.prompt(start), 1, sdk.params(max_tokens=16, temperature=0.0, stop=[])).result()
    got = list(out.sequences[0].tokens)
    check(got == want, "greedy tokens: tinkerd %r vs transformers %r" % (got, want))
    check_abs(list(out.sequences[0].logprobs), want_lps, 1e-4, "greedy logprobs vs transformers")
    check(len(set(want)) > 1, "a degenerate greedy continuation proves little: %r" % want)
    return max(abs(a - b) for a, b in zip(out.sequences[0].logprobs, want_lps))


def run(ctx):
    model_dir = write_model(os.path.join(ctx.scratch_dir(), "qwen3.5"))
    srv = ctx.start_server(extra=["--model", "%s=%s" % (MODEL, model_dir)])
    svc = sdk.service(srv)
    batch = sdk.sft_batch(seed=23, vocab=VOCAB)
    names = [m.model_name for m in svc.get_server_capabilities().supported_models]
    check(MODEL in names, "capabilities lack %s: %r" % (MODEL, names))
    greedy_diff = ctx.case("greedy sampling equals transformers' cached generate", check_greedy_matches_transformers,
                           svc, model_dir)
    learned = ctx.case("Qwen3.5 LoRA learns and resumes bit-exactly", check_learns_and_resumes, svc, batch)
    if learned:
        sampler = ctx.case("sampler weights equal the trainer", sdk.check_sampler_matches_trainer, learned[0], batch,
                           "q35-sampler")
        if sampler:
            ctx.case("a seed gives the same tokens alone and batched", check_seed_alone_and_batched, svc, sampler)
    ctx.finish()
    if not learned or greedy_diff is None:
        return "failed"
    return ("Qwen3.5 (3 Gated DeltaNet + 1 gated attention layer): NLL %.3f -> %.3f in 12 steps; greedy decode "
            "== transformers' generate, logprobs within %.2g" % (learned[1][0], learned[1][-1], greedy_diff))
