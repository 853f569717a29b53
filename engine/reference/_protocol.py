"""OpenAI/vLLM request shapes the reference server accepts, and its error type.

Fields the server does not use but clients commonly send (top_p, seed, ...) are ignored; fields
whose meaning it cannot honour are refused with a 400 that says why.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["APIError", "CompletionRequest", "ChatRequest", "parse_request", "ValidationError"]


class APIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}``, like vLLM."""

    def __init__(self, status: int, message: str, *, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.status}}


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    temperature: float | None = None
    n: int = 1
    ignore_eos: bool = False
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    return_token_ids: bool = False


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16  # OpenAI's and vLLM's default for completions
    echo: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    add_special_tokens: bool = True


class ChatRequest(_Common):
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    add_special_tokens: bool = False  # the chat template already writes <bos>
    logprobs: bool = False


def parse_request(model: type[BaseModel], payload: Any) -> Any:
    if not isinstance(payload, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5])
        raise APIError(400, f"invalid request: {problems}") from None
