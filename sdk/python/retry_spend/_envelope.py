"""The retry envelope of SPEC §2: what a request may spend on attempts after the first."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal, InvalidOperation
from typing import Any, Dict, Iterable, Optional, Tuple, Union

Money = Union[Decimal, str, int]
AttributeValue = Union[str, bool, int, Tuple[str, ...]]


def to_decimal(value: Union[Money, float], name: str) -> Decimal:
    """`value` as an exact Decimal; a float is read through its shortest representation."""
    if isinstance(value, bool):
        raise TypeError(f"{name}: a decimal amount, not a bool")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, (int, str)):
        try:
            result = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError(f"{name}: not a decimal amount: {value!r}") from None
    elif isinstance(value, float):
        result = Decimal(repr(value))
    else:
        raise TypeError(f"{name}: a Decimal or a decimal string, not {type(value).__name__}")
    if not result.is_finite():
        raise ValueError(f"{name}: not a finite amount: {value!r}")
    return result


def decimal_text(value: Decimal) -> str:
    """Plain decimal text, never exponent notation ("0.015", not "1.5E-2")."""
    return format(value, "f")


class Envelope:
    """The §2 envelope: a budget for every attempt after the first, with the pricing it is
    measured against. Money is `Decimal` (a decimal string or an int is read exactly)."""

    __slots__ = (
        "max_incremental_usd",
        "max_attempts_after_first",
        "pricing_version",
        "pricing_checked_at",
        "pricing_source",
        "billing_group",
        "allow_family_fallback",
        "allowed_fallback_families",
        "replay_safe",
        "assumed_output_cap",
        "task_type",
    )

    max_incremental_usd: Decimal
    max_attempts_after_first: int
    pricing_version: Optional[str]
    pricing_checked_at: Optional[str]
    pricing_source: Optional[str]
    billing_group: Optional[str]
    allow_family_fallback: bool
    allowed_fallback_families: Tuple[str, ...]
    replay_safe: bool
    assumed_output_cap: Optional[int]
    task_type: Optional[str]

    def __init__(
        self,
        max_incremental_usd: Union[Money, float],
        max_attempts_after_first: int,
        *,
        pricing_version: Optional[str] = None,
        pricing_checked_at: Union[str, datetime.date, None] = None,
        pricing_source: Optional[str] = None,
        billing_group: Optional[str] = None,
        allow_family_fallback: bool = False,
        allowed_fallback_families: Iterable[str] = (),
        replay_safe: bool = False,
        assumed_output_cap: Optional[int] = None,
        task_type: Optional[str] = None,
    ) -> None:
        self.max_incremental_usd = to_decimal(max_incremental_usd, "max_incremental_usd")
        if isinstance(max_attempts_after_first, bool) or not isinstance(max_attempts_after_first, int):
            raise TypeError("max_attempts_after_first: an int")
        if max_attempts_after_first < 0:
            raise ValueError("max_attempts_after_first: not negative")
        self.max_attempts_after_first = max_attempts_after_first
        self.pricing_version = pricing_version
        if isinstance(pricing_checked_at, datetime.datetime):
            pricing_checked_at = pricing_checked_at.astimezone(datetime.timezone.utc).date()
        if isinstance(pricing_checked_at, datetime.date):
            pricing_checked_at = pricing_checked_at.isoformat()
        self.pricing_checked_at = pricing_checked_at
        self.pricing_source = pricing_source
        self.billing_group = billing_group
        self.allow_family_fallback = bool(allow_family_fallback)
        if isinstance(allowed_fallback_families, str):
            raise TypeError("allowed_fallback_families: a sequence of family names, not a string")
        self.allowed_fallback_families = tuple(allowed_fallback_families)
        self.replay_safe = bool(replay_safe)
        if assumed_output_cap is not None and (
            isinstance(assumed_output_cap, bool) or not isinstance(assumed_output_cap, int)
        ):
            raise TypeError("assumed_output_cap: an int")
        self.assumed_output_cap = assumed_output_cap
        self.task_type = task_type

    def fields(self) -> Dict[str, Any]:
        """The JSON envelope's fields (§2), money as decimal strings; absent values left out."""
        out: Dict[str, Any] = {
            "pricing_source": self.pricing_source,
            "pricing_checked_at": self.pricing_checked_at,
            "pricing_version": self.pricing_version,
            "billing_group": self.billing_group,
            "max_incremental_usd": decimal_text(self.max_incremental_usd),
            "max_attempts_after_first": self.max_attempts_after_first,
            "allow_family_fallback": self.allow_family_fallback,
            "allowed_fallback_families": list(self.allowed_fallback_families),
            "replay_safe": self.replay_safe,
            "assumed_output_cap": self.assumed_output_cap,
            "task_type": self.task_type,
        }
        return {k: v for k, v in out.items() if v is not None}

    def to_json(self) -> str:
        """The seed's JSON form, `{"retry_spend_envelope": {...}}` (the `retry_spend.envelope`
        attribute's value)."""
        return json.dumps({"retry_spend_envelope": self.fields()}, separators=(",", ":"))

    def attributes(self) -> Dict[str, AttributeValue]:
        """The flat span attributes of §2 ("Envelope attributes"); absent values left out."""
        out: Dict[str, Optional[AttributeValue]] = {
            "retry_spend.pricing.source": self.pricing_source,
            "retry_spend.pricing.checked_at": self.pricing_checked_at,
            "retry_spend.pricing.version": self.pricing_version,
            "retry_spend.billing_group": self.billing_group,
            "retry_spend.envelope.max_incremental_usd": decimal_text(self.max_incremental_usd),
            "retry_spend.envelope.max_attempts_after_first": self.max_attempts_after_first,
            "retry_spend.envelope.allow_family_fallback": self.allow_family_fallback,
            "retry_spend.envelope.allowed_fallback_families": self.allowed_fallback_families or None,
            "retry_spend.envelope.replay_safe": self.replay_safe,
            "retry_spend.envelope.assumed_output_cap": self.assumed_output_cap,
            "retry_spend.task.type": self.task_type,
        }
        return {k: v for k, v in out.items() if v is not None}

    def __repr__(self) -> str:
        return f"Envelope({self.fields()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Envelope) and self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(json.dumps(self.fields(), sort_keys=True))
