"""The reference server: ``python -m engine.reference.serve [--host H] [--port P] [--device D]``.

An OpenAI-compatible server over Gemma 3 270M (prepared by ``engine.reference.prepare``) that
reads the challenge's knobs from the environment:

    HF_OVERRIDES          JSON; text_config.sliding_window or sliding_window: window of the
                          sliding-attention layers (default: the model's 512)
    SLIDING_WINDOW        used when HF_OVERRIDES sets no window
    SPECULATIVE_CONFIG    {"method": "draft", "num_speculative_tokens": k[, "draft_layers": n]}
                          or {"method": "ngram", "num_speculative_tokens": k,
                          "prompt_lookup_min": a, "prompt_lookup_max": b}; absent: plain greedy;
                          k within the knob registry's limit for this stack (studies/knobs.toml)
    CENTROID_TOP_K        drafter head budget: clusters (of 2,048) scored exactly (default 32)
    MAX_MODEL_LEN         prompt + completion limit in tokens (default 32768)
    WARMUP_NUM_PROMPTS    synthetic requests decoded before the server listens (default 0)
    WARMUP_MAX_TOKENS     tokens each of them generates (default 1)
    SERVED_MODEL_NAME     the model id clients must use (default gemma-3-270m)
    HOST / PORT           defaults for --host (127.0.0.1) and --port (8000)
    REFERENCE_DEVICE      default for --device (auto: cuda if available, else cpu)

The server listens only once the model is loaded and warmed up, so a client polling
GET /v1/models sees it ready exactly when it can serve. A bad environment exits with status 2
and a one-line reason on stderr.
"""

from __future__ import annotations

import os
import sys

from errors import GemmaSweepError


def main(argv: list[str] | None = None) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from engine.reference._config import parse_config

    try:
        cfg = parse_config(sys.argv[1:] if argv is None else argv, os.environ)
    except GemmaSweepError as exc:
        print(f"engine.reference.serve: {exc}", file=sys.stderr)
        return 2

    import uvicorn
    from transformers import AutoTokenizer

    from engine.reference._app import build_app
    from engine.reference._service import Service
    from engine.reference.runtime import load_runtime

    try:
        runtime = load_runtime(device=cfg.device, sliding_window=cfg.sliding_window)
    except GemmaSweepError as exc:
        print(f"engine.reference.serve: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # e.g. --device cuda on a machine without one
        print(
            f"engine.reference.serve: cannot load the model on {cfg.device!r}: {exc}".splitlines()[0], file=sys.stderr
        )
        return 2
    tokenizer = AutoTokenizer.from_pretrained(runtime.checkpoint_dir)
    service = Service(cfg, runtime, tokenizer)
    service.warm_up(prompts=cfg.warmup_num_prompts, max_tokens=cfg.warmup_max_tokens)
    print(
        f"engine.reference.serve: serving {cfg.served_model_name} on http://{cfg.host}:{cfg.port} "
        f"(device {runtime.model.device}, window {runtime.model.window}, spec {cfg.spec}, "
        f"centroid_top_k {cfg.centroid_top_k}, max_model_len {cfg.max_model_len})",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(build_app(service), host=cfg.host, port=cfg.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
