"""The FastAPI application over one Routes (the worker's endpoints): every route of ROUTES with
its models, error answers as JSON, Swagger at /docs and Redoc at /redoc."""

from __future__ import annotations

import time
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import Histogram
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request

from connectql.api import models
from connectql.api.console import Console
from connectql.api.errors import answer, error_answer, match
from connectql.api.events import feed
from connectql.api.guard import Guard
from connectql.api.operations import ERRORS, OPERATIONS, openapi_extra
from connectql.api.routes import ROUTES, ApiError, Routes
from connectql.api.routes import Request as RouteRequest

DESCRIPTION = (
    "A connectql worker: connectors as Spark streaming queries, managed with SQL or Kafka"
    " Connect's REST shapes. With a token, send Authorization: Bearer <token>."
)


def build(routes: Routes, token: str | None):
    """The ASGI application: the web console beside the token and body guard around the FastAPI
    app."""
    return Console(Guard(api(routes), token))


def api(routes) -> FastAPI:
    """The FastAPI app of `routes` (its OpenAPI document: api(...).openapi())."""
    app = FastAPI(title="connectql", version="1", description=DESCRIPTION, redirect_slashes=False)
    latency = Histogram(
        "connectql_http_request_duration_seconds",
        "Time to answer an API request, by route.",
        ["method", "route", "status"],
        registry=routes.registry,
    )
    for method, path, handler in ROUTES:
        if handler != "openapi":  # FastAPI serves the generated document itself
            _add(app, routes, method, path, handler, latency)
    app.add_api_route(
        "/events",
        feed(routes),
        methods=["GET"],
        operation_id="events",
        summary="Connector state changes and progress as Server-Sent Events (?interval= s)",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}},
    )
    app.add_exception_handler(HTTPException, not_routed)
    app.add_exception_handler(ApiError, lambda request, e: error_answer(e))
    return app


def _add(app: FastAPI, routes: Routes, method: str, path: str, handler: str, latency) -> None:
    summary, ok, model, extra = OPERATIONS[handler]
    responses = {code: {"model": models.Error, "description": why} for code, why in ERRORS.items()}
    text = model is None
    if text:
        responses[ok] = {"content": {"text/plain": {"schema": {"type": "string"}}}}
    app.add_api_route(
        path,
        endpoint(getattr(routes, handler), lambda status: latency.labels(method, path, status)),
        methods=[method],
        operation_id=handler,
        summary=summary,
        status_code=ok,
        response_model=model,
        response_class=PlainTextResponse if text else JSONResponse,
        responses=responses,
        openapi_extra=openapi_extra(path, extra),
    )


def endpoint(call, latency):
    """The route's endpoint: the handler run on a worker thread (it may wait for the statement
    lock or the catalog), its (status, body) or error as the answer; its time in `latency`."""

    async def run(request: Request):
        started = time.perf_counter()
        response = await answered(request)
        latency(str(response.status_code)).observe(time.perf_counter() - started)
        return response

    async def answered(request: Request):
        req = RouteRequest(
            request.method,
            request.url.path,
            dict(request.path_params),
            query(request.url.query),
            await request.body(),
            request.headers.get("content-type", ""),
        )
        try:
            status, body = await run_in_threadpool(call, req)
        except Exception as e:
            return error_answer(e, f"{request.method} {request.url.path}")
        return answer(status, body)

    return run


def query(text: str) -> dict[str, str]:
    """The query's parameters; a repeated one's values joined with commas, so that
    ?expand=status&expand=info (Kafka Connect's form) reads as ?expand=status,info."""
    out: dict[str, str] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        out[key] = f"{out[key]},{value}" if key in out else value
    return out


async def not_routed(request: Request, exc: HTTPException):
    """404 and 405 in connectql's words (405 naming the methods the path takes)."""
    try:
        match(request.method, request.url.path)
    except ApiError as e:
        if not (e.status == 404 and exc.status_code == 405):  # else a route beside ROUTES
            return error_answer(e)
    allow = (exc.headers or {}).get("Allow", "")
    message = f"{request.method} is not allowed on {request.url.path}; use {allow}"
    body = {"error_code": exc.status_code, "message": message if allow else str(exc.detail)}
    return answer(exc.status_code, body, exc.headers)
