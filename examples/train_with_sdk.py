#!/usr/bin/env python3
"""An ordinary Tinker training loop, run against tinkerd: supervised fine-tuning of a LoRA adapter on a
few chat examples, then sampling from the trained adapter. Nothing in it is tinkerd-specific.

    export TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=tml-anything HF_HUB_OFFLINE=1
    .venv/bin/python examples/train_with_sdk.py [--model NAME] [--steps N]

The tokenizer comes from the local Hugging Face cache (scripts/hf-cache-entry.py writes the entry).
"""
import argparse

import numpy as np
import tinker
from tinker import types

EXAMPLES = [
    ("What is the capital of France?", "Paris. Bonjour from tinkerd!"),
    ("What is 2 + 2?", "4. Bonjour from tinkerd!"),
    ("Name a colour of the sky.", "Blue. Bonjour from tinkerd!"),
    ("Who wrote Hamlet?", "Shakespeare. Bonjour from tinkerd!"),
]


def chat_datum(tokenizer, question, answer):
    """Next-token targets for the whole conversation, weight 1 on the assistant's tokens only."""
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                           add_generation_prompt=True)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    answer_ids = tokenizer.encode(answer + "<|im_end|>", add_special_tokens=False)
    tokens = prompt_ids + answer_ids
    weights = [0.0] * len(prompt_ids) + [1.0] * len(answer_ids)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.array(tokens[1:], dtype=np.int64),
                        "weights": np.array(weights[1:], dtype=np.float32)})


def resolved(client_or_future):
    """SDK >= 0.38 returns futures of clients (call .result()); 0.25 returns the clients themselves."""
    return client_or_future.result() if isinstance(client_or_future, tinker.APIFuture) else client_or_future


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()

    service = tinker.ServiceClient()
    training = resolved(service.create_lora_training_client(base_model=args.model, rank=16))
    tokenizer = training.get_tokenizer()
    batch = [chat_datum(tokenizer, q, a) for q, a in EXAMPLES]
    n_targets = sum(float(np.sum(d.loss_fn_inputs["weights"].to_numpy())) for d in batch)

    for step in range(args.steps):
        fb = training.forward_backward(batch, "cross_entropy")
        opt = training.optim_step(types.AdamParams(learning_rate=5e-4))
        loss = fb.result().metrics["loss:sum"] / n_targets
        opt.result()
        print("step %2d  mean NLL per answer token %.3f" % (step, loss), flush=True)

    sampler = resolved(training.save_weights_and_get_sampling_client(name="example"))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of Italy?"}],
                                           tokenize=False, add_generation_prompt=True)
    result = sampler.sample(
        prompt=types.ModelInput.from_ints(tokenizer.encode(prompt, add_special_tokens=False)),
        num_samples=1,
        sampling_params=types.SamplingParams(max_tokens=24, temperature=0.0),
    ).result()
    print("trained adapter says:", tokenizer.decode(result.sequences[0].tokens, skip_special_tokens=True))


if __name__ == "__main__":
    main()
