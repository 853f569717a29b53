"""A test stack: a stdlib-only OpenAI-compatible server with known timing, PPL and faults.

Run as a script (``python tests/stacks/stub_server.py``); it imports nothing but the standard
library and answers ``/v1/models`` within a fraction of a second. See ``tests/stacks/__init__.py``
for the env it reads and the model it follows.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# vLLM's step-time histogram at the bounds this project asks a stack for (engine.stacks.STEP_BUCKETS: the
# stub imports nothing of the project's, so the rule is written again here; a test holds the two equal)
STEP_BUCKETS = tuple(float(f"{0.0005 * 1.25**k:.6g}") for k in range(56))
BASE_PPL = 2.30
DEFAULT_WINDOW = 512
FAULTS = {
    "boot_exit",
    "never_ready",
    "crash_mid",
    "hang_after_ready",
    "ignore_term",
    "malformed_json",
    "http_500",
    "wrong_tokens",
    "no_usage",
    "no_metrics",
}


# --- the model the stub follows (pure functions: tests compute expected values with them) ---


@dataclass(frozen=True)
class StubKnobs:
    window: int = DEFAULT_WINDOW
    centroid_top_k: int = 32
    num_speculative_tokens: int = 0  # 0: no SPECULATIVE_CONFIG, plain decoding

    @classmethod
    def from_env(cls, env: dict[str, str]) -> StubKnobs:
        window = int(env.get("SLIDING_WINDOW", DEFAULT_WINDOW))
        overrides = json.loads(env.get("HF_OVERRIDES") or "{}")
        window = int(overrides.get("text_config", overrides).get("sliding_window", window))
        spec = json.loads(env.get("SPECULATIVE_CONFIG") or "{}")
        return cls(
            window=window,
            centroid_top_k=int(env.get("CENTROID_TOP_K", 32)),
            num_speculative_tokens=int(spec.get("num_speculative_tokens", 0)),
        )


def expected_ppl(window: int) -> float:
    """PPL at the window, before the per-token spread: 2.30 at 512, about +6% at 128."""
    shrink = max(0, DEFAULT_WINDOW - min(window, DEFAULT_WINDOW)) / 384
    return BASE_PPL * (1 + 0.06 * shrink**1.5)


def token_logprob(token_id: int, position: int, window: int) -> float:
    """The logprob the stub reports for a prompt token: -ln(expected_ppl) spread by +-20%."""
    spread = 1 + 0.04 * (((token_id * 31 + position * 17) % 11) - 5)
    return -math.log(expected_ppl(window)) * spread


def acceptance(centroid_top_k: int) -> float:
    """Chance that one drafted token is accepted: more clusters kept, better drafts."""
    return 0.85 * (1 - math.exp(-centroid_top_k / 12))


def tokens_per_step(knobs: StubKnobs) -> float:
    k, p = knobs.num_speculative_tokens, acceptance(knobs.centroid_top_k)
    return (1 - p ** (k + 1)) / (1 - p) if k else 1.0


def token_time(knobs: StubKnobs, base_s: float) -> float:
    """Seconds per generated token. A smaller window reads less KV (faster target step); each
    drafted token costs a draft step that grows with K; accepted drafts share one target step."""
    k = knobs.num_speculative_tokens
    target = base_s * (0.55 + 0.45 * min(knobs.window, DEFAULT_WINDOW) / DEFAULT_WINDOW)
    draft = base_s * (0.04 + 0.002 * knobs.centroid_top_k)
    return (target * (1 + 0.03 * k) + k * draft) / tokens_per_step(knobs)


def request_time(knobs: StubKnobs, *, tokens: int, base_s: float, overhead_s: float) -> float:
    return overhead_s + tokens * token_time(knobs, base_s)


def spec_counts(knobs: StubKnobs, tokens: int) -> tuple[int, int]:
    """(drafted, accepted) for one request: each step drafts k and yields accepted + 1 tokens."""
    if not knobs.num_speculative_tokens or tokens == 0:
        return 0, 0
    steps = math.ceil(tokens / tokens_per_step(knobs))
    return steps * knobs.num_speculative_tokens, max(0, tokens - steps)


def generated_tokens(prompt_key: str, count: int, vocab: int, *, shift: int = 0) -> list[int]:
    seed = zlib.crc32(prompt_key.encode())
    return [(seed + 7919 * j + shift) % vocab for j in range(count)]


def word_ids(text: str, vocab: int) -> list[int]:
    return [zlib.crc32(word.encode()) % vocab for word in text.split()]


# --- the server ----------------------------------------------------------------------------


@dataclass
class StubState:
    knobs: StubKnobs
    model: str
    faults: frozenset[str]
    base_s: float
    overhead_s: float
    vocab: int
    crash_after: int
    request_log: str | None
    lock: threading.Lock
    prefill_s: float = 0.0  # a prompt not served before in this boot costs this much more
    boot_factor: float = 1.0  # this boot's speed: every request's time is divided by it
    drift: float = 0.0  # each chat request served makes the next this much faster (a warming server)
    heldout_factor: float = 1.0  # prompts whose text starts "Held-out" run this much faster
    stall_every: int = 0  # every n-th step since boot stalls (0: none) ...
    stall_s: float = 0.0  # ... for this much longer
    # serves one request at a time (STUB_SERIAL=1), as the reference stack does: a request's latency under load
    # is then its wait for the ones before it plus its own, known in advance
    serial: threading.Lock | None = None
    steps: int = 0  # chat steps served since boot
    step_counts: list[int] = field(default_factory=lambda: [0] * (len(STEP_BUCKETS) + 1))
    step_sum: float = 0.0
    chat_requests: int = 0
    drafted: int = 0
    accepted: int = 0
    drafts: int = 0  # speculative steps: one draft each
    seen: set[str] = field(default_factory=set)  # the prefix cache: prompts served since boot

    def step_times(self, tokens: int, seconds: float) -> list[float]:
        """One request's steps (``tokens`` at the knobs' tokens a step, ``seconds`` shared evenly), each stalled
        as the boot's count of steps says, observed in the step-time histogram but the first (the prefill's)."""
        n = max(1, math.ceil(tokens / tokens_per_step(self.knobs)))
        with self.lock:
            first, self.steps = self.steps, self.steps + n
            times = [
                seconds / n + (self.stall_s if self.stall_every and (first + i + 1) % self.stall_every == 0 else 0.0)
                for i in range(n)
            ]
            for gap in times[1:]:
                self.step_counts[bisect.bisect_left(STEP_BUCKETS, gap)] += 1
            self.step_sum += sum(times[1:])
        return times

    def prefill(self, prompt_key: str) -> float:
        with self.lock:
            cached = prompt_key in self.seen
            self.seen.add(prompt_key)
        return 0.0 if cached else self.prefill_s

    def log_request(self, path: str, start: float, end: float, tokens: int, body: dict) -> None:
        if not self.request_log:
            return
        line = json.dumps({"path": path, "start": start, "end": end, "completion_tokens": tokens, "body": body})
        with self.lock, open(self.request_log, "a") as fh:
            fh.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: StubState  # set on the class by main()

    def setup(self) -> None:
        super().setup()
        # As uvicorn and vLLM do: without it, Nagle's algorithm bunches stream chunks together.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass  # one line per request would drown the log tail that errors show

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode())

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "type": "BadRequestError", "code": status}})

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path == "/v1/models":
            if "never_ready" in self.state.faults:
                return self._error(503, "still loading")
            return self._json(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.state.model, "object": "model", "owned_by": "stub", "max_model_len": 4096}],
                },
            )
        if self.path == "/metrics" and "no_metrics" not in self.state.faults:
            return self._send(200, self._metrics().encode(), "text/plain; version=0.0.4")
        if self.path == "/health":
            return self._send(200, b"")
        if self.path == "/version":
            return self._json(200, {"version": "stub-1", "stack": "stub"})
        return self._error(404, f"no route {self.path}")

    def _metrics(self) -> str:
        label = f'{{model_name="{self.state.model}"}}'
        with self.state.lock:
            drafted, accepted, drafts = self.state.drafted, self.state.accepted, self.state.drafts
            counts, total = list(self.state.step_counts), self.state.step_sum
        name, cumulative, buckets = "vllm:inter_token_latency_seconds", 0, ""
        for bound, n in zip([*(repr(b) for b in STEP_BUCKETS), "+Inf"], counts):
            cumulative += n
            buckets += f'{name}_bucket{{model_name="{self.state.model}",le="{bound}"}} {cumulative}\n'
        return (
            f"# TYPE {name} histogram\n{buckets}{name}_sum{label} {total}\n{name}_count{label} {cumulative}\n"
            "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.\n"
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f"vllm:spec_decode_num_drafts_total{label} {float(drafts)}\n"
            "# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.\n"
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
            f"vllm:spec_decode_num_draft_tokens_total{label} {float(drafted)}\n"
            "# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.\n"
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
            f"vllm:spec_decode_num_accepted_tokens_total{label} {float(accepted)}\n"
        )

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        length = int(self.headers.get("Content-Length", 0))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            return self._error(400, "request body is not JSON")
        faults = self.state.faults
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self._error(404, f"no route {self.path}")
        if body.get("model") != self.state.model:
            return self._error(404, f"The model `{body.get('model')}` does not exist.")
        if "hang_after_ready" in faults:
            time.sleep(10**6)
        if "http_500" in faults:
            return self._error(500, "simulated internal error")
        if "malformed_json" in faults:
            return self._send(200, b'{"choices": [{"text": "trunc')
        if self.path == "/v1/chat/completions":
            return self._chat(body)
        return self._completion(body)

    def _generate(self, prompt_key: str, max_tokens: int) -> tuple[list[int], float, float]:
        state = self.state
        start = time.time()
        with state.lock:
            served = state.chat_requests
        speed = (
            state.boot_factor
            * (1 + state.drift) ** served
            * (state.heldout_factor if prompt_key.startswith("Held-out") else 1.0)
        )
        decode = (max_tokens * token_time(state.knobs, state.base_s)) / speed
        time.sleep(state.prefill(prompt_key) + state.overhead_s / speed + sum(state.step_times(max_tokens, decode)))
        shift = 1 if "wrong_tokens" in state.faults else 0
        ids = generated_tokens(prompt_key, max_tokens, state.vocab, shift=shift)
        drafted, accepted = spec_counts(state.knobs, max_tokens)
        with state.lock:
            state.drafted += drafted
            state.accepted += accepted
            state.drafts += drafted // (state.knobs.num_speculative_tokens or 1)
        return ids, start, time.time()

    def _chat(self, body: dict) -> None:
        state = self.state
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._error(400, "messages must be a non-empty list")
        with state.lock:
            state.chat_requests += 1
            crash = "crash_mid" in state.faults and state.chat_requests > state.crash_after
        if crash:
            print(f"stub: simulated crash at chat request {state.chat_requests}", file=sys.stderr, flush=True)
            os._exit(1)
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        max_tokens = int(body.get("max_tokens") or 16)
        if body.get("stream"):
            return self._chat_stream(prompt, max_tokens, body)
        ids, start, end = self._generate(prompt, max_tokens)
        state.log_request(self.path, start, end, max_tokens, body)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": " ".join(f"w{t}" for t in ids)},
            "finish_reason": "length",
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
        response = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(start),
            "model": state.model,
            "choices": [choice],
        }
        if "no_usage" not in state.faults:
            prompt_tokens = len(word_ids(prompt, state.vocab))
            response["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": max_tokens,
                "total_tokens": prompt_tokens + max_tokens,
            }
        self._json(200, response)

    def _chat_stream(self, prompt: str, max_tokens: int, body: dict) -> None:
        state = self.state
        shift = 1 if "wrong_tokens" in state.faults else 0
        ids = generated_tokens(prompt, max_tokens, state.vocab, shift=shift)
        per_token = token_time(state.knobs, state.base_s) / state.boot_factor  # a boot's speed, streamed or not
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if state.serial is not None:
            with state.serial:
                return self._stream_tokens(prompt, max_tokens, body, ids, per_token)
        return self._stream_tokens(prompt, max_tokens, body, ids, per_token)

    def _stream_tokens(self, prompt: str, max_tokens: int, body: dict, ids: list[int], per_token: float) -> None:
        state = self.state
        start = time.time()
        # each chunk is due at a fixed time from the start: a busy machine's late wake-ups (and the chunks' own CPU)
        # delay the chunk they fall on, not every chunk after it, so a request's length stays what the model says
        due = time.monotonic() + state.overhead_s / state.boot_factor
        for token in ids:
            due += per_token
            time.sleep(max(0.0, due - time.monotonic()))
            chunk = {
                "object": "chat.completion.chunk",
                "model": state.model,
                "choices": [{"index": 0, "delta": {"content": f" w{token}"}, "finish_reason": None}],
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": len(prompt.split()),
                "completion_tokens": max_tokens,
                "total_tokens": len(prompt.split()) + max_tokens,
            }
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        drafted, accepted = spec_counts(state.knobs, max_tokens)
        with state.lock:
            state.drafted += drafted
            state.accepted += accepted
            state.drafts += drafted // (state.knobs.num_speculative_tokens or 1)
        state.log_request(self.path, start, time.time(), max_tokens, body)

    def _completion(self, body: dict) -> None:
        state = self.state
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt_ids = word_ids(prompt, state.vocab)
        elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            prompt_ids = prompt
        else:
            return self._error(400, "prompt must be a string or a list of token ids")
        if any(not 0 <= t < state.vocab for t in prompt_ids):
            return self._error(400, f"token id out of vocabulary (size {state.vocab})")
        max_tokens = int(body.get("max_tokens") or 16)
        ids, start, end = self._generate(",".join(map(str, prompt_ids)), max_tokens)
        state.log_request(self.path, start, end, max_tokens, body)
        choice: dict = {"index": 0, "text": " ".join(f"w{t}" for t in ids), "logprobs": None, "finish_reason": "length"}
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
        if body.get("prompt_logprobs") is not None:
            choice["prompt_logprobs"] = self._prompt_logprobs(prompt_ids)
        self._json(
            200,
            {
                "id": "cmpl-stub",
                "object": "text_completion",
                "created": int(start),
                "model": state.model,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": max_tokens,
                    "total_tokens": len(prompt_ids) + max_tokens,
                },
            },
        )

    def _prompt_logprobs(self, prompt_ids: list[int]) -> list:
        # vLLM's shape: None for the first token, then {token id: {logprob, rank, decoded_token}}
        # holding the prompt token and the top-1 alternative.
        window = self.state.knobs.window
        out: list = [None]
        for position, token in enumerate(prompt_ids[1:], start=1):
            logprob = token_logprob(token, position, window)
            rival = (token + 1) % self.state.vocab
            out.append(
                {
                    str(rival): {"logprob": logprob + 0.1, "rank": 1, "decoded_token": f"w{rival}"},
                    str(token): {"logprob": logprob, "rank": 2, "decoded_token": f"w{token}"},
                }
            )
        return out


def _spawn_child(ignore_term: bool) -> None:
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(3600)\n"
    child = subprocess.Popen([sys.executable, "-c", code])
    print(f"stub: child pid {child.pid}", file=sys.stderr, flush=True)


def _boot_exit_requested(env: dict[str, str]) -> str | None:
    for condition in filter(None, env.get("STUB_BOOT_EXIT_IF", "").split(",")):
        key, _, value = condition.partition("=")
        if env.get(key.strip()) == value.strip():
            return condition
    return None


def _echo_env(env: dict[str, str]) -> None:
    if env.get("STUB_ECHO_ALL") == "1":  # a careless stack: its whole env and argv, values and all
        print(f"stub: argv {sys.argv}", file=sys.stderr, flush=True)
        for name, value in sorted(env.items()):
            print(f"stub: env {name}={value}", file=sys.stderr, flush=True)
    # A digest, never the value: a test proves the stack got a secret without the log holding it.
    for name in filter(None, (n.strip() for n in env.get("STUB_ECHO_ENV", "").split(","))):
        seen = f"sha256 {hashlib.sha256(env[name].encode()).hexdigest()}" if name in env else "absent"
        print(f"stub: env {name} {seen}", file=sys.stderr, flush=True)


def _bind_ipc_socket(folder: str) -> socket.socket:
    # As vLLM binds its ZMQ IPC sockets: a uuid-named UNIX socket in TMPDIR, fatal if too long.
    path = os.path.join(folder, str(uuid.uuid4()))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    except OSError as exc:
        sys.exit(f"stub: cannot bind the IPC socket {path!r} ({len(path)} bytes): {exc}")
    print(f"stub: IPC socket {path}", file=sys.stderr, flush=True)
    return sock


def _boot_noise(env: dict[str, str]) -> float:
    """STUB_BOOT_NOISE, or the sd STUB_BOOT_NOISE_IF="VAR=VALUE:sd[,...]" names for a boot whose env has VAR=VALUE:
    a configuration noisier than the others."""
    for rule in filter(None, env.get("STUB_BOOT_NOISE_IF", "").split(",")):
        condition, sd = rule.rsplit(":", 1)
        name, value = condition.split("=", 1)
        if env.get(name) == value:
            return float(sd)
    return float(env.get("STUB_BOOT_NOISE", 0.0))


def _boot_factor(env: dict[str, str]) -> float:
    """This boot's speed: exp(N(0, sd)) (``_boot_noise``), drawn afresh at every boot (STUB_BOOT_SEED fixes it)."""
    sd = _boot_noise(env)
    if not sd:
        return 1.0
    seed = env.get("STUB_BOOT_SEED")
    rng = random.Random(int(seed) if seed else int.from_bytes(os.urandom(8), "little"))
    factor = math.exp(rng.gauss(0.0, sd))
    print(f"stub: boot speed factor {factor:.4f}", file=sys.stderr, flush=True)
    return factor


def main() -> None:
    env = dict(os.environ)
    _echo_env(env)
    faults = frozenset(filter(None, (f.strip() for f in env.get("STUB_FAULT", "").split(","))))
    unknown = faults - FAULTS
    if unknown:
        sys.exit(f"stub: unknown STUB_FAULT {sorted(unknown)}; valid: {sorted(FAULTS)}")
    if "boot_exit" in faults:
        sys.exit("stub: simulated boot failure (STUB_FAULT=boot_exit)")
    condition = _boot_exit_requested(env)
    if condition:
        sys.exit(f"stub: refusing to boot with {condition} (STUB_BOOT_EXIT_IF)")
    if env.get("STUB_IPC_SOCKET") == "1":
        _ipc = _bind_ipc_socket(env.get("TMPDIR", "/tmp"))
    if "ignore_term" in faults:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if env.get("STUB_CHILD") == "1":
        _spawn_child(ignore_term="ignore_term" in faults)
    time.sleep(float(env.get("STUB_BOOT_DELAY_S", 0)))
    knobs = StubKnobs.from_env(env)
    Handler.state = StubState(
        knobs=knobs,
        model=env.get("SERVED_MODEL_NAME", "stub"),
        faults=faults,
        base_s=float(env.get("STUB_DECODE_STEP_S", 0.002)),
        overhead_s=float(env.get("STUB_REQUEST_OVERHEAD_S", 0.0)),
        vocab=int(env.get("STUB_VOCAB_SIZE", 262144)),
        crash_after=int(env.get("STUB_CRASH_AFTER", 3)),
        request_log=env.get("STUB_REQUEST_LOG"),
        lock=threading.Lock(),
        prefill_s=float(env.get("STUB_PREFILL_S", 0.0)),
        boot_factor=_boot_factor(env),
        drift=float(env.get("STUB_DRIFT", 0.0)),
        heldout_factor=float(env.get("STUB_HELDOUT_FACTOR", 1.0)),
        stall_every=int(env.get("STUB_STALL_EVERY", 0)),
        stall_s=float(env.get("STUB_STALL_S", 0.0)),
        serial=threading.Lock() if env.get("STUB_SERIAL") == "1" else None,
    )
    host, port = env.get("HOST", "127.0.0.1"), int(env["PORT"])
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    print(
        f"stub: serving {Handler.state.model!r} on {host}:{port} with {knobs}, faults {sorted(faults)}",
        file=sys.stderr,
        flush=True,
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
