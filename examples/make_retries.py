import json, hashlib

SRC = "https://aiwave.live/api/pricing"
VER = "a42d372ccf0b5dd13ecf71203521f9d2"
BASE = 1787659200_000_000_000  # 2026-08-25T12:00:00Z
SEC = 1_000_000_000

def hid(seed, n):
    return hashlib.sha256(seed.encode()).hexdigest()[: n * 2]

def val(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [val(x) for x in v]}}
    return {"stringValue": v}

def attrs(d):
    return [{"key": k, "value": val(v)} for k, v in d.items()]

def span(trace, sid, parent, name, start, dur, a, error=False, kind=3):
    s = {
        "traceId": trace, "spanId": sid, "name": name, "kind": kind,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + dur),
        "attributes": attrs(a),
        "status": {"code": 2, "message": "upstream error"} if error else {},
    }
    if parent:
        s["parentSpanId"] = parent
    return s

def line(service, spans):
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": attrs({"service.name": service, "deployment.environment": "prod"})},
        "scopeSpans": [{"scope": {"name": "retry-spend-sdk", "version": "0.4.0"}, "spans": spans}],
    }]}, separators=(",", ":"))

def envelope(group="vip", max_usd=0.015, max_after=1, allow=True, fams=("deepseek", "qwen", "glm"), task="support_summary", **extra):
    e = {
        "retry_spend.pricing.source": SRC,
        "retry_spend.pricing.checked_at": "2026-08-22",
        "retry_spend.pricing.version": VER,
        "retry_spend.billing_group": group,
        "retry_spend.envelope.max_incremental_usd": max_usd,
        "retry_spend.envelope.max_attempts_after_first": max_after,
        "retry_spend.envelope.allow_family_fallback": allow,
        "retry_spend.envelope.allowed_fallback_families": list(fams),
        "retry_spend.task.type": task,
    }
    e.update(extra)
    return e

def attempt_attrs(req_id, i, model, inp, cached, cap, out, provider="aiwave", **extra):
    a = {
        "retry_spend.span.role": "attempt",
        "retry_spend.request.id": req_id,
        "retry_spend.attempt.index": i,
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.response.model": model,
        "gen_ai.request.max_tokens": cap,
        "gen_ai.usage.input_tokens": inp,
        "gen_ai.usage.cache_read.input_tokens": cached,
    }
    if out is not None:
        a["gen_ai.usage.output_tokens"] = out
    a.update(extra)
    return a

lines = []
n = 0

def request(service, name, env, attempts, logical_extra=None, split=False, offset=0):
    """attempts: list of (model, inp, cached, cap, out, error_type, extra)."""
    global n
    n += 1
    trace = hid(f"trace-{name}", 16)
    root = hid(f"root-{name}", 8)
    req_id = f"req-{name}"
    start = BASE + n * 60 * SEC + offset
    spans = []
    t = start + SEC // 10
    for i, (model, inp, cached, cap, out, err, extra) in enumerate(attempts):
        a = attempt_attrs(req_id, i, model, inp, cached, cap, out, **extra)
        if err:
            a["error.type"] = err
        spans.append(span(trace, hid(f"a-{name}-{i}", 8), root, f"chat {model}", t, 2 * SEC, a, error=bool(err)))
        t += 3 * SEC
    la = {"retry_spend.span.role": "logical_request", "retry_spend.request.id": req_id,
          "retry_spend.attempt_count": len(attempts)}
    la.update(env)
    la.update(logical_extra or {})
    logical = span(trace, root, None, "llm.request", start, t - start, la, kind=1)
    if split:
        # The SDK batch processor flushed the attempts first; the logical span ends last.
        lines.append(line(service, spans))
        lines.append(line(service, [logical]))
    else:
        lines.append(line(service, spans + [logical]))

# 1. A 429 on glm-5, one bounded retry: within_envelope.
request("support-bot", "glm-retry", envelope(), [
    ("glm-5", 10000, 4000, 800, None, "rate_limited", {}),
    ("glm-5", 10000, 4000, 800, 612, None, {"retry_spend.sdk.estimated_incremental_usd": "0.00766626",
                                            "retry_spend.sdk.remaining_envelope_usd": "0.00733374",
                                            "retry_spend.sdk.decision_reason": "retry after 429 within envelope"}),
], split=True)
# 2. Pro times out, falls back to Flash in the same family: within_envelope, spend class fallback.
request("support-bot", "pro-to-flash", envelope(), [
    ("deepseek-v4-pro", 10000, 4000, 800, None, "timeout", {}),
    ("deepseek-v4-flash", 10000, 4000, 800, 540, None, {"retry_spend.sdk.estimated_incremental_usd": 0.0028068}),
])
# 3. Long code patch on Kimi: the second retry crosses the envelope: over_envelope.
request("code-agent", "kimi-patch", envelope(max_usd=0.05, max_after=2, allow=False, fams=(), task="code_patch"), [
    ("kimi-k2.7-code", 30000, 0, 4000, None, "server_error", {}),
    ("kimi-k2.7-code", 30000, 0, 4000, None, "server_error", {}),
    ("kimi-k2.7-code", 30000, 0, 4000, 3120, None, {}),
], split=True)
# 4. Three tries where the envelope allows one retry: over_attempts.
request("support-bot", "flash-hammer", envelope(), [
    ("deepseek-v4-flash", 8000, 0, 600, None, "rate_limited", {}),
    ("deepseek-v4-flash", 8000, 0, 600, None, "rate_limited", {}),
    ("deepseek-v4-flash", 8000, 0, 600, 410, None, {}),
])
# 5. The stream broke after partial output reached the user, then the SDK retried: replay_unsafe.
request("chat-frontend", "stream-replay", envelope(task="chat"), [
    ("glm-5", 6000, 2000, 1200, 300, "connection_reset", {"retry_spend.attempt.output_reached_client": True}),
    ("glm-5", 6000, 2000, 1200, 1100, None, {}),
])
# 6. The same, but the caller marked the operation replay-safe: within_envelope.
request("batch-extract", "safe-replay", envelope(task="batch_extraction", **{"retry_spend.envelope.replay_safe": True}), [
    ("deepseek-v4-flash", 20000, 15000, 500, 120, "connection_reset", {"retry_spend.attempt.output_reached_client": True}),
    ("deepseek-v4-flash", 20000, 15000, 500, 480, None, {}),
])
# 7. Fallback from glm to kimi, a family the envelope does not allow: routing_drift.
request("support-bot", "glm-to-kimi", envelope(), [
    ("glm-5", 10000, 4000, 800, None, "overloaded", {}),
    ("kimi-k2.6", 10000, 4000, 800, 700, None, {}),
])
# 8. The gateway quietly served another model than the retry asked for: routing_drift.
request("support-bot", "gateway-swap", envelope(), [
    ("deepseek-v4-flash", 10000, 0, 800, None, "timeout", {}),
    ("deepseek-v4-flash", 10000, 0, 800, 650, None, {"gen_ai.response.model": "qwen3.5-122b-a10b"}),
])
# 9. A retry with no envelope at all: unaudited (no_envelope).
request("legacy-worker", "no-envelope", {}, [
    ("qwen3.5-122b-a10b", 4000, 0, 1000, None, "rate_limited", {}),
    ("qwen3.5-122b-a10b", 4000, 0, 1000, 900, None, {}),
], logical_extra={"retry_spend.task.type": "classification"})
# 10. The envelope names a snapshot we do not have: unaudited (unknown_pricing_version).
request("support-bot", "unknown-version", envelope(**{"retry_spend.pricing.version": "0000deadbeef"}), [
    ("glm-5", 10000, 4000, 800, None, "timeout", {}),
    ("glm-5", 10000, 4000, 800, 500, None, {}),
])
# 11. The seed's JSON policy in one attribute, default billing group, qwen fallback: within_envelope.
seed_json = json.dumps({"retry_spend_envelope": {
    "pricing_source": SRC, "pricing_checked_at": "2026-08-22", "pricing_version": VER,
    "billing_group": "default", "max_incremental_usd": 0.015, "max_attempts_after_first": 1,
    "allow_family_fallback": True, "allowed_fallback_families": ["deepseek", "qwen", "glm"]}})
request("compliance-review", "json-envelope", {"retry_spend.envelope": seed_json, "retry_spend.task.type": "compliance_review"}, [
    ("deepseek-v4-flash", 5000, 1000, 800, None, "rate_limited", {}),
    ("qwen3.5-122b-a10b", 5000, 0, 800, 640, None, {}),
])
# 12. A legacy GenAI span with no contract attributes: its own single-attempt request.
n += 1
trace = hid("trace-legacy", 16)
lines.append(line("notebook", [
    span(trace, hid("legacy", 8), None, "chat glm-5", BASE + n * 60 * SEC, 2 * SEC, {
        "gen_ai.system": "aiwave", "gen_ai.request.model": "glm-5", "gen_ai.response.model": "glm-5",
        "gen_ai.usage.prompt_tokens": 1200, "gen_ai.usage.completion_tokens": 300, "gen_ai.request.max_tokens": 512}),
    span(trace, hid("http", 8), hid("legacy", 8), "POST /v1/chat/completions", BASE + n * 60 * SEC, 2 * SEC,
         {"http.request.method": "POST", "server.address": "gateway.internal"}),
]))

open(__import__("os").path.join(__import__("os").path.dirname(__file__), "retries.jsonl"), "w").write("\n".join(lines) + "\n")
print(len(lines), "lines")
