"""Records what more of today's instrumentations export when an LLM call is retried or falls back.

Writes tests/fixtures/instrumented/<library>-<shape>.jsonl (one OTLP JSON ExportTraceServiceRequest
per line, as the OpenTelemetry Collector's file exporter writes them, hex ids) and, next to each,
<library>-<shape>.truth.json: the fake provider's request log in the order it received the
requests, and whether the exported spans show the individual tries. CI replays the committed
files; only re-recording needs Python and Node. The libraries need three virtualenvs, as their
pins disagree:

    python3 -m venv /tmp/rec-venv
    /tmp/rec-venv/bin/pip install openai==3.57.0 anthropic==2.15.0 opentelemetry-sdk==1.45.2 \
        opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-proto==1.45.2 \
        opentelemetry-instrumentation-httpx==0.66b2 opentelemetry-instrumentation-openai-v2==2.4b0 \
        opentelemetry-instrumentation-openai==0.62.4 opentelemetry-instrumentation-anthropic==0.62.4 \
        opentelemetry-util-genai==1.1b0 httpx==0.28.1
    /tmp/rec-venv/bin/python examples/record_instrumentations.py \
        --library openai-v2 openllmetry-anthropic anthropic-sdk anthropic-sdk-and-openllmetry

    python3 -m venv /tmp/rec-venv-pydantic
    /tmp/rec-venv-pydantic/bin/pip install 'pydantic-ai-slim[openai]==2.68.0' \
        opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2 \
        opentelemetry-proto==1.45.2 opentelemetry-instrumentation-httpx==0.66b2
    /tmp/rec-venv-pydantic/bin/python examples/record_instrumentations.py --library pydantic-ai

    python3 -m venv /tmp/rec-venv-litellm
    /tmp/rec-venv-litellm/bin/pip install litellm==1.110.2 opentelemetry-sdk==1.45.2 \
        opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-proto==1.45.2 \
        opentelemetry-instrumentation-httpx==0.66b2
    /tmp/rec-venv-litellm/bin/python examples/record_instrumentations.py --library litellm

    (cd examples/vercel && npm ci)
    /tmp/rec-venv/bin/python examples/record_instrumentations.py --library vercel

(`--library X --shape Y` records one file; the exact versions each recording used are in
tests/fixtures/instrumented/README.md.) opentelemetry-instrumentation-openai-v2 2.4b0 imports
httpx, which openai-python 3 (httpx2) no longer brings, and modules that
opentelemetry-util-genai 1.2b0 renamed: hence the two extra pins.

Everything stays on 127.0.0.1: a fake provider answers OpenAI chat completions (plain and
streamed) and Anthropic messages, failing the tries the shape plans with 429/500 and logging every
request it receives; a tiny OTLP/HTTP endpoint captures the export. The Vercel shapes run
examples/vercel/record_vercel.mjs in Node against the same two servers. Span times are shifted so
each file starts at 2026-08-25T12:00:00Z, three days after the shipped pricing snapshot was checked;
ids, order and durations are as exported. The helpers that convert the export are those of
examples/record_instrumented.py.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_instrumented import (  # noqa: E402
    BASE_NANOS,
    Capture,
    earliest_start,
    hex_ids,
    otlp_json,
    serve,
    shift_times,
)

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "fixtures" / "instrumented"
MESSAGES = [{"role": "user", "content": "Summarise this support ticket."}]


class FakeProvider(BaseHTTPRequestHandler):
    """OpenAI chat completions and Anthropic messages. Each request takes the next planned failure
    status (None: answer), unless its model always fails; `log` keeps (model, status) of each."""

    failures = []  # statuses (None = succeed), consumed in order by requests of any model
    always_fail = set()  # models that always answer 500
    log = []
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        model = body.get("model", "unknown")
        anthropic = self.path.rstrip("/").endswith("/messages")
        with FakeProvider.lock:
            status = None
            if model in FakeProvider.always_fail:
                status = 500
            elif FakeProvider.failures:
                status = FakeProvider.failures.pop(0)
            FakeProvider.log.append({"model": model, "status": status or 200})
        if status is not None:
            if anthropic:
                kind = "rate_limit_error" if status == 429 else "api_error"
                payload = {"type": "error", "error": {"type": kind, "message": f"fake {status}"}}
            else:
                payload = {"error": {"message": f"fake upstream error {status}",
                                     "type": "rate_limit_error" if status == 429 else "server_error"}}
            self.reply(status, payload, {"retry-after-ms": "10", "retry-after": "0"})
        elif anthropic:
            self.reply(200, {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": "A short summary."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                # 600 + 400 read from the cache + 200 written to it = 1200 input tokens.
                "usage": {"input_tokens": 600, "cache_read_input_tokens": 400,
                          "cache_creation_input_tokens": 200, "output_tokens": 85},
            }, {"request-id": "req_fake"})
        elif body.get("stream"):
            self.stream_openai(model, (body.get("stream_options") or {}).get("include_usage"))
        else:
            self.reply(200, {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": 1787659200,
                "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "A short summary."}}],
                "usage": openai_usage(),
            }, {})

    def stream_openai(self, model, include_usage):
        def chunk(choices, **extra):
            return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1787659200,
                    "model": model, "choices": choices, **extra}

        events = [
            chunk([{"index": 0, "delta": {"role": "assistant", "content": "A short "},
                    "finish_reason": None}]),
            chunk([{"index": 0, "delta": {"content": "summary."}, "finish_reason": None}]),
            chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
        ]
        if include_usage:
            events.append(chunk([], usage=openai_usage()))
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        data += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def reply(self, status, payload, headers):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class ChunkedCapture(Capture):
    """Capture that also reads chunked and gzip bodies (OpenTelemetry JS sends them)."""

    def do_POST(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        Capture.received.append(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


def openai_usage():
    return {"prompt_tokens": 1200, "completion_tokens": 85, "total_tokens": 1285,
            "prompt_tokens_details": {"cached_tokens": 400}}


class Session:
    """The servers and the OpenTelemetry SDK of one recording."""

    def __init__(self, httpx=False, stable_http=False):
        if stable_http:
            os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "http"
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.fake = serve(FakeProvider)
        self.capture = serve(Capture)
        self.base = f"http://127.0.0.1:{self.fake.server_port}"
        self.otlp = f"http://127.0.0.1:{self.capture.server_port}/v1/traces"
        self.provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=self.otlp)))
        trace.set_tracer_provider(self.provider)
        self.tracer = trace.get_tracer("support-bot")
        if httpx:
            instrument_httpx()

    def finish(self, name, description, shows_tries):
        self.provider.force_flush()
        self.provider.shutdown()
        write(name, Capture.received, description, shows_tries)


def instrument_httpx():
    """Instruments httpx and httpx2 (openai-python 3 and anthropic 2 send with httpx2, other
    libraries with httpx), whichever are installed."""
    from opentelemetry.instrumentation import httpx as httpx_instrumentation

    try:
        import httpx  # noqa: F401

        httpx_instrumentation.HTTPXClientInstrumentor().instrument()
    except ImportError:
        pass
    try:
        import httpx2  # noqa: F401

        httpx_instrumentation.HTTPX2ClientInstrumentor().instrument()
    except (ImportError, AttributeError):
        pass


def write(name, bodies, description, shows_tries):
    exports = [hex_ids(otlp_json(body)) for body in bodies]
    starts = [s for s in (earliest_start(e) for e in exports) if s is not None]
    delta = BASE_NANOS - min(starts)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"{name}.jsonl"
    with open(path, "w") as out:
        for export in exports:
            out.write(json.dumps(shift_times(export, delta), separators=(",", ":")) + "\n")
    requests = ",\n".join("    " + json.dumps(r) for r in FakeProvider.log)
    with open(OUT_DIR / f"{name}.truth.json", "w") as out:
        out.write(f'{{\n  "description": {json.dumps(description)},\n'
                  f'  "requests": [\n{requests}\n  ],\n'
                  f'  "shows_tries": {json.dumps(shows_tries)}\n}}\n')
    print(f"wrote {path.relative_to(ROOT)}: {len(exports)} export requests, "
          f"{len(FakeProvider.log)} provider requests")


# ---------------------------------------------------------------------------------------------
# OpenAI-python shapes, shared by openai-v2


def openai_sdk_retries(session):
    import openai

    FakeProvider.failures = [429, 500]
    client = openai.OpenAI(base_url=session.base + "/v1", api_key="fake", max_retries=2)
    with session.tracer.start_as_current_span("handle_ticket"):
        client.chat.completions.create(model="glm-5", messages=MESSAGES, max_tokens=800)


def openai_fallback(session):
    import openai

    FakeProvider.always_fail = {"deepseek-v4-pro"}
    client = openai.OpenAI(base_url=session.base + "/v1", api_key="fake", max_retries=0)
    with session.tracer.start_as_current_span("handle_ticket"):
        for model in ("deepseek-v4-pro", "glm-5"):
            try:
                client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=800)
                break
            except openai.APIStatusError:
                continue


def openai_stream_retry(session):
    import openai

    FakeProvider.failures = [429]
    client = openai.OpenAI(base_url=session.base + "/v1", api_key="fake", max_retries=2)
    with session.tracer.start_as_current_span("handle_ticket"):
        stream = client.chat.completions.create(
            model="kimi-k2.6", messages=MESSAGES, max_tokens=800, stream=True,
            stream_options={"include_usage": True})
        for _ in stream:
            pass


def record_openai_v2(shape):
    session = Session(httpx=True)
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
    {"sdk-retries": openai_sdk_retries, "fallback": openai_fallback,
     "stream-retry": openai_stream_retry}[shape](session)
    return session


# ---------------------------------------------------------------------------------------------
# Anthropic shapes: OpenLLMetry's instrumentation, the SDK's own tracing, and both


def anthropic_sdk_retries(session, sdk_tracing):
    import anthropic

    FakeProvider.failures = [429, 500]
    client = anthropic.Anthropic(base_url=session.base, api_key="fake", max_retries=2,
                                 open_telemetry=None if sdk_tracing else False)
    with session.tracer.start_as_current_span("handle_ticket"):
        client.messages.create(model="glm-5", messages=MESSAGES, max_tokens=800)


def anthropic_fallback(session, sdk_tracing):
    import anthropic

    FakeProvider.always_fail = {"deepseek-v4-pro"}
    client = anthropic.Anthropic(base_url=session.base, api_key="fake", max_retries=0,
                                 open_telemetry=None if sdk_tracing else False)
    with session.tracer.start_as_current_span("handle_ticket"):
        for model in ("deepseek-v4-pro", "glm-5"):
            try:
                client.messages.create(model=model, messages=MESSAGES, max_tokens=800)
                break
            except anthropic.APIStatusError:
                continue


def record_anthropic(library, shape):
    base_shape, httpx = shape.removesuffix("-httpx"), shape.endswith("-httpx")
    session = Session(httpx=httpx)
    if library in ("openllmetry-anthropic", "anthropic-sdk-and-openllmetry"):
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

        AnthropicInstrumentor().instrument()
    # The SDK traces itself by default once a global tracer provider is set; OpenLLMetry's
    # recordings turn that off (open_telemetry=False) to show OpenLLMetry alone.
    sdk_tracing = library in ("anthropic-sdk", "anthropic-sdk-and-openllmetry")
    {"sdk-retries": anthropic_sdk_retries, "fallback": anthropic_fallback}[base_shape](
        session, sdk_tracing)
    return session


# ---------------------------------------------------------------------------------------------
# pydantic-ai


def record_pydantic_ai(shape):
    session = Session(httpx=not shape.endswith("-no-httpx"))
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def model(name, retries):
        client = AsyncOpenAI(base_url=session.base + "/v1", api_key="fake", max_retries=retries)
        return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))

    if shape.startswith("fallback"):
        from pydantic_ai.models.fallback import FallbackModel

        FakeProvider.always_fail = {"deepseek-v4-pro"}
        agent_model = FallbackModel(model("deepseek-v4-pro", 1), model("glm-5", 1))
    else:
        FakeProvider.failures = [429, 500]
        agent_model = model("glm-5", 2)
    # pydantic-ai 2 dropped Agent(instrument=True); instrument_all() is what
    # logfire.instrument_pydantic_ai() calls, with the global tracer provider.
    Agent.instrument_all(True)
    agent = Agent(agent_model, name="support_agent")
    with session.tracer.start_as_current_span("handle_ticket"):
        agent.run_sync("Summarise this support ticket.")
    return session


# ---------------------------------------------------------------------------------------------
# LiteLLM


def record_litellm(shape):
    # The shipped cost map, not a download from the internet at import.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    shallow = shape.endswith("-shallow")
    if not shallow:
        # Without it, litellm's otel callback writes the request's attributes onto the span
        # that is current when it runs (the application's), instead of a litellm_request child.
        os.environ["USE_OTEL_LITELLM_REQUEST_SPAN"] = "true"
    session = Session(httpx=True)
    import litellm

    litellm.callbacks = ["otel"]
    base = session.base + "/v1"
    with session.tracer.start_as_current_span("handle_ticket"):
        if shape.startswith("sdk-retries"):
            FakeProvider.failures = [429, 500]
            litellm.completion(model="openai/glm-5", api_base=base, api_key="fake",
                               messages=MESSAGES, max_tokens=800, num_retries=2)
        else:
            FakeProvider.always_fail = {"deepseek-v4-pro"}
            router = litellm.Router(
                model_list=[
                    {"model_name": "primary", "litellm_params": {
                        "model": "openai/deepseek-v4-pro", "api_base": base, "api_key": "fake"}},
                    {"model_name": "backup", "litellm_params": {
                        "model": "openai/glm-5", "api_base": base, "api_key": "fake"}},
                ],
                fallbacks=[{"primary": ["backup"]}],
                num_retries=0,
            )
            router.completion(model="primary", messages=MESSAGES, max_tokens=800)
        # litellm's success callbacks run on a worker thread; a request handler that goes on
        # working keeps its span open meanwhile.
        time.sleep(1)
    return session


# ---------------------------------------------------------------------------------------------
# Vercel AI SDK: Node records, this process serves and converts


def record_vercel(shape):
    fake = serve(FakeProvider)
    capture = serve(ChunkedCapture)
    if shape == "generate-retries":
        FakeProvider.failures = [429, 500]
    elif shape == "fallback":
        FakeProvider.always_fail = {"deepseek-v4-pro"}
    else:
        FakeProvider.failures = [429]
    script = ROOT / "examples" / "vercel" / "record_vercel.mjs"
    env = dict(os.environ,
               FAKE_BASE_URL=f"http://127.0.0.1:{fake.server_port}/v1",
               OTLP_TRACES_URL=f"http://127.0.0.1:{capture.server_port}/v1/traces")
    subprocess.run(["node", str(script), shape], check=True, env=env, cwd=script.parent)
    return Capture.received


RECORDINGS = {
    "openai-v2": ("sdk-retries", "fallback", "stream-retry"),
    "openllmetry-anthropic": ("sdk-retries", "sdk-retries-httpx", "fallback", "fallback-httpx"),
    "anthropic-sdk": ("sdk-retries", "sdk-retries-httpx", "fallback", "fallback-httpx"),
    "anthropic-sdk-and-openllmetry": ("sdk-retries", "sdk-retries-httpx", "fallback",
                                      "fallback-httpx"),
    "pydantic-ai": ("fallback", "fallback-no-httpx", "sdk-retries"),
    "litellm": ("sdk-retries", "router-fallback", "sdk-retries-shallow",
                "router-fallback-shallow"),
    "vercel": ("generate-retries", "fallback", "stream-retry"),
}

ANTHROPIC_RETRIES = ("anthropic-python max_retries=2 for glm-5 under handle_ticket: 429, 500, 200. ")
ANTHROPIC_FALLBACK = ("Application fallback under handle_ticket, max_retries=0: deepseek-v4-pro "
                      "fails 500, then glm-5 answers. ")
SDK_SPAN = ("The SDK's anthropic.messages.create span (scope com.anthropic.sdk.python, kind CLIENT) "
            "carries gen_ai.* with http.request.method, http.response.status_code, server.address, "
            "url.full, and http.request.resend_count = 2 after the retries; its cache-write count is "
            "gen_ai.usage.cache_write.input_tokens (not cache_creation). ")
DUPLICATE = ("OpenLLMetry's anthropic.chat span and the SDK's anthropic.messages.create span are "
             "siblings under handle_ticket with overlapping windows: two instrumentations of one "
             "call, neither the other's parent. ")

# What the exported spans show, by recording, checked by reading them (the README beside the
# fixtures has more): (shows_tries, description for the truth file).
TRUTH = {
    "openai-v2-sdk-retries": (True,
        "openai-python max_retries=2 for glm-5 under handle_ticket: 429, 500, 200. One chat span "
        "(scope opentelemetry.util.genai.handler), the httpx instrumentation's three POST spans its "
        "children, with http.status_code 429, 500, 200."),
    "openai-v2-fallback": (True,
        "Application fallback under handle_ticket, max_retries=0: deepseek-v4-pro fails 500, then "
        "glm-5 answers. Two sibling chat spans, the first ERROR with error.type the str() of the "
        "exception class, each with one httpx POST child."),
    "openai-v2-stream-retry": (True,
        "stream=True with include_usage for kimi-k2.6, max_retries=2: 429, then a streamed 200. "
        "One chat span with the streamed usage, two httpx POST children (429, 200)."),
    "openllmetry-anthropic-sdk-retries": (False,
        ANTHROPIC_RETRIES + "OpenLLMetry alone, no httpx instrumentation: one anthropic.chat "
        "span with the final usage and status OK, and nothing that shows the two failed tries "
        "(no resend count, no HTTP spans)."),
    "openllmetry-anthropic-sdk-retries-httpx": (True,
        ANTHROPIC_RETRIES + "OpenLLMetry with the httpx instrumentation: the three POST spans "
        "are siblings of the anthropic.chat span (children of handle_ticket), inside its window; "
        "anthropic.chat has no server.address or url.full."),
    "openllmetry-anthropic-fallback": (True,
        ANTHROPIC_FALLBACK + "OpenLLMetry alone, no httpx instrumentation: two sibling "
        "anthropic.chat spans, one per provider request (ERROR, then OK)."),
    "openllmetry-anthropic-fallback-httpx": (True,
        ANTHROPIC_FALLBACK + "OpenLLMetry with the httpx instrumentation: two anthropic.chat "
        "spans, each with its POST span beside it under handle_ticket."),
    "anthropic-sdk-sdk-retries": (True,
        ANTHROPIC_RETRIES + "The SDK's own tracing, no httpx instrumentation: one span; the "
        "failed tries show only as its http.request.resend_count = 2. " + SDK_SPAN),
    "anthropic-sdk-sdk-retries-httpx": (True,
        ANTHROPIC_RETRIES + "The SDK's own tracing with the httpx instrumentation: the three "
        "POST spans are children of the SDK's span, which also has resend_count = 2. " + SDK_SPAN),
    "anthropic-sdk-fallback": (True,
        ANTHROPIC_FALLBACK + "The SDK's own tracing: two sibling anthropic.messages.create "
        "spans, the first ERROR with error.type api_error and http.response.status_code 500."),
    "anthropic-sdk-fallback-httpx": (True,
        ANTHROPIC_FALLBACK + "The SDK's own tracing with the httpx instrumentation: two "
        "anthropic.messages.create spans, each the parent of its POST span."),
    "anthropic-sdk-and-openllmetry-sdk-retries": (True,
        ANTHROPIC_RETRIES + DUPLICATE + "No httpx instrumentation: only the SDK's span shows "
        "the retries (resend_count = 2); OpenLLMetry's shows none."),
    "anthropic-sdk-and-openllmetry-sdk-retries-httpx": (True,
        ANTHROPIC_RETRIES + DUPLICATE + "With the httpx instrumentation the three POST spans are "
        "children of the SDK's span, which has resend_count = 2."),
    "anthropic-sdk-and-openllmetry-fallback": (True,
        ANTHROPIC_FALLBACK + DUPLICATE + "Four GenAI spans for two provider requests."),
    "anthropic-sdk-and-openllmetry-fallback-httpx": (True,
        ANTHROPIC_FALLBACK + DUPLICATE + "Each POST span is a child of the SDK's span."),
    "pydantic-ai-fallback": (True,
        "FallbackModel(deepseek-v4-pro, glm-5) in an instrumented Agent under handle_ticket, each "
        "model's AsyncOpenAI client max_retries=1: deepseek-v4-pro 500, 500 (both its tries), then "
        "glm-5 200. invoke_agent > chat glm-5 (the served model; usage) > 'model request attempt "
        "deepseek-v4-pro' (INTERNAL, ERROR, no gen_ai.operation.name) for the failed model only; "
        "the three httpx POST spans are children of the chat span, not of the attempt span, the "
        "two 500s inside the attempt span's window."),
    "pydantic-ai-fallback-no-httpx": (False,
        "The same FallbackModel run without the httpx instrumentation: deepseek-v4-pro 500, 500, "
        "then glm-5 200. The fallback shows (the failed 'model request attempt deepseek-v4-pro' "
        "span inside chat glm-5) but deepseek-v4-pro's two tries are one span and nothing counts "
        "them: the spans show two attempts for three provider requests."),
    "pydantic-ai-sdk-retries": (True,
        "An instrumented Agent on glm-5 under handle_ticket, AsyncOpenAI max_retries=2: 429, 500, "
        "200. invoke_agent > chat glm-5 with the three httpx POST spans as its children; no "
        "'model request attempt' span (those appear for FallbackModel's failed models)."),
    "litellm-sdk-retries": (True,
        "litellm.completion(num_retries=2) for openai/glm-5 under handle_ticket with "
        "callbacks=['otel'] and USE_OTEL_LITELLM_REQUEST_SPAN=true: 429, 500, 200 (the retries are "
        "openai-python's, which litellm hands num_retries). One litellm_request span (INTERNAL, "
        "scope litellm, no server.address) with a raw_gen_ai_request child; the three httpx POST "
        "spans are its siblings under handle_ticket, inside its window."),
    "litellm-router-fallback": (True,
        "litellm Router, num_retries=0, fallbacks primary (openai/deepseek-v4-pro) -> backup "
        "(openai/glm-5), otel callback with USE_OTEL_LITELLM_REQUEST_SPAN=true: deepseek-v4-pro "
        "500, glm-5 200. Two sibling litellm_request spans (ERROR with error.type "
        "InternalServerError and http.response.status_code 500, then OK with usage), each POST "
        "span beside them under handle_ticket."),
    "litellm-sdk-retries-shallow": (True,
        "As litellm-sdk-retries with litellm's default (USE_OTEL_LITELLM_REQUEST_SPAN unset): "
        "litellm makes no span of its own for the request but writes gen_ai.* onto the span that "
        "is current, the application's handle_ticket (a root span), whose children are the three "
        "httpx POST spans and a raw_gen_ai_request span."),
    "litellm-router-fallback-shallow": (True,
        "As litellm-router-fallback with litellm's default: both deployments' attributes land on "
        "handle_ticket, overwriting each other: it ends with gen_ai.request.model glm-5 and the "
        "success's usage but also error.type InternalServerError and http.response.status_code "
        "500 from the failure, status OK. Its two POST children (500, 200) show the tries, but "
        "not which model each asked for."),
    "vercel-generate-retries": (True,
        "generateText(maxRetries=2) for glm-5 via @ai-sdk/openai-compatible under handle_ticket: "
        "429, 500, 200. The ai.generateText call span (ai.operationId ai.generateText, usage in "
        "ai.usage.*) has one ai.generateText.doGenerate span per try (gen_ai.request.model, no "
        "gen_ai.operation.name); the failed ones are ERROR with an exception event, no error.type "
        "or status code."),
    "vercel-fallback": (True,
        "Application fallback under handle_ticket: generateText(deepseek-v4-pro, maxRetries=0) "
        "fails 500, then generateText(glm-5) answers. Two sibling ai.generateText call spans, "
        "each with one doGenerate span."),
    "vercel-stream-retry": (True,
        "streamText(maxRetries=2) for kimi-k2.6: 429, then a streamed 200. The ai.streamText call "
        "span has two ai.streamText.doStream spans (ERROR, then OK with usage and "
        "ai.stream.firstChunk/finish events)."),
}


def record(library, shape):
    name = f"{library}-{shape}"
    shows_tries, description = TRUTH[name]
    if library == "vercel":
        write(name, record_vercel(shape), description, shows_tries)
        return
    if library == "openai-v2":
        session = record_openai_v2(shape)
    elif library == "pydantic-ai":
        session = record_pydantic_ai(shape)
    elif library == "litellm":
        session = record_litellm(shape)
    else:
        session = record_anthropic(library, shape)
    session.finish(name, description, shows_tries)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", nargs="+", choices=sorted(RECORDINGS), required=True)
    parser.add_argument("--shape")
    args = parser.parse_args()
    if args.shape:
        if len(args.library) != 1 or args.shape not in RECORDINGS[args.library[0]]:
            parser.error(f"--shape takes one --library and one of its shapes")
        record(args.library[0], args.shape)
        return
    # Instrumentations patch modules globally: each recording gets its own process.
    for library in args.library:
        for shape in RECORDINGS[library]:
            subprocess.run([sys.executable, __file__, "--library", library, "--shape", shape],
                           check=True)


if __name__ == "__main__":
    main()
