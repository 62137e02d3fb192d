# Image chunks through the official SDK (issue 27): a tiny random Qwen3VLForConditionalGeneration made by
# transformers, served with --model, with a preprocessor_config.json beside it. The client sends PNG images
# as types.ImageChunk (bytes + format + expected_tokens) inside ModelInputs, as the cookbook's VL renderers
# do. A LoRA on the language model (vision tower frozen) learns to name the colour of a generated image
# (red, green or blue, each drawn with noise); greedy sampling of its sampler weights with unseen images of
# each colour then names them; the sampled token's logprob equals the trainer's forward logprob of that token
# after the same image prompt; a wrong expected_tokens is a clean 4xx naming both counts. The model has the
# real Qwen3 vocabulary and tokenizer (../shared/models/tokenizers/qwen3) with a Qwen3-VL-style chat template,
# so the official openai client's image_url parts are checked too: accepted as data: URLs (the image's 4
# tokens counted in usage), refused by name as remote URLs.
import base64
import io
import json
import os
import shutil

import numpy as np
from tinker import types

import sdk_common as sdk
from harness import check, shared_path

MODEL = "tiny/qwen3-vl"
VOCAB = 151669  # the Qwen3 tokenizer's ids, added tokens included
IMAGE, START, END = 151655, 151652, 151653  # <|image_pad|>, <|vision_start|>, <|vision_end|>
# Qwen3-VL's way of placing an image part (a dict with type "image", or an "image"/"image_url" key).
CHAT_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}{%- else %}{%- for part in message.content %}"
    "{%- if part.type == 'image' or 'image' in part or 'image_url' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif 'text' in part %}{{ part.text }}{%- endif %}{%- endfor %}{%- endif %}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")
COLOURS = {"red": (10, (220, 30, 30)), "green": (11, (30, 200, 40)), "blue": (12, (30, 40, 220))}
QUESTION = [7, 8, 9]  # "what colour is it?"
SIDE = 16             # 16 x 16 pixels, patch 4, merge 2: a 4 x 4 grid, 4 image tokens
LR = 2e-2


def write_model(out_dir):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                                 "mrope_interleaved": True})
    vision = dict(hidden_size=16, intermediate_size=24, num_heads=2, patch_size=4, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16, depth=2,
                  deepstack_visual_indexes=[1])
    config = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE, video_token_id=151656,
                           vision_start_token_id=START, vision_end_token_id=END, tie_word_embeddings=False)
    sdk.save_random_hf_model(Qwen3VLForConditionalGeneration, config, 31, out_dir)
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 4, "merge_size": 2,
                   "temporal_patch_size": 2, "size": {"shortest_edge": 64, "longest_edge": 4096},
                   "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, f)
    shutil.copy(shared_path("models", "tokenizers", "qwen3", "tokenizer.json"), out_dir)
    with open(shared_path("models", "tokenizers", "qwen3", "tokenizer_config.json")) as f:
        tokenizer_config = json.load(f)
    tokenizer_config["chat_template"] = CHAT_TEMPLATE
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f)
    return out_dir


def colour_png(rgb, seed):
    from PIL import Image
    rng = np.random.default_rng(seed)
    pixels = np.clip(np.array(rgb)[None, None, :] + rng.normal(0, 25, (SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="PNG")
    return buf.getvalue()


def image_prompt(png, expected_tokens=4):
    """[START] image [END] question: what the model sees before it names the colour."""
    return types.ModelInput(chunks=[types.EncodedTextChunk(tokens=[START]),
                                    types.ImageChunk(data=png, format="png", expected_tokens=expected_tokens),
                                    types.EncodedTextChunk(tokens=[END] + QUESTION)])


def colour_datum(png, answer):
    """Input: the prompt; targets: the next token at every position, weighted only on the answer."""
    model_input = image_prompt(png)
    n = model_input.length
    targets = np.zeros(n, dtype=np.int64)
    weights = np.zeros(n, dtype=np.float32)
    targets[-1], weights[-1] = answer, 1.0
    return types.Datum(model_input=model_input, loss_fn_inputs={"target_tokens": targets, "weights": weights})


def check_learns_colours(svc):
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0, base_model=MODEL))
    batch = [colour_datum(colour_png(rgb, 100 * k + i), token)
             for k, (token, rgb) in enumerate(COLOURS.values()) for i in range(3)]
    check(batch[0].model_input.length == 9, "an image prompt is 1 + 4 + 4 tokens long")
    nll = []
    for _ in range(25):
        out, _ = sdk.step(tc, batch, LR)
        nll.append(sdk.mean_nll(out, batch))
    check(nll[-1] < 0.2 * nll[0], "colour NLL did not fall to a fifth: %s" % [round(x, 3) for x in nll])
    return tc, nll


def check_sampler_names_unseen_images(tc):
    sampler = tc.save_weights_and_get_sampling_client("vision-sampler")
    named, sampled = {}, {}
    for k, (name, (token, rgb)) in enumerate(COLOURS.items()):
        prompt = image_prompt(colour_png(rgb, 9000 + k))
        res = sampler.sample(prompt, 1, sdk.params(max_tokens=1, temperature=0.0)).result()
        named[name] = res.sequences[0].tokens[0]
        sampled[name] = (prompt, res.sequences[0].tokens[0], res.sequences[0].logprobs[0])
    want = {name: token for name, (token, _) in COLOURS.items()}
    check(named == want, "greedy answers %r, want %r" % (named, want))
    return sampled


def check_sampler_logprob_equals_trainer(tc, sampled):
    """The sampled answer's logprob (prefill with the image, then one decode step) equals the trainer's
    forward logprob of that token after the same prompt."""
    worst = 0.0
    for prompt, token, logprob in sampled.values():
        n = prompt.length
        targets = np.zeros(n, dtype=np.int64)
        targets[-1] = token
        datum = types.Datum(model_input=prompt, loss_fn_inputs={"target_tokens": targets})
        out = tc.forward([datum], "cross_entropy").result()
        worst = max(worst, abs(float(sdk.logprobs(out, 0)[-1]) - float(logprob)))
    check(worst < 1e-4, "sampler logprob vs trainer forward: max diff %.3g" % worst)
    return worst


def check_wrong_expected_tokens_refused(tc):
    datum = colour_datum(colour_png((1, 2, 3), 5), 10)
    bad = types.Datum(model_input=image_prompt(colour_png((1, 2, 3), 5), expected_tokens=9),
                      loss_fn_inputs={k: v for k, v in datum.loss_fn_inputs.items()})
    err = sdk.expect_api_error(lambda: tc.forward_backward([bad], "cross_entropy").result(), sdk.USER_ERRORS,
                               "expected_tokens 9 for a 4-token image")
    check("9" in str(err) and "4 tokens" in str(err), "the error names both counts: %s" % err)


def check_openai_image_parts(srv):
    """The openai client's image_url parts: a data: URL is accepted and its image counts 4 prompt tokens more
    than the text around it; an image token typed in the text is refused; a remote URL is a 400 naming the field."""
    import openai
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key="tml-test")
    url = "data:image/png;base64," + base64.b64encode(colour_png((30, 200, 40), 77)).decode()
    text_only = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": [{"type": "text", "text": "colour?"}]}],
        max_tokens=2, temperature=0)
    with_image = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": [{"type": "text", "text": "colour?"},
                                                            {"type": "image_url", "image_url": {"url": url}}]}],
        max_tokens=2, temperature=0)
    added = with_image.usage.prompt_tokens - text_only.usage.prompt_tokens
    check(added == 2 + 4, "an image part adds <|vision_start|>, 4 image tokens and <|vision_end|>: %d" % added)
    try:  # an image token typed in the text makes two placeholders for one image: refused, never truncated
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": [
                {"type": "text", "text": "<|image_pad|> colour?"}, {"type": "image_url", "image_url": {"url": url}}]}],
            max_tokens=1)
        check(False, "a typed <|image_pad|> beside one image was accepted")
    except openai.BadRequestError as e:
        check("placed 2 image tokens for 1 image_url parts" in str(e), "the refusal names both counts: %s" % e)
    try:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}], max_tokens=1)
    except openai.BadRequestError as e:
        check("data: URLs" in str(e), "the refusal says only data: URLs are taken: %s" % e)
        return added
    check(False, "a remote image URL was accepted")


def run(ctx):
    model_dir = write_model(os.path.join(ctx.scratch_dir(), "qwen3-vl"))
    srv = ctx.start_server(extra=["--model", "%s=%s" % (MODEL, model_dir)])
    svc = sdk.service(srv)
    learned = ctx.case("a Qwen3-VL LoRA learns to name an image's colour", check_learns_colours, svc)
    diff = None
    if learned:
        sampled = ctx.case("its sampler names unseen images", check_sampler_names_unseen_images, learned[0])
        if sampled:
            diff = ctx.case("sampled logprobs equal the trainer's", check_sampler_logprob_equals_trainer,
                            learned[0], sampled)
        ctx.case("a wrong expected_tokens is a 4xx naming both counts", check_wrong_expected_tokens_refused,
                 learned[0])
    ctx.case("the openai client's image_url parts", check_openai_image_parts, srv)
    ctx.finish()
    if not learned or diff is None:
        return "failed"
    return ("Qwen3-VL image chunks: colour NLL %.3f -> %.3f in 25 steps; greedy names 3 unseen images; sampler "
            "logprobs within %.2g of the trainer's" % (learned[1][0], learned[1][-1], diff))
