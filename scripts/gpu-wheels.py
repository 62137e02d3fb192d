#!/usr/bin/env python3
# gpu-wheels.py: which PyPI packages scripts/gpu-check.sh carries to the GPU machine as cp312 wheels. The
# dependency closure of the e2e clients (tinker, openai, zstandard) as installed in .venv (markers evaluated for
# Python 3.12 on Linux), minus the closure of what the GPU machine's Python already has (docs/gpu.md) less
# what it was seen to lack. Prints NAME==VERSION per line, versions as pinned in .venv.
import argparse
import importlib.metadata as md
import re
import sys

from packaging.markers import default_environment
from packaging.requirements import Requirement

CLIENTS = ["tinker", "openai", "zstandard"]
# /opt/torch/.venv on the GPU machine (November 2026): these and everything they need are there.
GPU_HAS = ["torch", "transformers", "peft", "safetensors", "numpy", "httpx", "anyio", "rich", "click",
           "protobuf", "tokenizers", "huggingface-hub", "typer"]
# What the closure of GPU_HAS in .venv's versions holds but the machine lacks, or has too old (its typer needs
# no pydantic; pydantic 2.14 needs typing-extensions >= 4.16): measured there, see docs/gpu.md.
GPU_LACKS = ["pydantic", "pydantic-core", "annotated-types", "typing-inspection", "orjson", "zstandard", "distro",
             "sniffio", "pyqwest", "opentelemetry-api", "h2", "hpack", "hyperframe", "typing-extensions"]


def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots, env):
    """Every distribution the roots need (extras named in a requirement included), as {canon name: version}."""
    seen, done, todo, missing = {}, set(), [(r, ()) for r in roots], []
    while todo:
        name, extras = todo.pop()
        if (canon(name), extras) in done:
            continue
        done.add((canon(name), extras))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
            continue
        seen[canon(name)] = dist.version
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or any(req.marker.evaluate(dict(env, extra=e)) for e in ("",) + extras):
                todo.append((req.name, tuple(sorted(req.extras))))
    return seen, missing


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--python-version", default="3.12")
    args = ap.parse_args()
    env = dict(default_environment(), python_version=args.python_version,
               python_full_version=args.python_version + ".0", sys_platform="linux", platform_system="Linux")
    need, missing = closure(CLIENTS, env)
    have, _ = closure(GPU_HAS, env)
    if missing:
        sys.exit("gpu-wheels: not installed in %s's environment: %s" % (sys.executable, ", ".join(missing)))
    for key in sorted(need):
        if key not in have or key in GPU_LACKS:
            print("%s==%s" % (key, need[key]))


if __name__ == "__main__":
    main()
