"""HTTP routes of the reference server (FastAPI). Bodies are parsed by hand so that malformed JSON
and invalid fields answer 400 with the project's error shape instead of FastAPI's 422."""

from __future__ import annotations

import importlib.metadata
import json
import tomllib
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from engine.reference._protocol import APIError, ChatRequest, CompletionRequest, parse_request
from engine.reference._service import Service


def _project_version() -> str:
    try:
        return importlib.metadata.version("gemma-sweep")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            return f"{tomllib.loads(pyproject.read_text())['project']['version']} (checkout)"
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


_VERSION = _project_version()


async def _payload(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, or a number too long for int()
        raise APIError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise APIError(400, "the request body is not valid JSON: nested too deeply") from None


def build_app(service: Service) -> FastAPI:
    app = FastAPI(title="gemma-sweep reference server", docs_url=None, redoc_url=None, openapi_url=None)
    cfg = service.cfg

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        error = APIError(500, f"internal error: {type(exc).__name__}: {exc}", kind="InternalServerError")
        return JSONResponse(error.body(), status_code=500)

    @app.exception_handler(404)
    async def _not_found(request: Request, _: Exception) -> JSONResponse:
        return JSONResponse(APIError(404, f"no route {request.url.path}", kind="NotFoundError").body(), status_code=404)

    @app.exception_handler(405)
    async def _bad_method(request: Request, _: Exception) -> JSONResponse:
        error = APIError(405, f"{request.method} is not allowed on {request.url.path}", kind="MethodNotAllowed")
        return JSONResponse(error.body(), status_code=405)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": cfg.served_model_name,
                    "object": "model",
                    "created": service.created,
                    "owned_by": "gemma-sweep",
                    "root": str(service.runtime.checkpoint_dir),
                    "max_model_len": cfg.max_model_len,
                }
            ],
        }

    @app.get("/version")
    async def version() -> dict[str, Any]:
        # vLLM's route, with what a measurement's provenance needs to tell this stack's builds apart
        return {
            "version": _VERSION,
            "stack": "gemma-sweep reference",
            "torch": torch.__version__,
            "device": str(service.runtime.model.device),
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        text = service.metrics.render(speculative=cfg.spec is not None)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = parse_request(CompletionRequest, await _payload(request))
        job = service.completion_job(req)
        if req.stream:
            return StreamingResponse(service.stream(req, job), media_type="text/event-stream")
        return JSONResponse(service.completion_response(req, job, await service.run(job)))

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        req = parse_request(ChatRequest, await _payload(request))
        job = service.chat_job(req)
        if req.stream:
            return StreamingResponse(service.stream(req, job), media_type="text/event-stream")
        return JSONResponse(service.chat_response(req, job, await service.run(job)))

    return app
