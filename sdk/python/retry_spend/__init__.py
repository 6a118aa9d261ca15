"""retry-spend: enforce a retry envelope where the retry happens.

`Envelope` says what a request may spend on attempts after the first; `Decisions` asks
retry-spend-collector's decision service (SPEC §7) before each retry or fallback;
`retry_spend.openai.guard` wraps an OpenAI client so that it asks before every attempt after the
first and traces each attempt for the collector's audit.
"""

from ._decisions import Decision, Decisions, DecisionUnavailable, RetryDenied
from ._envelope import Envelope

__all__ = ["Envelope", "Decisions", "Decision", "RetryDenied", "DecisionUnavailable"]
__version__ = "0.1.0"
