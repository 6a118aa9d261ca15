"""One guarded logical request: its plan of attempts, the attempts made, their spans (SPEC §8).

Integration-neutral: an integration (retry_spend.openai) calls the provider and tells the run
what happened; the run decides what is asked, what is traced and what is raised.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ._decisions import Decision, DecisionUnavailable, RetryDenied
from ._envelope import Envelope, decimal_text

UNAVAILABLE_REASON = "decision service unavailable"
BASE_DELAY = 0.5
MAX_DELAY = 8.0
MAX_RETRY_AFTER = 60.0

_tracer = trace.get_tracer("retry_spend", "0.1.0")


def estimate_input_tokens(messages: Any) -> int:
    """ceil(UTF-8 bytes of `messages` as compact JSON / 4): the count asked with before the
    provider has reported one."""

    def plain(value: Any) -> Any:
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            return dump()
        return str(value)

    text = json.dumps(messages, separators=(",", ":"), ensure_ascii=False, default=plain)
    return math.ceil(len(text.encode("utf-8")) / 4)


def backoff_delay(retry: int, retry_after: Optional[float]) -> float:
    """The wait before retry number `retry` (0 for the first): `Retry-After` when the provider
    gave one, else 0.5 s × 2ⁿ up to 8 s, with up to 25 % jitter taken off."""
    if retry_after is not None and 0 <= retry_after <= MAX_RETRY_AFTER:
        return retry_after
    delay = min(BASE_DELAY * (2.0**retry), MAX_DELAY)
    return delay * (1.0 - 0.25 * random.random())


def parse_retry_after(headers: Optional[Mapping[str, str]]) -> Optional[float]:
    """Seconds from `retry-after-ms`, else `retry-after` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class AttemptRecord:
    index: int
    model: str
    planned_input_tokens: int
    output_cap: Optional[int]
    decision: Optional[Decision] = None
    unavailable: bool = False
    input_tokens: Optional[int] = None  # reported
    cached_input_tokens: Optional[int] = None
    cache_write_input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    response_model: Optional[str] = None
    output_reached_client: bool = False
    error_type: Optional[str] = None
    span: Optional[Span] = None
    done: bool = False

    def fields(self) -> Dict[str, Any]:
        """The attempt as §7 reads it."""
        return {
            "model": self.model,
            "input_tokens": self.input_tokens if self.input_tokens is not None else self.planned_input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_input_tokens": self.cache_write_input_tokens,
            "output_cap": self.output_cap,
            "output_reached_client": self.output_reached_client,
            "error_type": self.error_type,
        }


@dataclass
class Failure:
    """What the integration learned of a failed attempt."""

    error: BaseException
    error_type: str
    retryable: bool
    retry_after: Optional[float] = None


@dataclass
class Run:
    envelope: Envelope
    service: Optional[str]
    task_type: Optional[str]
    plan: Sequence[str]
    messages: Any
    output_cap: Optional[int]
    provider: str
    on_unavailable: str
    at: Any = None
    request_id: str = field(default_factory=lambda: secrets.token_hex(16))
    attempts: List[AttemptRecord] = field(default_factory=list)
    last_failure: Optional[Failure] = None
    logical: Optional[Span] = None
    finished: bool = False
    _estimate: Optional[int] = None
    _admitted: Tuple[Optional[Decision], bool] = (None, False)

    # -- planning -----------------------------------------------------------------------------

    def _latest_reported(self) -> Optional[int]:
        for attempt in reversed(self.attempts):
            if attempt.input_tokens is not None:
                return attempt.input_tokens
        return None

    def _planned_input(self) -> int:
        reported = self._latest_reported()
        if reported is not None:
            return reported
        if self._estimate is None:
            self._estimate = estimate_input_tokens(self.messages)
        return self._estimate

    def next_model(self) -> Optional[str]:
        k = len(self.attempts)
        return self.plan[k] if k < len(self.plan) else None

    def question(self) -> Dict[str, Any]:
        """The keyword arguments of `Decisions.decide` for the next attempt of the plan."""
        model = self.next_model()
        assert model is not None
        proposed: Dict[str, Any] = {"model": model, "input_tokens": self._planned_input()}
        if self.output_cap is not None:
            proposed["output_cap"] = self.output_cap
        return {
            "service": self.service,
            "task_type": self.task_type,
            "attempts": [a.fields() for a in self.attempts],
            "next": proposed,
            "at": self.at,
        }

    # -- the logical request --------------------------------------------------------------------

    def _start_logical(self) -> None:
        attributes: Dict[str, Any] = dict(self.envelope.attributes())
        attributes.pop("retry_spend.task.type", None)
        if self.task_type is not None:
            attributes["retry_spend.task.type"] = self.task_type
        attributes["retry_spend.span.role"] = "logical_request"
        attributes["retry_spend.request.id"] = self.request_id
        attributes["gen_ai.operation.name"] = "chat"
        attributes["gen_ai.request.model"] = self.plan[0]
        # The logical request span never makes a row (§2), whatever GenAI attributes it has.
        self.logical = _tracer.start_span(f"retry_spend.request {self.plan[0]}", kind=SpanKind.INTERNAL, attributes=attributes)

    def _finish(self, error: Optional[BaseException]) -> None:
        if self.finished:
            return
        self.finished = True
        span = self.logical
        if span is None:
            return
        span.set_attribute("retry_spend.attempt_count", len(self.attempts))
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            if isinstance(error, RetryDenied):
                d = error.decision
                span.add_event(
                    "retry_spend.retry_denied",
                    {
                        "retry_spend.decision": d.decision,
                        "retry_spend.violations": list(d.violations),
                        "retry_spend.sdk.decision_reason": d.decision_reason,
                    },
                )
        span.end()

    # -- admitting the next attempt --------------------------------------------------------------

    def admit(self, decision: Optional[Decision], unavailable: Optional[DecisionUnavailable]) -> None:
        """Proceeds only on `allow` (or an unavailable service with on_unavailable="allow");
        otherwise finishes the request and raises, the provider's last error as the cause."""
        cause = self.last_failure.error if self.last_failure is not None else None
        if unavailable is not None:
            if self.on_unavailable == "allow":
                self._admitted = (None, True)
                return
            error = DecisionUnavailable(str(unavailable))
            error.__cause__ = cause
            error.__context__ = unavailable
            self._finish(error)
            raise error
        assert decision is not None
        if not decision.allow:
            denied = RetryDenied(decision)
            denied.__cause__ = cause
            self._finish(denied)
            raise denied
        self._admitted = (decision, False)

    def delay(self) -> float:
        """The wait before the next attempt."""
        retry_after = self.last_failure.retry_after if self.last_failure is not None else None
        return backoff_delay(len(self.attempts) - 1, retry_after)

    # -- attempts ----------------------------------------------------------------------------------

    def start_attempt(self) -> AttemptRecord:
        if self.logical is None:
            self._start_logical()
        model = self.next_model()
        assert model is not None
        decision: Optional[Decision] = None
        unavailable = False
        if self.attempts:
            decision, unavailable = self._admitted
            self._admitted = (None, False)
        record = AttemptRecord(
            index=len(self.attempts),
            model=model,
            planned_input_tokens=self._planned_input(),
            output_cap=self.output_cap,
            decision=decision,
            unavailable=unavailable,
        )
        attributes: Dict[str, Any] = {
            "retry_spend.span.role": "attempt",
            "retry_spend.request.id": self.request_id,
            "retry_spend.attempt.index": record.index,
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": model,
        }
        if self.output_cap is not None:
            attributes["gen_ai.request.max_tokens"] = self.output_cap
        if decision is not None:
            if decision.estimated_incremental_usd is not None:
                attributes["retry_spend.sdk.estimated_incremental_usd"] = decimal_text(decision.estimated_incremental_usd)
            if decision.remaining_envelope_usd is not None:
                attributes["retry_spend.sdk.remaining_envelope_usd"] = decimal_text(decision.remaining_envelope_usd)
            attributes["retry_spend.sdk.decision_reason"] = decision.decision_reason
        elif unavailable:
            attributes["retry_spend.sdk.decision_reason"] = UNAVAILABLE_REASON
        assert self.logical is not None
        context = trace.set_span_in_context(self.logical)
        record.span = _tracer.start_span(f"chat {model}", context=context, kind=SpanKind.CLIENT, attributes=attributes)
        self.attempts.append(record)
        return record

    def usage(self, record: AttemptRecord, usage: Any, response_model: Optional[str]) -> None:
        """Takes the counts of an OpenAI-shaped `usage` object (None: not reported)."""
        if response_model:
            record.response_model = response_model
        if usage is None:
            return
        prompt = getattr(usage, "prompt_tokens", None)
        if isinstance(prompt, int):
            record.input_tokens = prompt
        completion = getattr(usage, "completion_tokens", None)
        if isinstance(completion, int):
            record.output_tokens = completion
        details = getattr(usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        if isinstance(cached, int):
            record.cached_input_tokens = cached

    def _end_attempt(self, record: AttemptRecord) -> None:
        if record.done:
            return
        record.done = True
        span = record.span
        if span is None:
            return
        span.set_attribute(
            "gen_ai.usage.input_tokens",
            record.input_tokens if record.input_tokens is not None else record.planned_input_tokens,
        )
        if record.cached_input_tokens is not None:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", record.cached_input_tokens)
        if record.output_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", record.output_tokens)
        if record.response_model is not None:
            span.set_attribute("gen_ai.response.model", record.response_model)
        span.set_attribute("retry_spend.attempt.output_reached_client", record.output_reached_client)
        if record.error_type is not None:
            span.set_attribute("error.type", record.error_type)
            span.set_status(Status(StatusCode.ERROR, record.error_type))
        span.end()

    def succeeded(self, record: AttemptRecord) -> None:
        self._end_attempt(record)
        self._finish(None)

    def failed(self, record: AttemptRecord, failure: Failure) -> bool:
        """Records a failed attempt. True: the plan goes on (ask, wait, try the next attempt);
        False: the request is over and the caller re-raises the provider's error unchanged."""
        record.error_type = failure.error_type
        self._end_attempt(record)
        self.last_failure = failure
        if failure.retryable and self.next_model() is not None:
            return True
        self._finish(failure.error)
        return False

    def abandoned(self, record: AttemptRecord) -> None:
        """The caller stopped reading a stream: the attempt ends as it stands."""
        self._end_attempt(record)
        self._finish(None)
