"""Requests to the real reference server, fuzzed: every field wrong in every way, bodies that are
not JSON or not objects, other methods and paths. Each answer is a 4xx JSON error naming the
problem (or, for a request that happens to be valid, a 200); never a 5xx, never a dropped
connection, and ``/health`` answers after every one.

The server is booted once per session through the project's own engine harness, from the
``reference`` manifest, with ``MAX_MODEL_LEN`` small enough that a valid request cannot tie it up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.config import load_manifest
from engine.launch import EngineProcess, build_launch
from tests.fuzz.tally import record
from tests.fuzz.values import damaged, deep_json, fuzz_settings, json_values, nasty_text, numbers
from tests.security.kit import Listener, listeners, off_loopback

pytestmark = pytest.mark.slow

MODEL = "gemma-3-270m"
MAX_MODEL_LEN = 24  # a valid request generates a dozen or two tokens at most
VOCAB = 262144
CHAT = ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
COMPLETION = ("/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 1})
COMMON = [
    "model",
    "max_tokens",
    "temperature",
    "n",
    "ignore_eos",
    "stream",
    "stream_options",
    "stop",
    "stop_token_ids",
    "return_token_ids",
    "add_special_tokens",
    "logprobs",
]
# The fields each endpoint reads (others are ignored, as OpenAI's and vLLM's servers ignore them).
FIELDS = {
    CHAT[0]: [*COMMON, "messages", "max_completion_tokens"],
    COMPLETION[0]: [*COMMON, "prompt", "echo", "prompt_logprobs"],
}
# One wrong value of every JSON kind, plus the corners of numbers and text.
WRONG = [
    None,
    True,
    False,
    -1,
    0,
    2**31,
    2**64,
    10**30,
    1.5,
    -0.0,
    1e308,
    "",
    "x",
    "1",
    "é日本",
    "\u0000",
    [],
    [1, 2],
    [-1],
    [VOCAB],
    [[1], [2]],
    [""],
    [None],
    {},
    {"a": 1},
    {"role": "user"},
]


@dataclass(frozen=True)
class Server:
    engine: EngineProcess
    client: httpx.Client
    listening: list[Listener]  # its sockets right after boot


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Iterator[Server]:
    manifest = load_manifest("reference")
    manifest = manifest.model_copy(update={"env": {**manifest.env, "MAX_MODEL_LEN": str(MAX_MODEL_LEN)}})
    folder = tmp_path_factory.mktemp("reference")
    launch = build_launch(manifest, workdir=folder)
    with EngineProcess(launch, log_path=folder / "engine.log", boot_timeout_s=600) as engine:
        with httpx.Client(base_url=engine.base_url, timeout=120) as client:
            yield Server(engine=engine, client=client, listening=listeners([psutil.Process(engine.pid)]))
        assert engine.returncode is None, engine.log_tail()


def _send(server: Server, method: str, path: str, content: bytes) -> httpx.Response:
    client = server.client
    response = client.request(method, path, content=content, headers={"Content-Type": "application/json"})
    assert client.get("/health").status_code == 200, "the server stopped answering /health"
    assert server.engine.returncode is None, server.engine.log_tail()
    return response


def _judge(response: httpx.Response) -> None:
    status = response.status_code
    assert status < 500, f"{status}: {response.text[:500]}"
    if status == 200:
        if response.headers["content-type"].startswith("text/event-stream"):
            assert response.text.rstrip().endswith("data: [DONE]"), response.text[-300:]
        else:
            assert isinstance(response.json(), dict)
        return
    error = response.json()["error"]
    assert 400 <= status < 500 and isinstance(error["message"], str) and error["message"], response.text[:300]


def test_the_reference_server_listens_on_loopback_only(reference):
    # The security basics (tests/security) for the one server booted here.
    assert reference.listening and off_loopback(reference.listening) == []


@pytest.mark.parametrize(("path", "field"), [(path, field) for path, fields in FIELDS.items() for field in fields])
def test_every_field_wrong_in_every_way_is_a_4xx(reference, path, field):
    base = dict(CHAT[1] if path == CHAT[0] else COMPLETION[1])
    for value in [*WRONG, "<missing>"]:
        body = {k: v for k, v in base.items() if k != field}
        if value != "<missing>":
            body[field] = value
        record("reference requests", (path, body))
        _judge(_send(reference, "POST", path, json.dumps(body).encode()))


@pytest.mark.parametrize("path", [CHAT[0], COMPLETION[0]])
@pytest.mark.parametrize("body", [deep_json(100_000), "9" * 5000, "\udcff"], ids=["deep", "long-number", "surrogate"])
def test_a_body_the_json_parser_refuses_is_a_400(reference, path, body):
    # Before: RecursionError / ValueError escaped the parser and the server answered 500.
    response = _send(reference, "POST", path, body.encode("utf-8", "surrogatepass"))
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"], response.text


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, bytes]:
    path, base = draw(st.sampled_from([CHAT, COMPLETION]))
    body: Any = dict(base)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["field", "tokens", "messages", "unknown", "drop"]))
        if how == "field":
            body[draw(st.sampled_from(FIELDS[path]))] = draw(st.one_of(json_values, numbers))
        elif how == "tokens":
            body["prompt"] = draw(st.lists(st.one_of(st.integers(-5, VOCAB + 5), numbers), min_size=1, max_size=6))
        elif how == "messages":
            turn = st.fixed_dictionaries(
                {
                    "role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), json_values),
                    "content": st.one_of(nasty_text, json_values),
                }
            )
            body["messages"] = draw(st.one_of(st.lists(turn, max_size=3), json_values))
        elif how == "unknown":
            body[draw(nasty_text)] = draw(json_values)
        else:
            body.pop(draw(st.sampled_from(sorted(body) or ["model"])), None)
    return path, json.dumps(body).encode()


@fuzz_settings(80)
@given(request=requests())
def test_fuzzed_requests_are_answered_4xx_or_200(reference, request):
    path, content = request
    record("reference requests", request)
    _judge(_send(reference, "POST", path, content))


@fuzz_settings(40)
@given(data=st.data(), path=st.sampled_from([CHAT[0], COMPLETION[0]]))
def test_bodies_that_are_not_a_json_object_are_a_400(reference, data, path):
    content = data.draw(
        st.one_of(
            damaged(json.dumps(COMPLETION[1])),
            json_values.map(lambda v: json.dumps(v).encode()),
            st.just(deep_json(100_000).encode()),
            st.binary(max_size=64),
        )
    )
    record("reference request bodies", (path, content))
    response = _send(reference, "POST", path, content)
    _judge(response)


@fuzz_settings(30)
@given(
    method=st.sampled_from(["GET", "PUT", "DELETE", "PATCH", "POST"]),
    path=st.one_of(
        st.sampled_from(
            [
                "/v1/models",
                "/metrics",
                "/health",
                "/v1/chat/completions",
                "/",
                "/v1",
                "/v1/completions/",
                "/../etc/passwd",
                "/v1/models?x=%00",
            ]
        ),
        nasty_text.map(lambda t: "/" + t.replace("\x00", "")),
    ),
)
def test_other_methods_and_paths_are_answered_without_a_5xx(reference, method, path):
    record("reference methods and paths", (method, path))
    try:
        response = _send(reference, method, path, b"{}")
    except (httpx.InvalidURL, UnicodeEncodeError):
        return  # the client refuses to send it (a lone surrogate, say): nothing reached the server
    assert response.status_code < 500, f"{method} {path}: {response.status_code} {response.text[:300]}"
