"""Guards an `openai.OpenAI` or `openai.AsyncOpenAI` client (SPEC §8).

    client = retry_spend.openai.guard(openai.OpenAI(), envelope, decisions, service="support-bot",
                                      fallbacks=("glm-5",))
    client.chat.completions.create(model="deepseek-v4-flash", messages=[...], max_tokens=800)

The client's own retries are turned off; `chat.completions.create` runs the plan itself (attempt 0
on the requested model, up to `retries_per_model` retries of it, then each fallback with as many
retries), asks the decision service before every attempt after the first, and raises
`RetryDenied` (with the provider's last error as `__cause__`) instead of escalating. Everything
else on the client is the client's own, without retries.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from typing import Any, AsyncIterator, Callable, Iterator, List, Optional, Sequence, Tuple

import httpx
import openai

from ._decisions import Decision, Decisions, DecisionUnavailable
from ._envelope import Envelope
from ._run import AttemptRecord, Failure, Run, parse_retry_after

__all__ = ["guard", "GuardedOpenAI", "GuardedAsyncOpenAI", "GuardedStream", "GuardedAsyncStream"]

RETRYABLE_STATUS = (408, 409, 429)
Sleep = Callable[[float], Any]


def classify(error: BaseException) -> Failure:
    """Whether a provider error moves to the plan's next attempt, and its `error_type`."""
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        headers = error.response.headers
        should = (headers.get("x-should-retry") or "").lower()
        if should == "true":
            retryable = True
        elif should == "false":
            retryable = False
        else:
            retryable = status in RETRYABLE_STATUS or status >= 500
        return Failure(error, str(status), retryable, parse_retry_after(headers))
    if isinstance(error, (openai.APIConnectionError, httpx.TransportError)):
        # Timeouts included (openai.APITimeoutError is a connection error).
        return Failure(error, type(error).__name__, True)
    return Failure(error, type(error).__name__, False)


def _plan(model: str, retries_per_model: int, fallbacks: Sequence[str]) -> List[str]:
    plan: List[str] = []
    for m in (model, *fallbacks):
        plan.extend([m] * (1 + retries_per_model))
    return plan


def _output_cap(kwargs: dict[str, Any]) -> Optional[int]:
    for key in ("max_completion_tokens", "max_tokens"):
        value = kwargs.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class _Guard:
    """What `guard` was given."""

    def __init__(
        self,
        envelope: Envelope,
        decisions: Decisions,
        service: str,
        task_type: Optional[str],
        retries_per_model: int,
        fallbacks: Sequence[str],
        on_unavailable: str,
        sleep: Optional[Sleep],
    ) -> None:
        if on_unavailable not in ("deny", "allow"):
            raise ValueError('on_unavailable: "deny" or "allow"')
        if retries_per_model < 0:
            raise ValueError("retries_per_model: not negative")
        resolved = task_type if task_type is not None else envelope.task_type
        if resolved != envelope.task_type:
            envelope = copy.copy(envelope)
            envelope.task_type = resolved
        self.envelope = envelope
        self.decisions = decisions
        self.service = service
        self.task_type = resolved
        self.retries_per_model = retries_per_model
        self.fallbacks = tuple(fallbacks)
        self.on_unavailable = on_unavailable
        self.sleep = sleep

    def run(self, kwargs: dict[str, Any]) -> Run:
        model = kwargs.get("model")
        if not isinstance(model, str) or not model:
            raise TypeError("chat.completions.create: model is required")
        return Run(
            envelope=self.envelope,
            service=self.service,
            task_type=self.task_type,
            plan=_plan(model, self.retries_per_model, self.fallbacks),
            messages=kwargs.get("messages"),
            output_cap=_output_cap(kwargs),
            provider="openai",
            on_unavailable=self.on_unavailable,
        )


def _chunk(run: Run, record: AttemptRecord, chunk: Any) -> None:
    record.output_reached_client = True
    run.usage(record, getattr(chunk, "usage", None), getattr(chunk, "model", None))


# -- synchronous --------------------------------------------------------------------------------


class _Completions:
    def __init__(self, guard: _Guard, client: Any) -> None:
        self._guard = guard
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client.chat.completions, name)

    def create(self, **kwargs: Any) -> Any:
        """`chat.completions.create`, run as the guarded plan; `stream=True` gives a
        `GuardedStream` of the chunks."""
        run = self._guard.run(kwargs)
        result, record = self._drive(run, kwargs)
        if kwargs.get("stream"):
            return GuardedStream(self, run, kwargs, result, record)
        return result

    def _drive(self, run: Run, kwargs: dict[str, Any]) -> Tuple[Any, AttemptRecord]:
        g = self._guard
        while True:
            if run.attempts:
                decision: Optional[Decision] = None
                unavailable: Optional[DecisionUnavailable] = None
                try:
                    decision = g.decisions.decide(g.envelope, **run.question())
                except DecisionUnavailable as e:
                    unavailable = e
                run.admit(decision, unavailable)
                (g.sleep or _time_sleep)(run.delay())
            record = run.start_attempt()
            try:
                result = self._client.chat.completions.create(**{**kwargs, "model": record.model})
            except BaseException as e:
                if run.failed(record, classify(e)):
                    continue
                raise
            if not kwargs.get("stream"):
                run.usage(record, getattr(result, "usage", None), getattr(result, "model", None))
                run.succeeded(record)
            return result, record


def _time_sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


class GuardedStream:
    """The chunks of a guarded streamed completion. A stream that fails goes on with the plan's
    next attempt, if the decision service allows it: an envelope that is not `replay_safe`
    refuses it once a chunk has reached the caller, and iteration raises `RetryDenied`."""

    def __init__(self, completions: _Completions, run: Run, kwargs: dict[str, Any], stream: Any, record: AttemptRecord) -> None:
        self._completions = completions
        self._run = run
        self._kwargs = kwargs
        self._stream = stream
        self._iter: Iterator[Any] = iter(stream)
        self._record = record

    @property
    def response(self) -> Any:
        return getattr(self._stream, "response", None)

    def __iter__(self) -> "GuardedStream":
        return self

    def __next__(self) -> Any:
        while True:
            try:
                chunk = next(self._iter)
            except StopIteration:
                self._run.succeeded(self._record)
                raise
            except BaseException as e:
                if not self._run.failed(self._record, classify(e)):
                    raise
                self._stream, self._record = self._completions._drive(self._run, self._kwargs)
                self._iter = iter(self._stream)
                continue
            _chunk(self._run, self._record, chunk)
            return chunk

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if callable(close):
            close()
        self._run.abandoned(self._record)

    def __enter__(self) -> "GuardedStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GuardedOpenAI:
    """An `openai.OpenAI` whose `chat.completions.create` is guarded; everything else is the
    client's own (with its retries off)."""

    def __init__(self, client: Any, guard: _Guard) -> None:
        self._client = client
        self._guard = guard
        self.chat = _Chat(_Completions(guard, client), client)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class _Chat:
    def __init__(self, completions: Any, client: Any) -> None:
        self.completions = completions
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client.chat, name)


# -- asynchronous -------------------------------------------------------------------------------


class _AsyncCompletions:
    def __init__(self, guard: _Guard, client: Any) -> None:
        self._guard = guard
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client.chat.completions, name)

    async def create(self, **kwargs: Any) -> Any:
        """`chat.completions.create`, run as the guarded plan; `stream=True` gives a
        `GuardedAsyncStream` of the chunks."""
        run = self._guard.run(kwargs)
        result, record = await self._drive(run, kwargs)
        if kwargs.get("stream"):
            return GuardedAsyncStream(self, run, kwargs, result, record)
        return result

    async def _drive(self, run: Run, kwargs: dict[str, Any]) -> Tuple[Any, AttemptRecord]:
        g = self._guard
        while True:
            if run.attempts:
                decision: Optional[Decision] = None
                unavailable: Optional[DecisionUnavailable] = None
                try:
                    decision = await g.decisions.adecide(g.envelope, **run.question())
                except DecisionUnavailable as e:
                    unavailable = e
                run.admit(decision, unavailable)
                waited = (g.sleep or asyncio.sleep)(run.delay())
                if inspect.isawaitable(waited):
                    await waited
            record = run.start_attempt()
            try:
                result = await self._client.chat.completions.create(**{**kwargs, "model": record.model})
            except BaseException as e:
                if run.failed(record, classify(e)):
                    continue
                raise
            if not kwargs.get("stream"):
                run.usage(record, getattr(result, "usage", None), getattr(result, "model", None))
                run.succeeded(record)
            return result, record


class GuardedAsyncStream:
    """`GuardedStream` for `AsyncOpenAI`: `async for chunk in stream`."""

    def __init__(self, completions: _AsyncCompletions, run: Run, kwargs: dict[str, Any], stream: Any, record: AttemptRecord) -> None:
        self._completions = completions
        self._run = run
        self._kwargs = kwargs
        self._stream = stream
        self._iter: AsyncIterator[Any] = stream.__aiter__()
        self._record = record

    @property
    def response(self) -> Any:
        return getattr(self._stream, "response", None)

    def __aiter__(self) -> "GuardedAsyncStream":
        return self

    async def __anext__(self) -> Any:
        while True:
            try:
                chunk = await self._iter.__anext__()
            except StopAsyncIteration:
                self._run.succeeded(self._record)
                raise
            except BaseException as e:
                if not self._run.failed(self._record, classify(e)):
                    raise
                self._stream, self._record = await self._completions._drive(self._run, self._kwargs)
                self._iter = self._stream.__aiter__()
                continue
            _chunk(self._run, self._record, chunk)
            return chunk

    async def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if callable(close):
            result = close()
            if inspect.isawaitable(result):
                await result
        self._run.abandoned(self._record)

    async def __aenter__(self) -> "GuardedAsyncStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class GuardedAsyncOpenAI:
    """An `openai.AsyncOpenAI` whose `chat.completions.create` is guarded."""

    def __init__(self, client: Any, guard: _Guard) -> None:
        self._client = client
        self._guard = guard
        self.chat = _Chat(_AsyncCompletions(guard, client), client)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def guard(
    client: Any,
    envelope: Envelope,
    decisions: Decisions,
    *,
    service: str,
    task_type: Optional[str] = None,
    retries_per_model: int = 2,
    fallbacks: Sequence[str] = (),
    on_unavailable: str = "deny",
    sleep: Optional[Sleep] = None,
) -> Any:
    """Wraps `client` (an `openai.OpenAI` or `openai.AsyncOpenAI`) so that its chat completions
    follow the guarded plan. `sleep` replaces the wait between attempts (`time.sleep`, or
    `asyncio.sleep` for an async client; it may return an awaitable)."""
    if isinstance(fallbacks, str):
        raise TypeError("fallbacks: a sequence of model names, not a string")
    g = _Guard(envelope, decisions, service, task_type, retries_per_model, fallbacks, on_unavailable, sleep)
    with_options = getattr(client, "with_options", None)
    unretried = with_options(max_retries=0) if callable(with_options) else client
    if isinstance(client, openai.AsyncOpenAI):
        return GuardedAsyncOpenAI(unretried, g)
    if isinstance(client, openai.OpenAI):
        return GuardedOpenAI(unretried, g)
    raise TypeError(f"guard: an openai.OpenAI or openai.AsyncOpenAI client, not {type(client).__name__}")
