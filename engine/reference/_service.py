"""Requests -> decoding jobs -> OpenAI/vLLM-shaped responses. One job decodes at a time.

The decoder runs on a single worker thread, so requests queue in arrival order while the event
loop keeps answering /health, /v1/models and /metrics.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.reference._config import MAX_LOGPROBS, ServeConfig
from engine.reference._decode import Generation
from engine.reference._detokenize import IncrementalText
from engine.reference._logprobs import Scored, score
from engine.reference._metrics import Metrics
from engine.reference._protocol import APIError, ChatRequest, CompletionRequest
from engine.reference.runtime import Runtime


class _Cancelled(Exception):
    """The client went away mid-stream; the job stops at its next token."""


@dataclass
class Job:
    prompt: list[int]
    max_tokens: int
    stop_ids: frozenset[int]
    keep_hidden: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)


class Service:
    def __init__(self, cfg: ServeConfig, runtime: Runtime, tokenizer: Any) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.decoder = runtime.decoder(spec=cfg.spec, centroid_top_k=cfg.centroid_top_k)
        self.eos_ids = frozenset(runtime.model.cfg.eos_ids)
        self.vocab = runtime.model.cfg.vocab
        self.metrics = Metrics(model_name=cfg.served_model_name)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
        self.created = int(time.time())

    # ------------------------------------------------------------------ validation

    def _check_common(self, req: CompletionRequest | ChatRequest) -> None:
        if req.model is not None and req.model != self.cfg.served_model_name:
            raise APIError(
                404,
                f"The model `{req.model}` does not exist (this server serves `{self.cfg.served_model_name}`).",
                kind="NotFoundError",
            )
        if req.temperature not in (None, 0, 0.0):
            raise APIError(
                400,
                f"temperature={req.temperature} is not supported: only greedy decoding (temperature 0) is supported",
            )
        if req.n != 1:
            raise APIError(400, f"n={req.n} is not supported: one choice per request")
        if req.stop:
            raise APIError(400, "stop strings are not supported (stop_token_ids are)")
        bad = [t for t in req.stop_token_ids or [] if not 0 <= t < self.vocab]
        if bad:
            raise APIError(400, f"stop_token_ids out of the vocabulary [0, {self.vocab}): {bad[:5]}")

    def _check_length(self, prompt: list[int], max_tokens: int | None) -> int:
        limit, n = self.cfg.max_model_len, len(prompt)
        if n == 0:
            raise APIError(400, "the prompt is empty")
        if n > limit:
            raise APIError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your request has {n} input tokens.",
            )
        if max_tokens is None:
            max_tokens = limit - n
        if max_tokens < 1:
            raise APIError(400, f"max_tokens must be at least 1, got {max_tokens}")
        if n + max_tokens > limit:
            raise APIError(
                400,
                f"'max_tokens' is too large: {max_tokens}. This model's maximum context length is {limit} tokens "
                f"and your request has {n} input tokens ({max_tokens} > {limit} - {n}).",
            )
        return max_tokens

    def _stops(self, req: CompletionRequest | ChatRequest) -> frozenset[int]:
        stops = frozenset(req.stop_token_ids or ())
        return stops if req.ignore_eos else stops | self.eos_ids

    def completion_job(self, req: CompletionRequest) -> Job:
        self._check_common(req)
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise APIError(
                    400, f"batched prompts are not supported: send one prompt per request (got {len(prompt)})"
                )
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.tokenizer(prompt, add_special_tokens=req.add_special_tokens).input_ids
        else:
            ids = list(prompt)
            bad = [t for t in ids if not 0 <= t < self.vocab]
            if bad:
                raise APIError(400, f"prompt token ids out of the vocabulary [0, {self.vocab}): {bad[:5]}")
        for name, value in (("logprobs", req.logprobs), ("prompt_logprobs", req.prompt_logprobs)):
            if value is not None and not 0 <= value <= MAX_LOGPROBS:
                raise APIError(400, f"{name}={value} is out of range: must be between 0 and {MAX_LOGPROBS}")
        if req.echo and req.stream:
            raise APIError(400, "echo is not supported with stream")
        max_tokens = self._check_length(ids, req.max_tokens)
        wants_hidden = req.prompt_logprobs is not None or req.logprobs is not None
        return Job(prompt=ids, max_tokens=max_tokens, stop_ids=self._stops(req), keep_hidden=wants_hidden)

    def chat_job(self, req: ChatRequest) -> Job:
        self._check_common(req)
        if req.logprobs:
            raise APIError(400, "logprobs are not supported on chat completions (use /v1/completions)")
        if not req.messages:
            raise APIError(400, "messages must not be empty")
        try:
            text = self.tokenizer.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # jinja2 errors from the template: the messages are malformed
            raise APIError(400, f"cannot apply the chat template to these messages: {exc}") from None
        ids = self.tokenizer(text, add_special_tokens=req.add_special_tokens).input_ids
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        return Job(prompt=ids, max_tokens=self._check_length(ids, max_tokens), stop_ids=self._stops(req))

    # ------------------------------------------------------------------ running

    async def run(self, job: Job, *, on_token: Callable[[int], object] | None = None) -> Generation:
        self.metrics.queued()

        def work() -> Generation:
            self.metrics.started()
            ok, gen = False, None
            try:

                def each(token: int) -> None:
                    if job.cancel.is_set():
                        raise _Cancelled
                    if on_token is not None:
                        on_token(token)

                with torch.inference_mode():
                    gen = self.decoder.generate(
                        job.prompt,
                        max_new_tokens=job.max_tokens,
                        stop_ids=job.stop_ids,
                        on_token=each,
                        keep_hidden=job.keep_hidden,
                    )
                ok = True
                return gen
            finally:
                self.metrics.finished(
                    prompt_tokens=len(job.prompt),
                    generation_tokens=len(gen.token_ids) if gen else 0,
                    stats=gen.stats if gen else None,
                    ok=ok,
                    step_s=gen.step_s if gen else (),
                )

        return await asyncio.get_running_loop().run_in_executor(self._worker, work)

    def warm_up(self, *, prompts: int, max_tokens: int) -> None:
        """Synthetic chat requests before the server listens (untimed, not counted in /metrics)."""
        for i in range(prompts):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": f"Warm-up request {i}: explain in one paragraph why the sky is blue."}],
                tokenize=False,
                add_generation_prompt=True,
            )
            ids = self.tokenizer(text, add_special_tokens=False).input_ids
            with torch.inference_mode():
                self.decoder.generate(ids, max_new_tokens=max_tokens)

    # ------------------------------------------------------------------ responses

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @staticmethod
    def _usage(job: Job, gen: Generation) -> dict[str, int]:
        n, m = len(job.prompt), len(gen.token_ids)
        return {"prompt_tokens": n, "completion_tokens": m, "total_tokens": n + m}

    def _scored(self, job: Job, gen: Generation, *, top_n: int) -> tuple[list[Scored], list[Scored]]:
        """Scores of prompt tokens 1.. and of generated tokens under the full head."""
        row_of = self.runtime.model.head_pos
        heads = self.runtime.heads
        with torch.inference_mode():
            prompt = (
                score(heads, gen.prompt_hidden, job.prompt[1:], top_n=top_n, row_of_token=row_of)
                if gen.prompt_hidden is not None
                else []
            )
            new = (
                score(heads, torch.cat(gen.hidden), gen.token_ids, top_n=top_n, row_of_token=row_of)
                if gen.hidden
                else []
            )
        return prompt, new

    def _decoded(self, token: int) -> str:
        return self.tokenizer.decode([token])

    def _prompt_logprobs(self, scored: list[Scored]) -> list[dict[str, dict[str, Any]] | None]:
        out: list[dict[str, dict[str, Any]] | None] = [None]
        for s in scored:
            entry = {
                str(t): {"logprob": lp, "rank": r + 1, "decoded_token": self._decoded(t)}
                for r, (t, lp) in enumerate(s.top)
            }
            entry.setdefault(
                str(s.token), {"logprob": s.logprob, "rank": s.rank, "decoded_token": self._decoded(s.token)}
            )
            out.append(entry)
        return out

    def _legacy_logprobs(self, tokens: list[int], scored: list[Scored | None], *, offset: int) -> dict[str, Any]:
        """OpenAI completions ``logprobs`` object (tokens, token_logprobs, top_logprobs, text_offset)."""
        strings = [self._decoded(t) for t in tokens]
        offsets, pos = [], offset
        for s in strings:
            offsets.append(pos)
            pos += len(s)
        return {
            "tokens": strings,
            "token_logprobs": [s.logprob if s else None for s in scored],
            "top_logprobs": [{self._decoded(t): lp for t, lp in s.top} if s else None for s in scored],
            "text_offset": offsets,
        }

    def completion_response(self, req: CompletionRequest, job: Job, gen: Generation) -> dict[str, Any]:
        text = self._text(gen.token_ids)
        prompt_text = self._text(job.prompt) if req.echo else ""
        choice: dict[str, Any] = {
            "index": 0,
            "text": prompt_text + text,
            "logprobs": None,
            "finish_reason": gen.finish_reason,
            "stop_reason": None,
        }
        if req.prompt_logprobs is not None or req.logprobs is not None:
            top_n = max(req.prompt_logprobs or 0, req.logprobs or 0)
            prompt_scored, new_scored = self._scored(job, gen, top_n=top_n)
            if req.prompt_logprobs is not None:
                choice["prompt_logprobs"] = self._prompt_logprobs(
                    [Scored(s.token, s.logprob, s.rank, s.top[: req.prompt_logprobs]) for s in prompt_scored]
                )
            if req.logprobs is not None:
                trim = lambda s: Scored(s.token, s.logprob, s.rank, s.top[: req.logprobs])  # noqa: E731
                if req.echo:
                    tokens, scored = (
                        job.prompt + gen.token_ids,
                        [None, *map(trim, prompt_scored), *map(trim, new_scored)],
                    )
                else:
                    tokens, scored = gen.token_ids, list(map(trim, new_scored))
                choice["logprobs"] = self._legacy_logprobs(tokens, scored, offset=0)
        if req.return_token_ids:
            choice["prompt_token_ids"] = job.prompt
            choice["token_ids"] = gen.token_ids
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.cfg.served_model_name,
            "choices": [choice],
            "usage": self._usage(job, gen),
        }

    def chat_response(self, req: ChatRequest, job: Job, gen: Generation) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": self._text(gen.token_ids)},
            "logprobs": None,
            "finish_reason": gen.finish_reason,
            "stop_reason": None,
        }
        if req.return_token_ids:
            choice["token_ids"] = gen.token_ids
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.cfg.served_model_name,
            "choices": [choice],
            "usage": self._usage(job, gen),
            "prompt_token_ids": job.prompt if req.return_token_ids else None,
        }

    async def stream(self, req: CompletionRequest | ChatRequest, job: Job) -> AsyncIterator[str]:
        """SSE events: content deltas, a finishing chunk, usage if asked, then [DONE]."""
        chat = isinstance(req, ChatRequest)
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        task = asyncio.ensure_future(self.run(job, on_token=lambda t: loop.call_soon_threadsafe(queue.put_nowait, t)))

        def finished(t: asyncio.Future) -> None:
            queue.put_nowait(None)
            if not t.cancelled():
                t.exception()  # retrieved here; re-raised below through task.result() if we are still streaming

        task.add_done_callback(finished)

        def event(choices: list[dict[str, Any]], **extra: Any) -> str:
            body = {
                "id": ident,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": self.cfg.served_model_name,
                "choices": choices,
                **extra,
            }
            return f"data: {json.dumps(body)}\n\n"

        def delta_choice(text: str, tokens: list[int], finish: str | None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
            choice.update({"delta": {"content": text}} if chat else {"text": text})
            if req.return_token_ids:
                choice["token_ids"] = tokens
            return choice

        streamed = IncrementalText(self._text)
        ids = streamed.ids
        sent_chars, sent_tokens = 0, 0
        try:
            if chat:
                yield event(
                    [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            while (token := await queue.get()) is not None:
                new = streamed.add(token)
                if new is None:  # an incomplete UTF-8 sequence: wait for the next token
                    continue
                yield event([delta_choice(new, ids[sent_tokens:], None)])
                sent_chars, sent_tokens = sent_chars + len(new), len(ids)
            try:
                gen = task.result()
            except Exception as exc:  # the decoder failed mid-stream: say so in-band, as vLLM does
                yield f"data: {json.dumps(APIError(500, f'decoding failed: {exc}', kind='InternalServerError').body())}\n\n"
                return
            text = self._text(gen.token_ids)
            yield event([delta_choice(text[sent_chars:], ids[sent_tokens:], gen.finish_reason)])
            if (req.stream_options or {}).get("include_usage"):
                yield event([], usage=self._usage(job, gen))
            yield "data: [DONE]\n\n"
        finally:
            job.cancel.set()  # no-op once finished; stops the decoder if the client left early
