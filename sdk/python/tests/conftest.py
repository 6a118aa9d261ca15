"""Fixtures: a fake OpenAI-compatible provider, the real collector binary, and the SDK's spans
exported to it over OTLP/HTTP."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import retry_spend

REPO = Path(__file__).resolve().parents[3]
BINARY = Path(os.environ.get("RETRY_SPEND_COLLECTOR_BIN", REPO / "target" / "debug" / "retry-spend-collector"))
PRICING = REPO / "config" / "pricing"
SERVICE = "support-bot"


def envelope(**overrides: Any) -> retry_spend.Envelope:
    """The shipped snapshot's envelope (config/pricing/2026-08-22-aiwave.json)."""
    fields: Dict[str, Any] = dict(
        max_incremental_usd="0.015",
        max_attempts_after_first=2,
        pricing_version="a42d372ccf0b5dd13ecf71203521f9d2",
        pricing_checked_at="2026-08-22",
        pricing_source="https://aiwave.live/api/pricing",
        billing_group="vip",
        allow_family_fallback=True,
        allowed_fallback_families=("deepseek", "glm", "qwen"),
        task_type="support_summary",
    )
    fields.update(overrides)
    return retry_spend.Envelope(fields.pop("max_incremental_usd"), fields.pop("max_attempts_after_first"), **fields)


def estimate(messages: Any) -> int:
    """The fake provider reports the count the SDK plans with, as a real tokenizer would."""
    text = json.dumps(messages, separators=(",", ":"), ensure_ascii=False)
    return math.ceil(len(text.encode("utf-8")) / 4)


# -- the fake provider ---------------------------------------------------------------------------


class FakeProvider:
    """Answers chat completions; `script` is what each request in turn gets: "ok", an HTTP
    status (int), or "break" (a stream cut after two chunks). Past the script: "ok"."""

    def __init__(self) -> None:
        self.script: List[Any] = []
        self.log: List[Dict[str, Any]] = []
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
                with provider.lock:
                    provider.log.append(body)
                    action = provider.script.pop(0) if provider.script else "ok"
                provider.answer(self, body, action)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def models(self) -> List[str]:
        return [b["model"] for b in self.log]

    def answer(self, h: BaseHTTPRequestHandler, body: Dict[str, Any], action: Any) -> None:
        model = body.get("model", "")
        prompt = estimate(body.get("messages", []))
        if isinstance(action, int):
            data = json.dumps({"error": {"message": "overloaded", "type": "server_error"}}).encode()
            h.send_response(action)
            h.send_header("content-type", "application/json")
            h.send_header("retry-after", "0")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        usage = {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12}
        if not body.get("stream"):
            data = json.dumps({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Refund approved."}}],
                "usage": usage,
            }).encode()
            h.send_response(200)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()

        def send(payload: str) -> None:
            raw = payload.encode()
            h.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            h.wfile.flush()

        def chunk(content: Optional[str], finish: Optional[str] = None, with_usage: bool = False) -> str:
            event: Dict[str, Any] = {
                "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [] if with_usage else [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
            }
            if with_usage:
                event["usage"] = usage
            return f"data: {json.dumps(event)}\n\n"

        send(chunk("Refund "))
        send(chunk("approved"))
        if action == "break":
            time.sleep(0.05)
            h.close_connection = True
            h.connection.shutdown(2)  # no terminating chunk: the client sees a cut body
            return
        send(chunk(".", "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            send(chunk(None, with_usage=True))
        send("data: [DONE]\n\n")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    p = FakeProvider()
    yield p
    p.close()


# -- tracing -------------------------------------------------------------------------------------


class Switch(SpanProcessor):
    """The session's one span processor, pointed at each test's collector in turn."""

    def __init__(self) -> None:
        self.current: Optional[SpanProcessor] = None

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.current is not None:
            self.current.on_end(span)

    def shutdown(self) -> None:
        if self.current is not None:
            self.current.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.current.force_flush(timeout_millis) if self.current is not None else True


SWITCH = Switch()
_provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
_provider.add_span_processor(SWITCH)
trace.set_tracer_provider(_provider)


# -- the collector -------------------------------------------------------------------------------


class Collector:
    def __init__(self, tmp: Path, token: Optional[str]) -> None:
        if not BINARY.exists():
            pytest.fail(f"collector binary {BINARY} not found: cargo build, or set RETRY_SPEND_COLLECTOR_BIN")
        self.output = tmp / "out"
        self.token = token
        config = tmp / "collector.toml"
        text = "[processors.retry_spend]\nmax_pricing_age_days = 100000\n"
        if token:
            (tmp / "tokens").write_text(f"# tokens\n{token}\n")
            text += f'\n[receivers.otlp.auth]\ntokens_file = "{tmp / "tokens"}"\n'
        config.write_text(text)
        self.log_path = tmp / "collector.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [str(BINARY), "serve", "--config", str(config), "--grpc-addr", "127.0.0.1:0",
             "--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
             "--output", str(self.output), "--pricing", str(PRICING)],
            cwd=tmp, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"},
        )
        deadline = time.monotonic() + 30
        while True:
            text = re.sub(r"\x1b\[[0-9;]*m", "", self.log_path.read_text(errors="replace"))
            found = re.search(r"http_addr=(\S+)", text)
            if found:
                self.url = f"http://{found.group(1)}"
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"collector did not start:\n{text}")
            time.sleep(0.05)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        SWITCH.current = SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{self.url}/v1/traces", headers=headers, timeout=5))
        self.stopped = False

    def rows(self) -> List[Dict[str, Any]]:
        """Stops the collector (SIGTERM completes every file) and reads its rows back."""
        self.stop()
        import duckdb

        files = list(self.output.glob("attempts/date=*/*.parquet"))
        if not files:
            return []
        con = duckdb.connect()
        cursor = con.execute(
            "select * from read_parquet(?, hive_partitioning = false) order by request_id, attempt_index",
            [[str(f) for f in files]],
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r)) for r in cursor.fetchall()]

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if SWITCH.current is not None:
            SWITCH.current.force_flush()
            SWITCH.current = None
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        self.log.close()
        assert code == 0, self.log_path.read_text(errors="replace")


@pytest.fixture
def start_collector(tmp_path: Path) -> Iterator[Any]:
    started: List[Collector] = []

    def start(token: Optional[str] = None) -> Collector:
        c = Collector(tmp_path, token)
        started.append(c)
        return c

    yield start
    for c in started:
        if not c.stopped:
            c.process.kill()
            c.process.wait()
            c.log.close()
        SWITCH.current = None


@pytest.fixture
def collector(start_collector: Any) -> Collector:
    return start_collector()


class RecordingDecisions(retry_spend.Decisions):
    """Decisions that keep every answer, so a test can compare them with the audit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: List[retry_spend.Decision] = []

    def decide(self, *args: Any, **kwargs: Any) -> retry_spend.Decision:
        d = super().decide(*args, **kwargs)
        self.answers.append(d)
        return d

    async def adecide(self, *args: Any, **kwargs: Any) -> retry_spend.Decision:
        d = await super().adecide(*args, **kwargs)
        self.answers.append(d)
        return d


def no_sleep(waits: List[float]) -> Any:
    def sleep(seconds: float) -> None:
        waits.append(seconds)

    return sleep


def check_declared(rows: List[Dict[str, Any]], decisions: List[retry_spend.Decision]) -> None:
    """Rows of one request: declared attempts 0.., the retries' estimates equal to the answers."""
    assert len({r["request_id"] for r in rows}) == 1, rows
    assert [r["attempt_index"] for r in rows] == list(range(len(rows)))
    assert all(r["attempt_source"] == "declared" for r in rows), [r["attempt_source"] for r in rows]
    assert all(r["audited"] for r in rows), [(r["unaudited_reason"]) for r in rows]
    assert re.fullmatch(r"[0-9a-f]{32}", rows[0]["request_id"]), rows[0]["request_id"]
    assert rows[0]["decision"] == "first_attempt"
    for row, d in zip(rows[1:], decisions):
        assert row["attempt_index"] == d.attempt_index
        assert row["decision"] == d.decision
        assert Decimal(row["estimated_incremental_usd"]) == d.estimated_incremental_usd
        assert Decimal(row["remaining_envelope_usd"]) == d.remaining_envelope_usd
        assert Decimal(row["sdk_estimated_incremental_usd"]) == d.estimated_incremental_usd
        assert row["sdk_decision_reason"] == d.decision_reason
        assert "sdk_estimate_mismatch" not in list(row["violations"]), row["violations"]
