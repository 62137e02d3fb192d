# Hugging Face second reference, text side: a seeded tokenizer corpus (random code points across the
# planes, combining marks, emoji ZWJ sequences, CJK, whitespace runs, special-token strings) and chat
# conversations for the Qwen3 template (system prompts, tools, tool calls and results, reasoning).
import random

# (lo, hi, weight): code point ranges to draw from; surrogates are never drawn (not valid UTF-8).
_RANGES = [
    (0x20, 0x7E, 8), (0xA0, 0x24F, 3), (0x370, 0x3FF, 1), (0x400, 0x4FF, 2), (0x590, 0x6FF, 2),
    (0x900, 0x97F, 1), (0xE00, 0xE7F, 1), (0x1100, 0x11FF, 1), (0x2000, 0x206F, 1), (0x2190, 0x23FF, 1),
    (0x3000, 0x30FF, 2), (0x4E00, 0x9FFF, 4), (0xAC00, 0xD7A3, 2), (0xE000, 0xF8FF, 1), (0xFB00, 0xFFFD, 1),
    (0x10000, 0x1FFFF, 2), (0x1F300, 0x1FAFF, 3), (0x20000, 0x2FFFF, 1), (0x30000, 0x10FFFF, 1),
]
_ZWJ = ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F3F3\uFE0F\u200D\U0001F308",
        "\U0001F469\U0001F3FD\u200D\U0001F4BB", "\U0001F44D\U0001F3FF", "\U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8",
        "\u2764\uFE0F\u200D\U0001F525", "1\uFE0F\u20E3"]
_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
             "</tool_call>", "<|im_start", "|im_end|>", "<|vision_pad|>", "<s>", "</s>", "<unk>"]
_WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00A0", "\u3000", "\u2028", "\u200B",
               "\t \t", "    \n\n\n   "]
_FIXED = [
    "Hello world!", "Once upon a time, there was a little girl named Lily.", "  leading and trailing  ",
    "I'm sure they'll say it's fine, we've DONE it's 'quoted' OK'S", "12345678901234567890 3.14159 -0.5e-10",
    "def f(x):\n    return x**2  # square\n\n\tprint(f(3))", "caf\u00E9 vs cafe\u0301 vs CAFE\u0301\u0327",
    "\uD55C\uAD6D\uC5B4 \u1112\u1161\u11AB (jamo)", "\u4F60\u597D\uFF0C\u4E16\u754C\uFF01\u3053\u3093\u306B\u3061\u306F",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "a<|endoftext|>b <think>x</think>", "",
    " ", "\n", "\u0000\u0001\u007F control", "\U0010FFFD\U000E0041 tags", "\u0627\u0644\u0639\u0631\u0628\u064A\u0629 "
    "\u05E2\u05D1\u05E8\u05D9\u05EA", "x" * 300, "\U0001F600" * 20, "ab" + "\u0301" * 12,
]


def _random_char(rng):
    lo, hi, _ = rng.choices(_RANGES, weights=[w for _, _, w in _RANGES])[0]
    while True:
        cp = rng.randint(lo, hi)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def _segment(rng):
    kind = rng.choices(["chars", "word", "combining", "zwj", "special", "space", "cjk", "digits"],
                       weights=[5, 4, 2, 1, 1, 3, 2, 1])[0]
    if kind == "chars":
        return "".join(_random_char(rng) for _ in range(rng.randint(1, 8)))
    if kind == "word":
        return rng.choice(["the", " cat", " Sat", "ON", " mat", "don't", " you've", "HTTP", "foo_bar", "-->"])
    if kind == "combining":
        base = rng.choice("aeiouAEOnczCSk\u03B1\u0430")
        return base + "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(1, 3)))
    if kind == "zwj":
        return rng.choice(_ZWJ)
    if kind == "special":
        return rng.choice(_SPECIALS)
    if kind == "space":
        return rng.choice(_WHITESPACE)
    if kind == "cjk":
        return "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(1, 6)))
    return str(rng.randint(0, 10 ** rng.randint(1, 12)))


def unicode_corpus(seed: int, n_random: int = 240):
    """Fixed edge cases plus n_random seeded random texts of 1..12 segments."""
    rng = random.Random(seed)
    texts = list(_FIXED)
    for _ in range(n_random):
        texts.append("".join(_segment(rng) for _ in range(rng.randint(1, 12))))
    return texts


_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City, e.g. Z\u00FCrich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}}}
_SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer",
                                                                                         "default": 3}},
                   "required": ["query"]}}}


def _call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def chat_cases():
    """[{name, messages, tools, add_generation_prompt, extra}] for the Qwen3 chat template."""
    sys_msg = {"role": "system", "content": "You are a helpful assistant. \u2728"}
    user = {"role": "user", "content": "What's the weather in Z\u00FCrich and Paris?"}
    calls = {"role": "assistant", "content": "",
             "tool_calls": [_call("get_weather", {"location": "Z\u00FCrich", "unit": "celsius"}),
                            _call("get_weather", '{"location": "Paris"}')]}
    results = [{"role": "tool", "content": '{"temp": 21, "sky": "clear"}'},
               {"role": "tool", "content": "18\u00B0C, rain"}]
    final = {"role": "assistant", "content": "Z\u00FCrich: 21\u00B0C and clear; Paris: 18\u00B0C with rain.",
             "reasoning_content": "Both tool results are in; summarise them."}
    multi = [sys_msg, {"role": "user", "content": "2+2?"},
             {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
             {"role": "user", "content": "And 3+3?"},
             {"role": "assistant", "content": "<think>\nadd\n</think>\n\n6"}, {"role": "user", "content": "Thanks!"}]
    rows = [
        ("user_only", [user], None, True, {}),
        ("system_user_no_thinking", [sys_msg, user], None, True, {"enable_thinking": False}),
        ("system_user_thinking_true", [sys_msg, user], None, True, {"enable_thinking": True}),
        ("tools_system_user", [sys_msg, user], [_WEATHER, _SEARCH], True, {}),
        ("tools_no_system", [user], [_WEATHER], True, {"enable_thinking": False}),
        ("tool_calls_and_results", [sys_msg, user, calls] + results, [_WEATHER], True, {}),
        ("tool_round_trip_finished", [sys_msg, user, calls] + results + [final], [_WEATHER, _SEARCH], False, {}),
        ("reasoning_multi_turn", multi, None, True, {}),
        ("reasoning_multi_turn_finished", multi[:5], None, False, {}),
        ("reasoning_no_thinking", multi, None, True, {"enable_thinking": False}),
        ("tool_call_empty_content", [user, {"role": "assistant", "content": "",
                                              "tool_calls": [_call("web_search", {"query": "r\u00E9sum\u00E9",
                                                                                  "top_k": 5})]},
                                       {"role": "tool", "content": "no results"}], [_SEARCH], True, {}),
        ("unicode_system_and_user", [{"role": "system", "content": "\u4F60\u662F\u52A9\u624B\u3002\n\n"},
                                     {"role": "user", "content": "\U0001F468\u200D\U0001F469\u200D\U0001F467 "
                                                                 "caf\u00E9\n\t<tag>"}], None, True, {}),
    ]
    return [{"name": n, "messages": m, "tools": t, "add_generation_prompt": g, "extra": e}
            for n, m, t, g, e in rows]
