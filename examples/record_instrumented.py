"""Records what today's plain instrumentations export when an LLM call is retried.

Writes tests/fixtures/instrumented/<instrumentation>-<shape>.jsonl: one OTLP JSON
ExportTraceServiceRequest per line, as the OpenTelemetry Collector's file exporter writes them,
for `replay` and the tests in tests/replay.rs. CI replays the committed files; only re-recording
needs Python:

    python3 -m venv /tmp/instr-venv
    /tmp/instr-venv/bin/pip install openai opentelemetry-sdk \
        opentelemetry-exporter-otlp-proto-http opentelemetry-proto \
        opentelemetry-instrumentation-httpx opentelemetry-instrumentation-openai \
        openinference-instrumentation-openai
    /tmp/instr-venv/bin/python examples/record_instrumented.py

Everything stays on 127.0.0.1: a fake OpenAI-compatible server answers the chat completions
(failing the first tries with 429/500), and a tiny OTLP/HTTP endpoint captures the export. Two
shapes are recorded per instrumentation:
  sdk-retries                 openai-python's own retry loop, max_retries=2: 429, 500, then a
                              success;
  fallback                    an application loop: deepseek-v4-pro fails (500, SDK retries off),
                              then the application falls back to glm-5, which answers;
  fallback-after-sdk-retries  the same with max_retries=1: the SDK tries deepseek-v4-pro twice
                              before the application falls back.
The httpx instrumentation writes the legacy HTTP names (http.method, http.status_code) by
default; openllmetry-sdk-retries-stable-http.jsonl is recorded with
OTEL_SEMCONV_STABILITY_OPT_IN=http for the current ones (http.request.method,
http.response.status_code).
Span times are shifted so each file starts at 2026-08-25T12:00:00Z, three days after the shipped
pricing snapshot was checked; ids, order and durations are as exported.
"""

import argparse
import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "fixtures" / "instrumented"
BASE_NANOS = 1_787_659_200_000_000_000  # 2026-08-25T12:00:00Z
INSTRUMENTATIONS = ("openllmetry", "openinference")
SHAPES = ("sdk-retries", "fallback", "fallback-after-sdk-retries")


class FakeOpenAI(BaseHTTPRequestHandler):
    """Chat completions: pops the next planned failure status, else answers with usage."""

    failures = []  # (status, model or None for any model), consumed in order
    always_fail = set()  # models that always answer 500

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        model = body.get("model", "unknown")
        status = 500 if model in self.always_fail else None
        if status is None and FakeOpenAI.failures:
            status = FakeOpenAI.failures.pop(0)
        if status is not None:
            payload = {"error": {"message": f"fake upstream error {status}", "type": "server_error"}}
            self.reply(status, payload, {"retry-after-ms": "10"})
            return
        payload = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1787659200,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "A short summary."},
                "finish_reason": "stop",
            }],
            "usage": {
                "prompt_tokens": 1200,
                "completion_tokens": 85,
                "total_tokens": 1285,
                "prompt_tokens_details": {"cached_tokens": 400},
            },
        }
        self.reply(200, payload, {})

    def reply(self, status, payload, headers):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


def otlp_json(request_bytes):
    """One ExportTraceServiceRequest as the file exporter writes it: proto3 JSON mapping with
    trace and span ids in hex (not base64) and enums as numbers."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(request_bytes)
    return MessageToDict(request, use_integers_for_enums=True)


def hex_ids(value):
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(item, str):
                value[key] = base64.b64decode(item).hex()
            else:
                hex_ids(item)
    elif isinstance(value, list):
        for item in value:
            hex_ids(item)
    return value


def shift_times(value, delta):
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("UnixNano") and isinstance(item, str):
                value[key] = str(int(item) + delta)
            else:
                shift_times(item, delta)
    elif isinstance(value, list):
        for item in value:
            shift_times(item, delta)
    return value


def earliest_start(value):
    if isinstance(value, dict):
        found = [int(v) for k, v in value.items() if k == "startTimeUnixNano"]
        found += [earliest_start(v) for v in value.values() if isinstance(v, (dict, list))]
    elif isinstance(value, list):
        found = [earliest_start(v) for v in value]
    else:
        return None
    found = [f for f in found if f is not None]
    return min(found) if found else None


class Capture(BaseHTTPRequestHandler):
    """An OTLP/HTTP traces endpoint that keeps every export request it is sent."""

    received = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        Capture.received.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


def serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def record(instrumentation, shape, stable_http):
    """Runs one shape under one instrumentation in this process and writes its fixture."""
    if stable_http:
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "http"
    if instrumentation == "openinference":
        # OpenInference writes gen_ai.* attributes only when asked; without them its spans are
        # no GenAI spans to the collector. Set before the instrumentation reads its config.
        os.environ["OPENINFERENCE_ENABLE_GENAI_SEMCONV"] = "true"

    import openai
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation import httpx as httpx_instrumentation
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    fake = serve(FakeOpenAI)
    capture = serve(Capture)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{capture.server_port}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    # openai-python 3 sends with httpx2, which has an instrumentor of its own; older releases
    # send with httpx.
    try:
        import httpx2  # noqa: F401

        httpx_instrumentation.HTTPX2ClientInstrumentor().instrument()
    except ImportError:
        httpx_instrumentation.HTTPXClientInstrumentor().instrument()
    if instrumentation == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument()

    tracer = trace.get_tracer("support-bot")
    base_url = f"http://127.0.0.1:{fake.server_port}/v1"
    messages = [{"role": "user", "content": "Summarise this support ticket."}]
    with tracer.start_as_current_span("handle_ticket"):
        if shape == "sdk-retries":
            FakeOpenAI.failures = [429, 500]
            client = openai.OpenAI(base_url=base_url, api_key="fake", max_retries=2)
            client.chat.completions.create(model="glm-5", messages=messages, max_tokens=800)
        else:
            FakeOpenAI.always_fail = {"deepseek-v4-pro"}
            retries = 1 if shape == "fallback-after-sdk-retries" else 0
            client = openai.OpenAI(base_url=base_url, api_key="fake", max_retries=retries)
            for model in ("deepseek-v4-pro", "glm-5"):
                try:
                    client.chat.completions.create(model=model, messages=messages, max_tokens=800)
                    break
                except openai.APIStatusError:
                    continue
    provider.force_flush()
    provider.shutdown()

    exports = [hex_ids(otlp_json(body)) for body in Capture.received]
    starts = [s for s in (earliest_start(e) for e in exports) if s is not None]
    delta = BASE_NANOS - min(starts)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    suffix = "-stable-http" if stable_http else ""
    path = OUT_DIR / f"{instrumentation}-{shape}{suffix}.jsonl"
    with open(path, "w") as out:
        for export in exports:
            out.write(json.dumps(shift_times(export, delta), separators=(",", ":")) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: {len(exports)} export requests")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instrumentation", choices=INSTRUMENTATIONS)
    parser.add_argument("--shape", choices=SHAPES)
    parser.add_argument("--stable-http", action="store_true")
    args = parser.parse_args()
    if args.instrumentation and args.shape:
        record(args.instrumentation, args.shape, args.stable_http)
        return
    # Instrumentations patch the openai module globally: each recording gets its own process.
    runs = [[i, s] for i in INSTRUMENTATIONS for s in SHAPES]
    runs.append(["openllmetry", "sdk-retries", "--stable-http"])
    for instrumentation, shape, *flags in runs:
        subprocess.run(
            [sys.executable, __file__, "--instrumentation", instrumentation, "--shape", shape]
            + flags,
            check=True,
        )


if __name__ == "__main__":
    main()
