"""A client of the decision service (SPEC §7): `POST /v1/retry-decision` over HTTP JSON."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import httpx

from ._envelope import Envelope

PATH = "/v1/retry-decision"

# The fields §7 reads of an attempt made and of the proposed one.
ATTEMPT_FIELDS = (
    "model",
    "input_tokens",
    "cached_input_tokens",
    "output_cap",
    "output_reached_client",
    "error_type",
    "cache_write_input_tokens",
)
NEXT_FIELDS = ("model", "input_tokens", "cached_input_tokens", "output_cap", "cache_write_input_tokens")


class DecisionUnavailable(Exception):
    """The decision service could not answer: a connection failure, a timeout, a 5xx answer or
    one that is not the §7 response."""


@dataclass(frozen=True)
class Decision:
    """The decision service's answer (§7), field for field; money as `Decimal`."""

    allow: bool
    decision: str
    violations: Tuple[str, ...]
    unaudited_reason: Optional[str]
    attempt_index: int
    estimated_incremental_usd: Optional[Decimal]
    cumulative_incremental_usd: Optional[Decimal]
    remaining_envelope_usd: Optional[Decimal]
    pricing_version: Optional[str]
    pricing_checked_at: Optional[str]
    pricing_digest: Optional[str]
    envelope_source: Optional[str]
    decision_reason: str

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Decision":
        def money(key: str) -> Optional[Decimal]:
            value = body.get(key)
            if value is None or value == "":
                return None
            return Decimal(str(value))

        def text(key: str) -> Optional[str]:
            value = body.get(key)
            return None if value is None else str(value)

        violations = body.get("violations") or ()
        return cls(
            allow=bool(body.get("allow", False)),
            decision=str(body.get("decision", "")),
            violations=tuple(str(v) for v in violations),
            unaudited_reason=text("unaudited_reason"),
            attempt_index=int(body.get("attempt_index", 0)),
            estimated_incremental_usd=money("estimated_incremental_usd"),
            cumulative_incremental_usd=money("cumulative_incremental_usd"),
            remaining_envelope_usd=money("remaining_envelope_usd"),
            pricing_version=text("pricing_version"),
            pricing_checked_at=text("pricing_checked_at"),
            pricing_digest=text("pricing_digest"),
            envelope_source=text("envelope_source"),
            decision_reason=str(body.get("decision_reason", "")),
        )


class RetryDenied(Exception):
    """The envelope does not allow the next attempt. `.decision` is the service's answer; the
    provider's last error is the `__cause__`."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(f"{decision.decision}: {decision.decision_reason}")
        self.decision = decision


Timestamp = Union[str, datetime.datetime, None]


def _at_text(at: Timestamp) -> Optional[str]:
    if at is None or isinstance(at, str):
        return at
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.timezone.utc)
    return at.isoformat()


def _pick(attempt: Mapping[str, Any], keys: Sequence[str], where: str) -> Dict[str, Any]:
    unknown = set(attempt) - set(keys)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
    return {k: attempt[k] for k in keys if attempt.get(k) is not None}


def request_body(
    envelope: Optional[Envelope],
    *,
    service: Optional[str],
    task_type: Optional[str],
    attempts: Sequence[Mapping[str, Any]],
    next: Mapping[str, Any],
    at: Timestamp = None,
) -> Dict[str, Any]:
    """The §7 request as JSON; absent values are left out."""
    body: Dict[str, Any] = {
        "attempts": [_pick(a, ATTEMPT_FIELDS, f"attempts[{i}]") for i, a in enumerate(attempts)],
        "next": _pick(next, NEXT_FIELDS, "next"),
    }
    if envelope is not None:
        body["envelope"] = envelope.fields()
    if service is not None:
        body["service"] = service
    if task_type is not None:
        body["task_type"] = task_type
    at_text = _at_text(at)
    if at_text is not None:
        body["at"] = at_text
    return body


def _answer(response: httpx.Response) -> Decision:
    if response.status_code >= 500:
        raise DecisionUnavailable(f"decision service answered HTTP {response.status_code}: {response.text[:200]}")
    if response.status_code >= 400:
        # 400 names the field at fault; 401 is a missing or wrong token.
        raise ValueError(f"decision service refused the request (HTTP {response.status_code}): {response.text[:500]}")
    try:
        body = response.json()
        if not isinstance(body, dict):
            raise TypeError("not a JSON object")
        return Decision.from_json(body)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise DecisionUnavailable(f"decision service answered something else than a decision: {e}") from e


class Decisions:
    """A client of the decision service: `url` is the collector's HTTP base address
    (e.g. `http://127.0.0.1:4318`); it posts to `url` + `/v1/retry-decision`."""

    def __init__(self, url: str, *, token: Optional[str] = None, timeout: float = 0.5) -> None:
        self.url = url.rstrip("/")
        self.endpoint = self.url + PATH
        self.timeout = timeout
        self._headers = {"content-type": "application/json"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        self._client: Optional[httpx.Client] = None

    def __repr__(self) -> str:
        return f"Decisions({self.url!r}, timeout={self.timeout})"

    def _sync_client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, trust_env=False)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "Decisions":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def decide(
        self,
        envelope: Optional[Envelope],
        *,
        service: Optional[str],
        task_type: Optional[str],
        attempts: Sequence[Mapping[str, Any]],
        next: Mapping[str, Any],
        at: Timestamp = None,
    ) -> Decision:
        """What §4 decides for `next` after `attempts` (index 0 first). `envelope=None` lets the
        collector match one of its policies."""
        body = request_body(envelope, service=service, task_type=task_type, attempts=attempts, next=next, at=at)
        try:
            response = self._sync_client().post(self.endpoint, content=json.dumps(body), headers=self._headers)
        except (httpx.HTTPError, OSError) as e:
            raise DecisionUnavailable(f"decision service at {self.url} did not answer: {e!r}") from e
        return _answer(response)

    async def adecide(
        self,
        envelope: Optional[Envelope],
        *,
        service: Optional[str],
        task_type: Optional[str],
        attempts: Sequence[Mapping[str, Any]],
        next: Mapping[str, Any],
        at: Timestamp = None,
    ) -> Decision:
        """`decide`, awaited."""
        body = request_body(envelope, service=service, task_type=task_type, attempts=attempts, next=next, at=at)
        try:
            async with httpx.AsyncClient(timeout=self.timeout, trust_env=False) as client:
                response = await client.post(self.endpoint, content=json.dumps(body), headers=self._headers)
        except (httpx.HTTPError, OSError) as e:
            raise DecisionUnavailable(f"decision service at {self.url} did not answer: {e!r}") from e
        return _answer(response)
