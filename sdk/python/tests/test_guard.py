"""retry_spend.openai.guard with the real openai client, a fake provider and the real collector:
what is sent, what is refused, and the audit rows read back from Parquet."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any, Dict, List

import openai
import pytest

import retry_spend
import retry_spend.openai
from conftest import SERVICE, RecordingDecisions, check_declared, envelope, estimate, no_sleep

MESSAGES = [{"role": "user", "content": "Summarise this support ticket: the parcel arrived broken — refund?"}]


def client(provider: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=provider.url, api_key="not-needed")


def test_a_retry_within_the_envelope_is_asked_made_and_audited_as_declared(provider: Any, collector: Any) -> None:
    provider.script = [503]
    decisions = RecordingDecisions(collector.url)
    waits: List[float] = []
    guarded = retry_spend.openai.guard(client(provider), envelope(), decisions, service=SERVICE, sleep=no_sleep(waits))
    reply = guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    assert reply.choices[0].message.content == "Refund approved."
    assert provider.models == ["deepseek-v4-flash", "deepseek-v4-flash"]  # the client's own retries are off
    assert waits == [0.0]  # Retry-After: 0
    [d] = decisions.answers
    assert d.allow and d.decision == "within_envelope" and d.attempt_index == 1
    assert isinstance(d.estimated_incremental_usd, Decimal)
    # planned: (input × 0.319 + 800 × 0.957) / 1e6 at the vip ratio 1
    assert d.estimated_incremental_usd == (Decimal(estimate(MESSAGES)) * Decimal("0.319") + 800 * Decimal("0.957")) / Decimal(10**6)
    rows = collector.rows()
    assert len(rows) == 2
    check_declared(rows, decisions.answers)
    assert rows[0]["error_type"] == "503" and rows[1]["error_type"] is None
    assert rows[1]["spend_class"] == "retry" and rows[1]["output_tokens"] == 12
    assert rows[0]["task_type"] == "support_summary" and rows[0]["service_name"] == SERVICE
    assert rows[0]["input_tokens"] == estimate(MESSAGES) and rows[0]["output_cap"] == 800


def test_a_fallback_over_the_envelope_is_refused_and_never_sent(provider: Any, collector: Any) -> None:
    provider.script = [503, 503]
    decisions = RecordingDecisions(collector.url)
    guarded = retry_spend.openai.guard(
        client(provider), envelope(max_incremental_usd="0.001"), decisions, service=SERVICE,
        retries_per_model=1, fallbacks=["glm-5"], sleep=no_sleep([]))
    with pytest.raises(retry_spend.RetryDenied) as denied:
        guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    assert denied.value.decision.decision == "over_envelope"
    assert not denied.value.decision.allow
    assert denied.value.decision.remaining_envelope_usd is not None and denied.value.decision.remaining_envelope_usd < 0
    assert isinstance(denied.value.__cause__, openai.InternalServerError)
    assert provider.models == ["deepseek-v4-flash", "deepseek-v4-flash"]  # glm-5 never sent
    allowed, refused = decisions.answers
    assert allowed.decision == "within_envelope" and refused is denied.value.decision
    rows = collector.rows()
    assert len(rows) == 2
    check_declared(rows, [allowed])


def test_over_attempts_is_refused(provider: Any, collector: Any) -> None:
    provider.script = [503, 429]
    decisions = RecordingDecisions(collector.url)
    guarded = retry_spend.openai.guard(
        client(provider), envelope(max_attempts_after_first=1), decisions, service=SERVICE, sleep=no_sleep([]))
    with pytest.raises(retry_spend.RetryDenied) as denied:
        guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    assert denied.value.decision.decision == "over_attempts"
    assert "over_attempts" in denied.value.decision.violations
    assert isinstance(denied.value.__cause__, openai.RateLimitError)
    assert len(provider.log) == 2
    rows = collector.rows()
    check_declared(rows, decisions.answers[:1])
    assert [r["error_type"] for r in rows] == ["503", "429"]


def test_a_fallback_to_a_family_outside_the_list_is_routing_drift(provider: Any, collector: Any) -> None:
    provider.script = [503]
    decisions = RecordingDecisions(collector.url)
    guarded = retry_spend.openai.guard(
        client(provider), envelope(), decisions, service=SERVICE,
        retries_per_model=0, fallbacks=["kimi-k2.6"], sleep=no_sleep([]))
    with pytest.raises(retry_spend.RetryDenied) as denied:
        guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    assert denied.value.decision.decision == "routing_drift"
    assert provider.models == ["deepseek-v4-flash"]
    rows = collector.rows()
    assert len(rows) == 1
    check_declared(rows, [])


def test_a_non_retryable_error_is_raised_unchanged_without_asking(provider: Any, collector: Any) -> None:
    provider.script = [400]
    decisions = RecordingDecisions(collector.url)
    guarded = retry_spend.openai.guard(client(provider), envelope(), decisions, service=SERVICE, sleep=no_sleep([]))
    with pytest.raises(openai.BadRequestError):
        guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    assert decisions.answers == [] and len(provider.log) == 1
    rows = collector.rows()
    assert [r["error_type"] for r in rows] == ["400"]


def test_a_stream_cut_after_output_is_not_replayed(provider: Any, collector: Any) -> None:
    provider.script = ["break"]
    decisions = RecordingDecisions(collector.url)
    guarded = retry_spend.openai.guard(client(provider), envelope(), decisions, service=SERVICE, sleep=no_sleep([]))
    stream = guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800, stream=True)
    seen: List[str] = []
    with pytest.raises(retry_spend.RetryDenied) as denied:
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")
    assert seen == ["Refund ", "approved"]
    assert denied.value.decision.decision == "replay_unsafe"
    assert isinstance(denied.value.__cause__, openai.APIConnectionError)
    assert len(provider.log) == 1
    rows = collector.rows()
    assert len(rows) == 1 and rows[0]["output_reached_client"] is True
    check_declared(rows, [])


def test_a_replay_safe_stream_goes_on_with_the_next_attempt(provider: Any, collector: Any) -> None:
    provider.script = ["break"]
    decisions = RecordingDecisions(collector.url)
    guarded = retry_spend.openai.guard(
        client(provider), envelope(replay_safe=True), decisions, service=SERVICE, sleep=no_sleep([]))
    stream = guarded.chat.completions.create(
        model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800, stream=True,
        stream_options={"include_usage": True})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Refund approvedRefund approved."
    assert len(provider.log) == 2
    rows = collector.rows()
    assert [r["output_reached_client"] for r in rows] == [True, True]
    assert [r["decision"] for r in rows] == ["first_attempt", "within_envelope"]
    assert rows[1]["output_tokens"] == 12
    check_declared(rows, decisions.answers)


def test_the_decision_service_down_denies(provider: Any, collector: Any) -> None:
    provider.script = [503]
    down = retry_spend.Decisions("http://127.0.0.1:9", timeout=0.5)
    guarded = retry_spend.openai.guard(client(provider), envelope(), down, service=SERVICE, sleep=no_sleep([]))
    with pytest.raises(retry_spend.DecisionUnavailable) as unavailable:
        guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    assert isinstance(unavailable.value.__cause__, openai.InternalServerError)
    assert len(provider.log) == 1
    rows = collector.rows()
    assert len(rows) == 1


def test_the_decision_service_down_allowed_is_recorded(provider: Any, collector: Any) -> None:
    provider.script = [503]
    down = retry_spend.Decisions("http://127.0.0.1:9", timeout=0.5)
    guarded = retry_spend.openai.guard(
        client(provider), envelope(), down, service=SERVICE, on_unavailable="allow", sleep=no_sleep([]))
    reply = guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    assert reply.choices[0].message.content == "Refund approved."
    assert len(provider.log) == 2
    rows = collector.rows()
    assert [r["sdk_decision_reason"] for r in rows] == [None, "decision service unavailable"]
    assert rows[1]["decision"] == "within_envelope" and rows[1]["attempt_source"] == "declared"


def test_bearer_tokens_for_the_decisions_and_the_spans(provider: Any, start_collector: Any) -> None:
    collector = start_collector(token="s3cret-token")
    with pytest.raises(ValueError, match="401"):
        retry_spend.Decisions(collector.url).decide(
            envelope(), service=SERVICE, task_type=None,
            attempts=[{"model": "deepseek-v4-flash", "input_tokens": 10, "output_cap": 800}],
            next={"model": "deepseek-v4-flash", "input_tokens": 10, "output_cap": 800})
    provider.script = [500]
    decisions = RecordingDecisions(collector.url, token="s3cret-token")
    guarded = retry_spend.openai.guard(client(provider), envelope(), decisions, service=SERVICE, sleep=no_sleep([]))
    guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
    rows = collector.rows()
    assert len(rows) == 2
    check_declared(rows, decisions.answers)


def test_async_client_and_async_stream(provider: Any, collector: Any) -> None:
    provider.script = [502, "ok", "break"]
    decisions = RecordingDecisions(collector.url)
    waits: List[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def main() -> Any:
        guarded = retry_spend.openai.guard(
            openai.AsyncOpenAI(base_url=provider.url, api_key="not-needed"), envelope(), decisions,
            service=SERVICE, task_type="async_summary", sleep=sleep)
        reply = await guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800)
        stream = await guarded.chat.completions.create(model="deepseek-v4-flash", messages=MESSAGES, max_tokens=800, stream=True)
        seen = []
        with pytest.raises(retry_spend.RetryDenied) as denied:
            async for chunk in stream:
                seen.append(chunk.choices[0].delta.content)
        return reply, seen, denied.value

    reply, seen, denied = asyncio.run(main())
    assert reply.choices[0].message.content == "Refund approved."
    assert seen == ["Refund ", "approved"] and denied.decision.decision == "replay_unsafe"
    assert waits == [0.0]
    rows = collector.rows()
    assert len(rows) == 3 and {r["task_type"] for r in rows} == {"async_summary"}
    by_request: Dict[str, List[Any]] = {}
    for r in rows:
        by_request.setdefault(r["request_id"], []).append(r)
    retried = next(rs for rs in by_request.values() if len(rs) == 2)
    check_declared(retried, decisions.answers[:1])
    [streamed] = [rs for rs in by_request.values() if len(rs) == 1]
    assert streamed[0]["output_reached_client"] is True and retried[0]["error_type"] == "502"
