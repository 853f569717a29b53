"""What a misbehaving stack answers, fuzzed: the benchmark client either measures or raises
``BenchmarkError`` naming the request, so that ``run_trial`` records a failed trial. Anything
else escaping (a TypeError, a ValueError) would surface as "the worker raised" instead.

The answers come from a real HTTP server on loopback that replies with whatever the example holds.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.bench import measure_ppl, measure_tps, open_client, stream_pass
from engine.config import PplRecord, Prompt
from engine.stacks._vllm import VLLM_METRICS
from errors import BenchmarkError
from tests.fuzz.tally import record
from tests.fuzz.values import damaged, fuzz_settings, json_values, nasty_text, numbers

PROMPT = Prompt(id="p0", text="What is 2 + 3?")
REF = PplRecord(id="r0", context_token_ids=(2, 106), target_token_ids=(818, 5279))
CHAT = {"choices": [{"message": {"content": "five"}, "token_ids": [1, 2]}], "usage": {"completion_tokens": 2}}
PPL = {
    "choices": [
        {
            "prompt_logprobs": [
                None,
                {"106": {"logprob": -1.0}},
                {"818": {"logprob": -0.5}},
                {"5279": {"logprob": -0.25}},
            ]
        }
    ]
}
METRICS = "vllm:spec_decode_num_draft_tokens_total 10\nvllm:spec_decode_num_accepted_tokens_total 7\n"


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"{}"
    content_type: str = "application/json"
    metrics: str = METRICS
    requests: list[str] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answer: Answer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._reply(200, self.answer.metrics.encode("utf-8", "surrogatepass"), "text/plain")

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._reply(self.answer.status, self.answer.body, self.answer.content_type)


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, Answer]]:
    answer = Answer()
    handler = type("Handler", (_Handler,), {"answer": answer})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", answer
    finally:
        server.shutdown()
        server.server_close()


def _mutated(base: dict[str, Any], draw: st.DrawFn) -> Any:
    """The base answer with one value somewhere replaced by anything, or the whole of it."""
    doc = json.loads(json.dumps(base))
    node, key = doc, None
    path = draw(st.lists(st.integers(0, 3), max_size=4))
    for step in path:
        children = (
            list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        )
        if not children:
            break
        key, child = children[step % len(children)]
        if not isinstance(child, (dict, list)) or step == path[-1]:
            break
        node = child
    if key is None:
        return draw(json_values)
    node[key] = draw(st.one_of(json_values, numbers))
    return doc


@st.composite
def answers(draw: st.DrawFn, base: dict[str, Any]) -> bytes:
    """The right answer (so that what follows it is exercised too), one value changed, or damaged."""
    how = draw(st.sampled_from(["right", "changed", "changed", "damaged"]))
    if how == "damaged":
        return draw(damaged(json.dumps(base)))
    return json.dumps(base if how == "right" else _mutated(base, draw)).encode()


counter_values = st.one_of(numbers.map(str), st.sampled_from(["nan", "+Inf", "-1", "1e400", "x"]), nasty_text)
metrics_texts = st.one_of(
    st.builds(
        "vllm:spec_decode_num_draft_tokens_total {}\nvllm:spec_decode_num_accepted_tokens_total {}\n{}".format,
        counter_values,
        counter_values,
        nasty_text,
    ),
    nasty_text,
)


@fuzz_settings(80)
@given(body=answers(CHAT), status=st.sampled_from([200, 200, 200, 400, 500, 503]), metrics=metrics_texts)
def test_chat_answers_measure_or_are_a_benchmark_error(stack, body, status, metrics):
    url, answer = stack
    record("stack chat answers", (body, status, metrics))
    answer.body, answer.status, answer.content_type, answer.metrics = body, status, "application/json", metrics
    with open_client(url, timeout_s=5) as client:
        try:
            result = measure_tps(client, model="m", prompts=[PROMPT], output_len=2, metrics=VLLM_METRICS)
        except BenchmarkError as exc:
            assert "TPS prompt p0" in str(exc), str(exc)
            return
    assert math.isfinite(result.tps) and result.tps >= 0 and result.completion_tokens >= 0
    rate = result.acceptance_rate
    assert rate is None or math.isfinite(rate)


@fuzz_settings(50)
@given(body=answers(PPL), status=st.sampled_from([200, 200, 200, 400, 500]))
def test_ppl_answers_measure_or_are_a_benchmark_error(stack, body, status):
    url, answer = stack
    record("stack PPL answers", (body, status))
    answer.body, answer.status, answer.content_type = body, status, "application/json"
    with open_client(url, timeout_s=5) as client:
        try:
            result = measure_ppl(client, model="m", records=[REF])
        except BenchmarkError as exc:
            assert "PPL record r0" in str(exc), str(exc)
            return
    assert math.isfinite(result.ppl) and result.ppl > 0, result


@fuzz_settings(50)
@given(
    events=st.lists(
        st.one_of(
            json_values.map(json.dumps),
            nasty_text,
            st.just("[DONE]"),
            st.builds(lambda c: json.dumps({"choices": [{"delta": {"content": c}}]}), json_values),
        ),
        max_size=5,
    )
)
def test_stream_answers_measure_or_are_a_benchmark_error(stack, events):
    url, answer = stack
    record("stack stream answers", events)
    answer.status, answer.content_type = 200, "text/event-stream"
    answer.body = "".join(f"data: {e}\n\n" for e in events).encode("utf-8", "surrogatepass")
    with open_client(url, timeout_s=5) as client:
        try:
            ttfts, itls = stream_pass(client, model="m", prompts=[PROMPT], output_len=2)
        except BenchmarkError as exc:
            assert "streaming prompt p0" in str(exc), str(exc)
            return
    assert len(ttfts) == 1 and all(gap >= 0 for gap in itls)


# --- the answers that crashed the client before its fixes (regression tests) -------------------


def test_an_answer_nested_too_deeply_is_a_benchmark_error(stack):
    # Before: RecursionError from response.json() escaped post_json.
    url, answer = stack
    answer.status, answer.content_type, answer.body = 200, "application/json", ("[" * 100_000).encode()
    with open_client(url, timeout_s=5) as client, pytest.raises(BenchmarkError, match="answered malformed JSON"):
        measure_ppl(client, model="m", records=[REF])


@pytest.mark.parametrize("chunk", ["null", "[1]", "5", "9" * 5000])
def test_a_stream_chunk_that_is_not_an_object_is_a_benchmark_error(stack, chunk):
    # Before: AttributeError ('NoneType' object has no attribute 'get'), or ValueError for the
    # number too long for int().
    url, answer = stack
    answer.status, answer.content_type = 200, "text/event-stream"
    answer.body = f"data: {chunk}\n\ndata: [DONE]\n\n".encode()
    with (
        open_client(url, timeout_s=5) as client,
        pytest.raises(BenchmarkError, match="streaming prompt p0: .*stream chunk"),
    ):
        stream_pass(client, model="m", prompts=[PROMPT], output_len=2)


def test_counters_that_are_not_finite_count_as_absent(stack):
    # Before: ValueError (cannot convert float NaN to integer) after a successful TPS run.
    url, answer = stack
    answer.status, answer.content_type, answer.body = 200, "application/json", json.dumps(CHAT).encode()
    answer.metrics = METRICS.replace("10", "NaN")
    with open_client(url, timeout_s=5) as client:
        result = measure_tps(client, model="m", prompts=[PROMPT], output_len=2, metrics=VLLM_METRICS)
    assert result.completion_tokens == 2 and result.drafted_tokens is None and result.acceptance_rate is None
