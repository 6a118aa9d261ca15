"""Asks retry-spend-collector before every retry or fallback, then reports the attempts.

An application calls a chat model with the openai client, its own retry loop in charge
(`max_retries=0`): attempt 0 on deepseek-v4-flash, then fallbacks down a chain of models. Before
each retry it asks the collector's decision service (SPEC §7, `POST /v1/retry-decision`, plain
HTTP JSON) whether the envelope allows it, and stops with a structured refusal when it does not,
instead of quietly escalating cost. Afterwards it sends the attempts as OTLP spans carrying the
same envelope, so the audit writes for each retry what the service answered.

    cargo run --release -- serve &                        # the collector, on 127.0.0.1
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install openai
    /tmp/venv/bin/python examples/decide_before_retry.py --fake-upstream

`--fake-upstream` answers chat completions from a local stand-in that always fails
deepseek-v4-flash with a 503, so the example needs no API key; without it, set OPENAI_BASE_URL
and OPENAI_API_KEY to an OpenAI-compatible gateway that serves the models below. The collector is
`--collector` (default http://127.0.0.1:4318); `--token` adds the bearer token when the collector
requires one.
"""

import argparse
import json
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

# The seed's envelope: what this task may spend on attempts after the first, priced by the
# named, dated snapshot (config/pricing/2026-08-22-aiwave.json).
ENVELOPE = {
    "pricing_source": "https://aiwave.live/api/pricing",
    "pricing_checked_at": "2026-08-22",
    "pricing_version": "a42d372ccf0b5dd13ecf71203521f9d2",
    "billing_group": "vip",
    "max_incremental_usd": "0.015",
    "max_attempts_after_first": 1,
    "allow_family_fallback": True,
    "allowed_fallback_families": ["deepseek", "qwen", "glm"],
    "task_type": "support_summary",
}
SERVICE = "support-bot"
MODELS = ["deepseek-v4-flash", "glm-5", "kimi-k2.6"]  # attempt 0, then fallbacks in order
OUTPUT_CAP = 800
# The pricing snapshot was checked on 2026-08-22: date the example there so it is not stale.
# A real SDK leaves `at` out (the collector uses now) and keeps its snapshot fresh.
AT = "2026-08-25T12:00:00Z"
AT_NANOS = 1_787_659_200_000_000_000


class RetryRefused(Exception):
    """The envelope does not allow the next attempt: the decision service's structured answer."""

    def __init__(self, answer, attempts):
        super().__init__(answer["decision_reason"])
        self.answer = answer
        self.attempts = attempts  # those made: still reported, so the audit sees them


def ask(collector, token, attempts, next_attempt):
    """The decision service's answer for `next_attempt` after `attempts` (SPEC §7)."""
    question = {
        "envelope": ENVELOPE,
        "service": SERVICE,
        "task_type": ENVELOPE["task_type"],
        "attempts": [
            {key: a[key] for key in ("model", "input_tokens", "cached_input_tokens",
                                     "output_cap", "output_reached_client", "error_type")}
            for a in attempts
        ],
        "next": next_attempt,
        "at": AT,
    }
    request = urllib.request.Request(
        f"{collector}/v1/retry-decision",
        data=json.dumps(question).encode(),
        headers={"content-type": "application/json",
                 **({"authorization": f"Bearer {token}"} if token else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        # 400 names the field at fault; 401 is a missing or wrong token.
        raise SystemExit(f"decision service: HTTP {e.code}: {e.read().decode()}")


def estimate_input_tokens(messages):
    """What the SDK knows before the call. A real one counts with the model's tokenizer, so the
    count it asks with is the usage the provider reports (the fake upstream counts alike)."""
    return sum(len(m["content"]) for m in messages) // 4 + 8


def complete(client, collector, token, messages):
    """Attempt 0, then a fallback down MODELS each time the decision service allows one."""
    attempts = []
    for model in MODELS:
        planned = {
            "model": model,
            "input_tokens": estimate_input_tokens(messages),
            "cached_input_tokens": 0,
            "output_cap": OUTPUT_CAP,
        }
        answer = None
        if attempts:
            answer = ask(collector, token, attempts, planned)
            print(f"  ask before attempt {len(attempts)} on {model}: "
                  f"{answer['decision']} (allow={answer['allow']}): {answer['decision_reason']}")
            if not answer["allow"]:
                raise RetryRefused(answer, attempts)
        attempt = dict(planned, output_tokens=None, output_reached_client=False,
                       error_type=None, answer=answer, start=time.time_ns())
        attempts.append(attempt)
        try:
            response = client.chat.completions.create(
                model=model, messages=messages, max_tokens=OUTPUT_CAP)
        except openai.APIStatusError as e:
            attempt["error_type"] = str(e.status_code)
        except openai.APIConnectionError:
            attempt["error_type"] = "connection_error"
        else:
            usage = response.usage
            attempt["input_tokens"] = usage.prompt_tokens
            attempt["output_tokens"] = usage.completion_tokens
            return response.choices[0].message.content, attempts
        finally:
            attempt["end"] = time.time_ns()
        print(f"  attempt {len(attempts) - 1} on {model} failed: {attempt['error_type']}")
    raise RuntimeError("every model failed")


def otlp_value(value):
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": str(value)}


def report(collector, token, attempts):
    """Sends the logical request span and one span per attempt, with the same envelope."""
    trace_id, logical_id = secrets.token_hex(16), secrets.token_hex(8)
    request_id = f"req-{logical_id}"
    # The decisions were asked `at` AT; date the spans the same way (see AT).
    shift = AT_NANOS - attempts[0]["start"]

    def span(span_id, parent, name, start, end, attributes, error=False):
        s = {"traceId": trace_id, "spanId": span_id, "name": name, "kind": 3,
             "startTimeUnixNano": str(start + shift), "endTimeUnixNano": str(end + shift),
             "attributes": [{"key": k, "value": otlp_value(v)}
                            for k, v in attributes.items() if v is not None]}
        if parent:
            s["parentSpanId"] = parent
        if error:
            s["status"] = {"code": 2}
        return s

    spans = [span(logical_id, None, "llm.request", attempts[0]["start"], attempts[-1]["end"], {
        "retry_spend.span.role": "logical_request",
        "retry_spend.request.id": request_id,
        "retry_spend.attempt_count": len(attempts),
        "retry_spend.task.type": ENVELOPE["task_type"],
        "retry_spend.envelope": json.dumps({"retry_spend_envelope": ENVELOPE}),
    })]
    for index, a in enumerate(attempts):
        answer = a["answer"] or {}
        spans.append(span(secrets.token_hex(8), logical_id, f"chat {a['model']}", a["start"], a["end"], {
            "retry_spend.span.role": "attempt",
            "retry_spend.request.id": request_id,
            "retry_spend.attempt.index": index,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": a["model"],
            "gen_ai.request.max_tokens": a["output_cap"],
            "gen_ai.usage.input_tokens": a["input_tokens"],
            "gen_ai.usage.cache_read.input_tokens": a["cached_input_tokens"],
            "gen_ai.usage.output_tokens": a["output_tokens"],
            "retry_spend.attempt.output_reached_client": a["output_reached_client"],
            "error.type": a["error_type"],
            # What the service answered, audited against the collector's own figures.
            "retry_spend.sdk.estimated_incremental_usd": answer.get("estimated_incremental_usd"),
            "retry_spend.sdk.remaining_envelope_usd": answer.get("remaining_envelope_usd"),
            "retry_spend.sdk.decision_reason": answer.get("decision_reason"),
        }, error=a["error_type"] is not None))
    export = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": SERVICE}}]},
        "scopeSpans": [{"scope": {"name": "decide_before_retry"}, "spans": spans}],
    }]}
    request = urllib.request.Request(
        f"{collector}/v1/traces", data=json.dumps(export).encode(),
        headers={"content-type": "application/json",
                 **({"authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(request, timeout=5) as response:
        print(f"  sent {len(spans)} spans: HTTP {response.status}")


class FakeUpstream(BaseHTTPRequestHandler):
    """An OpenAI-compatible stand-in: deepseek-v4-flash is overloaded, the others answer."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        model = body.get("model", "")
        prompt_tokens = estimate_input_tokens(body.get("messages", []))
        if model == "deepseek-v4-flash":
            payload, status = {"error": {"message": "overloaded", "type": "server_error"}}, 503
        else:
            status = 200
            payload = {
                "id": "chatcmpl-example", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Refund approved."}}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 120,
                          "total_tokens": prompt_tokens + 120},
            }
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collector", default=os.environ.get("RETRY_SPEND_COLLECTOR", "http://127.0.0.1:4318"))
    parser.add_argument("--token", default=os.environ.get("RETRY_SPEND_TOKEN"))
    parser.add_argument("--fake-upstream", action="store_true")
    args = parser.parse_args()

    if args.fake_upstream:
        server = ThreadingHTTPServer(("127.0.0.1", 0), FakeUpstream)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1",
                               api_key="not-needed", max_retries=0)
    else:
        client = openai.OpenAI(max_retries=0)  # our loop decides every retry

    messages = [{"role": "user", "content": "Summarise this support ticket: " + "lorem ipsum " * 3300}]
    print(f"{SERVICE}: {len(MODELS)} models, envelope {ENVELOPE['max_incremental_usd']} USD, "
          f"{ENVELOPE['max_attempts_after_first']} attempt(s) after the first")
    try:
        text, attempts = complete(client, args.collector, args.token, messages)
        print(f"  answered by {attempts[-1]['model']}: {text!r}")
        report(args.collector, args.token, attempts)
    except RetryRefused as refused:
        # The structured error the seed asks for, instead of a quietly escalated cost.
        print(f"  refused: {refused.answer['decision']}: {refused}")
        report(args.collector, args.token, refused.attempts)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
