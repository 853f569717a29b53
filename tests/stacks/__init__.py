"""Test stacks: small servers speaking the engines' HTTP API, with known timing and faults.

Everything here is test kit, never a shipped result. The one stack so far is
``stub_server.py`` (stdlib only, ready in well under a second), started by the manifest
``tests/stacks/stub.json``, which consumes all three knobs the way the real stacks do.

API (the same shapes as vLLM and the reference stack)
    GET  /v1/models            {"data": [{"id": SERVED_MODEL_NAME}]}
    POST /v1/chat/completions  usage.completion_tokens = max_tokens (ignore_eos or not);
                               choices[0].token_ids when return_token_ids; SSE when stream
    POST /v1/completions       prompt as text or token ids; choices[0].prompt_logprobs in vLLM's
                               shape (None, then {id: {logprob, rank, decoded_token}} holding the
                               prompt token at rank 2 and a rival at rank 1)
    GET  /metrics              vllm:spec_decode_num_drafts_total (one a speculative step),
                               vllm:spec_decode_num_draft_tokens_total and
                               vllm:spec_decode_num_accepted_tokens_total (model_name label), and the
                               step-time histogram vllm:inter_token_latency_seconds (one value a step
                               of a chat request but its first, at the bounds of engine.stacks.STEP_BUCKETS)

Knobs, read from the same env vars as the real stacks
    HF_OVERRIDES (text_config.sliding_window or sliding_window) over SLIDING_WINDOW (default 512),
    CENTROID_TOP_K (default 32), SPECULATIVE_CONFIG.num_speculative_tokens (absent: no drafts).

The model (pure functions in stub_server.py; tests import them for expected values)
    PPL: ``expected_ppl(window)`` = 2.30 at W >= 512, rising as the window shrinks (about 2.41 at
        188, 2.44 at 128, 2.49 at 32); each prompt token's logprob is ``token_logprob(token,
        position, window)``, -ln(expected_ppl) spread by +-20% with the token and position.
    Speed: one request sleeps ``STUB_REQUEST_OVERHEAD_S + max_tokens * token_time(knobs,
        STUB_DECODE_STEP_S)``. A smaller window makes the target step cheaper (TPS rises);
        each drafted token costs a draft step growing with CENTROID_TOP_K, and CTK raises the
        acceptance (``acceptance(ctk)``), so CTK and the number of speculative tokens have
        an interior optimum. Sleeping, not computing: timings hold on a busy CPU. A streamed
        request's chunks are due at fixed times from its start (the overhead, then a token time
        each): a late wake-up delays the chunk it falls on, and the next ones catch up.
    Output: token ids are a function of the prompt (``generated_tokens``); text is "w<id> ...".

Other env
    PORT (required), HOST (default 127.0.0.1), SERVED_MODEL_NAME (default "stub"),
    STUB_DECODE_STEP_S (default 0.002), STUB_REQUEST_OVERHEAD_S (default 0),
    STUB_BOOT_DELAY_S (sleep before listening), STUB_VOCAB_SIZE (default 262144; larger ids
    get HTTP 400), STUB_REQUEST_LOG (append one JSON line per generation request: path, start,
    end (time.time()), completion_tokens, and the request's whole JSON body), STUB_PREFILL_S
    (a prefix cache: a prompt not served before in this boot sleeps this much longer, so repeated
    prompts are served faster, as vLLM's automatic prefix caching serves them), STUB_CHILD=1 (spawn a child process into the group
    and print "stub: child pid N"), STUB_CRASH_AFTER (default 3, see crash_mid),
    STUB_BOOT_EXIT_IF="CENTROID_TOP_K=7[,VAR=VALUE...]" (exit 1 at boot when any env var has
    that value: a knob value that fails a trial), STUB_ECHO_ENV="HF_TOKEN[,NAME...]" (print
    "stub: env NAME sha256 <hex digest of its value>", or "absent": proves a secret reached the
    stack without writing it anywhere), STUB_ECHO_ALL=1 (print the whole env and argv, values and
    all, as a careless stack would: what the sweep keeps of its log must hold none of it),
    STUB_IPC_SOCKET=1 (bind a UNIX socket named by a uuid in
    TMPDIR at boot, as vLLM does, and exit 1 if its path is too long), STUB_BOOT_NOISE=sd (noise from
    boot to boot: every request of a boot, streamed or not, takes its time / exp(N(0, sd)), drawn at boot;
    STUB_BOOT_SEED fixes the draw; STUB_BOOT_NOISE_IF="CENTROID_TOP_K=32:0.1[,VAR=VALUE:sd...]" gives a boot whose env has
    that value that sd instead: a configuration noisier than the rest), STUB_DRIFT=r (a server that warms up: the n-th chat request since boot runs
    (1 + r)^n times faster), STUB_HELDOUT_FACTOR=f (prompts whose text starts "Held-out" run f times
    faster: a held-out set that drafts better or worse than the public one), STUB_STALL_EVERY=n and
    STUB_STALL_S=s (every n-th chat step since boot takes s seconds longer: stalls among steady steps; a
    request's steps share its decode time evenly, ceil(tokens / tokens_per_step) of them), STUB_SERIAL=1
    (streamed requests served one at a time, as the reference stack serves: under load each waits for those
    before it, so its TTFT is known in advance).
    GET /version answers {"version": "stub-1", "stack": "stub"}.

Faults: STUB_FAULT, comma-separated
    boot_exit         exit 1 at once, with a message on stderr
    never_ready       /v1/models answers 503 forever
    crash_mid         the process exits during chat request STUB_CRASH_AFTER + 1 (warm-up counts)
    hang_after_ready  ready, but every POST hangs
    ignore_term       SIGTERM ignored (by the child of STUB_CHILD=1 too): only KILL stops it
    malformed_json    every POST answers 200 with truncated JSON
    http_500          every POST answers HTTP 500
    wrong_tokens      generated ids shifted by one (a greedy-identity break; PPL unchanged)
    no_usage          chat completions without "usage"
    no_metrics        /metrics answers 404

Helpers below build manifests and tiny data sets for tests (they import the engine; the server
itself does not).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from engine.config import BenchProfile, Manifest, get_profile, load_manifest
from engine.measurement import Measurement
from engine.stacks._vllm import VLLM

STACKS_DIR = Path(__file__).resolve().parent
STUB_MANIFEST = STACKS_DIR / "stub.json"


def stub_manifest(**env: str) -> Manifest:
    """``stub.json`` with env entries added or replaced (e.g. ``STUB_FAULT="crash_mid"``)."""
    manifest = load_manifest(STUB_MANIFEST)
    patched = manifest.model_copy(update={"env": {**manifest.env, **env}})
    return patched


def write_prompt_set(path: Path, count: int, *, heldout: bool = False) -> Path:
    head, key = ("Held-out question", "h") if heldout else ("Question", "p")
    records = [
        {
            "id": f"{key}{i}",
            "conversations": [
                {"from": "human", "value": f"{head} {i}: what is {i} plus {i + 1}? Explain briefly."},
                {"from": "gpt", "value": ""},
            ],
        }
        for i in range(count)
    ]
    path.write_text(json.dumps(records))
    return path


def write_ppl_refs(
    path: Path, count: int, *, context_len: int = 12, target_len: int = 20, vocab: int = 262144, seed: int = 0
) -> Path:
    rng = random.Random(seed)
    lines = [
        json.dumps(
            {
                "id": f"r{i}",
                "context_token_ids": [rng.randrange(vocab) for _ in range(context_len)],
                "target_token_ids": [rng.randrange(vocab) for _ in range(target_len + i)],
            }
        )
        for i in range(count)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def stub_profile(folder: Path, **overrides: Any) -> BenchProfile:
    """The quick profile shrunk for the stub, on tiny data sets written into ``folder`` (prompts
    enough for repeated runs that never time a prompt twice)."""
    prompts = write_prompt_set(folder / "prompts.json", 32)
    refs = write_ppl_refs(folder / "refs.jsonl", 6)
    heldout = write_prompt_set(folder / "heldout.json", 8, heldout=True)
    heldout_refs = write_ppl_refs(folder / "heldout_refs.jsonl", 6, seed=1)
    base = {
        "prompts": str(prompts),
        "refs": str(refs),
        "heldout_prompts": str(heldout),
        "heldout_refs": str(heldout_refs),
        "num_prompts": 4,
        "output_len": 32,
        "ppl_records": 4,
        "warmup_requests": 2,
        "warmup_output_len": 4,
        "warmup_pause_s": 0.2,
        "boot_timeout_s": 20.0,
        "request_timeout_s": 20.0,
    }
    return get_profile("quick").with_overrides({**base, **overrides}, source="stub_profile")


def measure_on_stub(tmp_path: Path, profile: BenchProfile, *, stages: Any = None, **env: str) -> tuple[Any, ...]:
    """Boot the stub, measure it as a trial does, stop it: (measurement, request log, launch, prompts,
    records); the stub logs every request it served to ``tmp_path/requests.jsonl``."""
    from engine.bench import measure
    from engine.launch import EngineProcess, build_launch

    launch = build_launch(stub_manifest(STUB_REQUEST_LOG=str(tmp_path / "requests.jsonl"), **env))
    prompts, records = profile.load_data()
    with EngineProcess.for_profile(launch, profile, log_path=tmp_path / "engine.log"):
        result: Measurement = measure(
            launch.base_url, model="stub", stack=VLLM, profile=profile, prompts=prompts, records=records, stages=stages
        )
    log = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return result, log, launch, prompts, records
