//! The envelope rules (SPEC §4): one pure function from a request to its rows.
//!
//! No I/O, no clock, no async: `serve` and `replay` call [`evaluate`] alike, which is what makes
//! their rows agree.

mod envelope;
mod reason;

pub use envelope::{resolve as resolve_envelope, Envelope};

use rust_decimal::Decimal;

use crate::assemble::{FastSet, GroupKey, Request};
use crate::contract::UsageOrigin;
use crate::contract::{Count, EnvelopeFields, SpanFacts, SpanId, Symbol};
use crate::policy::{PolicySet, Subject};
use crate::pricing::{add_exact, cost_usd, sub_exact, ModelPrice, PricingBook, Snapshot, Usage};
use crate::record::{
    AttemptRow, AttemptSource, Decision, OutputCapSource, SpendClass, UnauditedReason, UsageSource,
    Violation,
};

/// Settings of the rules that are policy, not contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RulesConfig {
    /// A snapshot checked more than this many whole days before the span start is stale.
    pub max_pricing_age_days: i64,
}

impl Default for RulesConfig {
    fn default() -> Self {
        RulesConfig {
            max_pricing_age_days: 30,
        }
    }
}

/// The SDK's estimate may differ from ours by this much before it is flagged.
const SDK_ESTIMATE_TOLERANCE_USD: Decimal = Decimal::from_parts(1, 0, 0, false, 6);

/// Puts attempts in evaluation order, assigning indices 0, 1, … by (start time, span id) when
/// any attempt lacks one. Returns each attempt's index.
pub fn order_attempts(attempts: &mut [&SpanFacts]) -> Vec<i32> {
    let by_time = |a: &&SpanFacts, b: &&SpanFacts| {
        (a.start_time_unix_nano, a.span_id).cmp(&(b.start_time_unix_nano, b.span_id))
    };
    if attempts.iter().all(|a| a.attempt_index.is_some()) {
        attempts.sort_by(|a, b| {
            a.attempt_index
                .cmp(&b.attempt_index)
                .then_with(|| by_time(a, b))
        });
        attempts
            .iter()
            .map(|a| a.attempt_index.unwrap_or_default())
            .collect()
    } else {
        attempts.sort_by(by_time);
        (0..attempts.len())
            .map(|i| i32::try_from(i).unwrap_or(i32::MAX))
            .collect()
    }
}

/// Gives a request without an envelope of its own the first matching policy's. It is matched on
/// attempt 0 (the first in order; the lowest index when 0 never arrived): its service and
/// model, the request's task type, and every span's captured attributes.
fn apply_policy(
    envelope: &mut Envelope,
    request: &Request,
    attempts: &[&SpanFacts],
    policies: &PolicySet,
    book: &PricingBook,
) {
    let Some(first) = attempts.first() else {
        return;
    };
    let spans: Vec<&SpanFacts> = request
        .logical
        .iter()
        .chain(attempts.iter().copied())
        .chain(&request.sources)
        .collect();
    let subject = Subject {
        service: &first.service_name,
        task_type: envelope.fields.task_type.as_deref(),
        model: first.request_model.as_deref(),
        spans: &spans,
    };
    if let Some(policy) = policies.select(&subject) {
        envelope.adopt(policy, book, Some(utc_date(first.start_time_unix_nano)));
    }
}

fn utc_date(t: u64) -> chrono::NaiveDate {
    chrono::DateTime::from_timestamp_nanos(nanos(t)).date_naive()
}

/// Per-attempt facts the rules derive before judging.
struct Priced<'a> {
    span: &'a SpanFacts,
    index: i32,
    price: Option<&'a ModelPrice>,
    family: Option<&'a Symbol>,
    /// The cap planned with (SPEC §4) and where it came from.
    output_cap: Count,
    output_cap_source: Option<OutputCapSource>,
    usage_invalid: bool,
    planned: Option<Decimal>,
    actual: Option<Decimal>,
    /// The threshold of the tier that priced the attempt.
    tier: Option<i64>,
}

/// [`evaluate_with`] without envelope policies.
pub fn evaluate(request: &Request, book: &PricingBook, config: &RulesConfig) -> Vec<AttemptRow> {
    evaluate_with(request, book, &PolicySet::default(), config)
}

/// Evaluates one request: a row per attempt of `request.attempts`, in attempt order. Attempts
/// in `request.evaluated` count as earlier attempts but get no row again. A request whose spans
/// carry no envelope takes the first matching policy's.
pub fn evaluate_with(
    request: &Request,
    book: &PricingBook,
    policies: &PolicySet,
    config: &RulesConfig,
) -> Vec<AttemptRow> {
    let mut rows = Vec::with_capacity(request.attempts.len());
    evaluate_into(request, book, policies, config, &mut rows);
    rows
}

/// [`evaluate_with`] appending to `rows`: the pipeline evaluates straight into its write batch,
/// so no vector of rows is allocated (and its pages faulted in) per request.
pub fn evaluate_into(
    request: &Request,
    book: &PricingBook,
    policies: &PolicySet,
    config: &RulesConfig,
    rows: &mut Vec<AttemptRow>,
) {
    // References, not copies: evaluation is on every request's hot path.
    let mut attempts: Vec<&SpanFacts> = request.evaluated.iter().chain(&request.attempts).collect();
    // Most requests have no earlier attempts: no set to build, nor to hash every attempt into.
    let already_written: FastSet<SpanId> = request.evaluated.iter().map(|a| a.span_id).collect();
    let indices = order_attempts(&mut attempts);
    let mut envelope = envelope::resolve(request.logical.as_ref(), &attempts, &request.sources);
    if !envelope.present() && !policies.is_empty() {
        apply_policy(&mut envelope, request, &attempts, policies, book);
    }
    let env = &envelope.fields;

    // Figures come from the snapshot of this version and date, else the newest of the version
    // (audited or not: `audit` says whether to trust them).
    let snapshot = env
        .pricing_version
        .as_deref()
        .filter(|_| !envelope.latest_unresolved)
        .and_then(|v| book.pinned(v, env.pricing_checked_at));
    let group_ratio = snapshot
        .zip(env.billing_group.as_deref())
        .and_then(|(s, g)| s.group_ratio.get(g).copied());

    let priced: Vec<Priced<'_>> = attempts
        .iter()
        .copied()
        .zip(&indices)
        .map(|(span, &index)| {
            price_attempt(
                span,
                index,
                book,
                snapshot,
                group_ratio,
                env.assumed_output_cap,
            )
        })
        .collect();

    let first = priced.iter().find(|p| p.index == 0);
    // Retries past the first index that never arrived have a gap before them. Found once, so a
    // request of many attempts is not scanned again for each of them.
    let first_missing_retry_index = first_missing_retry(priced.iter().map(|p| p.index));
    // Attempts grouped under their parent still carry the request id their logical span names.
    let request_id = match (&request.key, request.logical.as_ref()) {
        (GroupKey::Parent { .. }, Some(logical)) => logical
            .request_id
            .clone()
            .unwrap_or_else(|| request.key.request_id()),
        _ => request.key.request_id(),
    };

    let shared = Shared {
        request_id,
        attempt_source: request.attempt_source,
        envelope_source: envelope.source().map(|s| crate::symbol::symbol(&s)),
        envelope: &envelope,
        snapshot,
        group_ratio,
        first,
    };

    rows.reserve(request.attempts.len());
    let mut history = History::default();
    for attempt in &priced {
        let figures = history.figures(attempt, first_missing_retry_index, env.max_incremental_usd);
        // Attempts already written are context only: their figures count, their row is not
        // built again.
        if already_written.is_empty() || !already_written.contains(&attempt.span.span_id) {
            let unaudited_reason = audit(AuditInput {
                envelope: &envelope,
                snapshot,
                group_ratio,
                attempt,
                sum_too_large: figures.sum_too_large,
                first_missing: attempt.index > 0 && first.is_none(),
                gap: figures.gap,
                earlier_retry_unpriced: history.earlier_retry_unpriced,
                config,
            });
            let judged = Judged::new(
                attempt,
                &figures,
                unaudited_reason,
                &shared,
                history.earlier_output_reached_client,
            );
            rows.push(build_row(attempt, &figures, judged, &shared));
        }
        history.after(attempt);
    }
}

/// The smallest retry index (1 or more) that no attempt has, `i32::MAX` when every index up to
/// it is present.
fn first_missing_retry(indices: impl Iterator<Item = i32>) -> i32 {
    let mut present: Vec<i32> = indices.filter(|&i| i >= 1).collect();
    present.sort_unstable();
    present.dedup();
    let mut expected = 1i32;
    for index in present {
        if index != expected {
            break;
        }
        match expected.checked_add(1) {
            Some(next) => expected = next,
            None => return i32::MAX,
        }
    }
    expected
}

/// What every row of one request shares.
struct Shared<'a> {
    request_id: std::sync::Arc<str>,
    attempt_source: AttemptSource,
    envelope_source: Option<Symbol>,
    envelope: &'a Envelope,
    snapshot: Option<&'a Snapshot>,
    group_ratio: Option<Decimal>,
    first: Option<&'a Priced<'a>>,
}

/// What the attempts before the current one left behind, in attempt order.
struct History {
    /// `cumulative_incremental_usd` so far, `None` once a retry's estimate is unknown (or the
    /// sum cannot be held exactly).
    running_incremental: Option<Decimal>,
    earlier_retry_unpriced: bool,
    earlier_output_reached_client: bool,
}

impl Default for History {
    fn default() -> Self {
        History {
            running_incremental: Some(Decimal::ZERO),
            earlier_retry_unpriced: false,
            earlier_output_reached_client: false,
        }
    }
}

/// An attempt's incremental figures (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    estimated: Option<Decimal>,
    cumulative: Option<Decimal>,
    remaining: Option<Decimal>,
    /// An index between 1 and k−1 never arrived.
    gap: bool,
    /// Adding this retry's estimate made the cumulative too large to hold exactly.
    sum_too_large: bool,
}

impl History {
    /// Adds `attempt`'s estimate to the running sum and returns its figures.
    fn figures(
        &mut self,
        attempt: &Priced<'_>,
        first_missing_retry_index: i32,
        max_incremental_usd: Option<Decimal>,
    ) -> Figures {
        let k = attempt.index;
        let (estimated, cumulative, gap, sum_too_large) = if k > 0 {
            let estimated = attempt.planned;
            let gap = first_missing_retry_index < k;
            let before = self.running_incremental;
            self.running_incremental = before.zip(estimated).and_then(|(a, b)| add_exact(a, b));
            let sum_too_large =
                before.is_some() && estimated.is_some() && self.running_incremental.is_none();
            let cumulative = self.running_incremental.filter(|_| !gap);
            (estimated, cumulative, gap, sum_too_large)
        } else {
            (Some(Decimal::ZERO), Some(Decimal::ZERO), false, false)
        };
        Figures {
            estimated,
            cumulative,
            remaining: max_incremental_usd
                .zip(cumulative)
                .and_then(|(max, cum)| sub_exact(max, cum)),
            gap,
            sum_too_large,
        }
    }

    /// Records what `attempt` means for the attempts after it.
    fn after(&mut self, attempt: &Priced<'_>) {
        if attempt.index > 0 && self.running_incremental.is_none() {
            self.earlier_retry_unpriced = true;
        }
        self.earlier_output_reached_client |= attempt.span.output_reached_client == Some(true);
    }
}

/// The judgement of one attempt: audit, violations, decision, spend class.
struct Judged {
    unaudited_reason: Option<UnauditedReason>,
    violations: Vec<Violation>,
    decision: Decision,
    spend_class: SpendClass,
}

impl Judged {
    fn new(
        attempt: &Priced<'_>,
        figures: &Figures,
        unaudited_reason: Option<UnauditedReason>,
        shared: &Shared<'_>,
        earlier_output_reached_client: bool,
    ) -> Judged {
        let audited = unaudited_reason.is_none();
        let span = attempt.span;
        let violations = violations(&ViolationInput {
            envelope: &shared.envelope.fields,
            k: attempt.index,
            earlier_output_reached_client,
            original_family: shared.first.and_then(|f| f.family.map(|s| &**s)),
            family: attempt.family.map(|s| &**s),
            served_drift: served_model_drift(span),
            audited,
            cumulative: figures.cumulative,
            estimated: figures.estimated,
            sdk_estimated: span.sdk_estimated_incremental_usd(),
        });
        let decision = decision(attempt.index, &violations, audited);
        let original_model = shared.first.map(|f| f.span.request_model.as_deref());
        let spend_class = spend_class(
            attempt.index,
            &violations,
            original_model,
            span.request_model.as_deref(),
        );
        Judged {
            unaudited_reason,
            violations,
            decision,
            spend_class,
        }
    }
}

/// What the violations of one attempt depend on.
#[derive(Clone, Copy)]
struct ViolationInput<'a> {
    envelope: &'a EnvelopeFields,
    k: i32,
    earlier_output_reached_client: bool,
    /// Attempt 0's family, when it arrived and is known.
    original_family: Option<&'a str>,
    family: Option<&'a str>,
    /// The gateway served another model than this attempt requested.
    served_drift: bool,
    audited: bool,
    cumulative: Option<Decimal>,
    estimated: Option<Decimal>,
    sdk_estimated: Option<Decimal>,
}

/// Every violation that applies, in SPEC §4 order. Without an envelope only the served-model
/// check of `routing_drift` applies.
fn violations(input: &ViolationInput<'_>) -> Vec<Violation> {
    let env = input.envelope;
    let mut found = Vec::new();
    if env.present && input.earlier_output_reached_client && env.replay_safe != Some(true) {
        found.push(Violation::ReplayUnsafe);
    }
    if env.present
        && env
            .max_attempts_after_first
            .is_some_and(|max| input.k > max)
    {
        found.push(Violation::OverAttempts);
    }
    let family_drift = env.present && family_drift(env, input.original_family, input.family);
    if family_drift || input.served_drift {
        found.push(Violation::RoutingDrift);
    }
    if env.present
        && input.audited
        && input
            .cumulative
            .zip(env.max_incremental_usd)
            .is_some_and(|(cum, max)| cum > max)
    {
        found.push(Violation::OverEnvelope);
    }
    if env.present && input.k > 0 {
        if let (Some(sdk), Some(ours)) = (input.sdk_estimated, input.estimated) {
            if sdk
                .checked_sub(ours)
                .is_none_or(|diff| diff.abs() > SDK_ESTIMATE_TOLERANCE_USD)
            {
                found.push(Violation::SdkEstimateMismatch);
            }
        }
    }
    found
}

/// Both families known, different, and the envelope does not allow this one: missing
/// `allow_family_fallback` means false and missing `allowed_fallback_families` none.
fn family_drift(env: &EnvelopeFields, original: Option<&str>, family: Option<&str>) -> bool {
    match (original, family) {
        (Some(original), Some(this)) if original != this => {
            env.allow_family_fallback != Some(true)
                || !env
                    .allowed_fallback_families
                    .as_ref()
                    .is_some_and(|allowed| allowed.iter().any(|f| f == this))
        }
        _ => false,
    }
}

/// `first_attempt` for k = 0; otherwise the first that applies of `replay_unsafe`,
/// `over_attempts`, `routing_drift`, `unaudited`, `over_envelope`, `within_envelope`.
fn decision(k: i32, violations: &[Violation], audited: bool) -> Decision {
    let has = |v: Violation| violations.contains(&v);
    if k == 0 {
        Decision::FirstAttempt
    } else if has(Violation::ReplayUnsafe) {
        Decision::ReplayUnsafe
    } else if has(Violation::OverAttempts) {
        Decision::OverAttempts
    } else if has(Violation::RoutingDrift) {
        Decision::RoutingDrift
    } else if !audited {
        Decision::Unaudited
    } else if has(Violation::OverEnvelope) {
        Decision::OverEnvelope
    } else {
        Decision::WithinEnvelope
    }
}

/// `base` for k = 0; otherwise `drift` if `routing_drift` is listed, `unknown` if attempt 0
/// never arrived (`original_model` is `None`), `retry` if it requested the same model, else
/// `fallback`.
fn spend_class(
    k: i32,
    violations: &[Violation],
    original_model: Option<Option<&str>>,
    model: Option<&str>,
) -> SpendClass {
    if k == 0 {
        SpendClass::Base
    } else if violations.contains(&Violation::RoutingDrift) {
        SpendClass::Drift
    } else {
        match original_model {
            None => SpendClass::Unknown,
            Some(original) if original == model => SpendClass::Retry,
            Some(_) => SpendClass::Fallback,
        }
    }
}

/// The row of one attempt, with its `decision_reason` sentence.
fn build_row(
    attempt: &Priced<'_>,
    figures: &Figures,
    judged: Judged,
    shared: &Shared<'_>,
) -> AttemptRow {
    let span = attempt.span;
    let env = &shared.envelope.fields;
    let first = shared.first;
    let mut row = AttemptRow {
        event_time: nanos(span.start_time_unix_nano),
        end_time: nanos(span.end_time_unix_nano),
        trace_id: span.trace_id,
        span_id: span.span_id,
        request_id: shared.request_id.clone(),
        service_name: span.service_name.clone(),
        task_type: env.task_type.clone(),
        billing_group: env.billing_group.clone(),
        provider: span.provider.clone(),
        attempt_index: attempt.index,
        original_model: first.and_then(|f| f.span.request_model.clone()),
        retry_model: span.request_model.clone(),
        response_model: span.response_model.clone(),
        original_family: first.and_then(|f| f.family.cloned()),
        retry_family: attempt.family.cloned(),
        input_tokens: span.input_tokens.value(),
        cached_input_tokens: span.cached_input_tokens.value(),
        cache_write_input_tokens: span.cache_write_input_tokens.value(),
        output_tokens: span.output_tokens.value(),
        output_cap: attempt.output_cap.value(),
        planned_attempt_usd: attempt.planned,
        actual_attempt_usd: attempt.actual,
        estimated_incremental_usd: figures.estimated,
        cumulative_incremental_usd: figures.cumulative,
        remaining_envelope_usd: figures.remaining,
        max_incremental_usd: env.max_incremental_usd,
        group_ratio: shared.group_ratio,
        sdk_estimated_incremental_usd: span.sdk_estimated_incremental_usd(),
        sdk_remaining_envelope_usd: span.sdk_remaining_envelope_usd(),
        max_attempts_after_first: env.max_attempts_after_first,
        pricing_version: env.pricing_version.clone(),
        pricing_source: env.pricing_source.clone(),
        pricing_digest: shared.snapshot.map(|s| s.digest.clone()),
        pricing_checked_at: env.pricing_checked_at,
        spend_class: judged.spend_class,
        decision: judged.decision,
        decision_reason: String::new(),
        audited: judged.unaudited_reason.is_none(),
        unaudited_reason: judged.unaudited_reason,
        error_type: span.error_type.clone(),
        sdk_decision_reason: span.sdk_decision_reason().map(str::to_owned),
        violations: judged.violations,
        output_reached_client: span.output_reached_client,
        attempt_source: shared.attempt_source,
        usage_source: (span.input_tokens != Count::Missing).then_some(match span.usage_origin {
            UsageOrigin::Span => UsageSource::Span,
            UsageOrigin::Call => UsageSource::Call,
            UsageOrigin::Borrowed => UsageSource::Borrowed,
        }),
        output_cap_source: attempt.output_cap_source,
        price_tier_above_input_tokens: attempt.tier,
        envelope_source: shared.envelope_source.clone(),
    };
    row.decision_reason = reason::sentence(&row);
    row
}

/// The cap an attempt is planned with (SPEC §4): its own (for inferred attempts, inherited in
/// its nest), else the envelope's assumed cap (the spans' before a policy's), else the
/// snapshot's `max_output_tokens` for the model.
fn output_cap(
    span: &SpanFacts,
    assumed: Option<i64>,
    price: Option<&ModelPrice>,
) -> (Count, Option<OutputCapSource>) {
    if span.output_cap != Count::Missing {
        (span.output_cap, Some(OutputCapSource::Request))
    } else if let Some(cap) = assumed {
        (Count::Value(cap), Some(OutputCapSource::Envelope))
    } else if let Some(cap) = price.and_then(|p| p.max_output_tokens) {
        (Count::Value(cap), Some(OutputCapSource::Pricing))
    } else {
        (Count::Missing, None)
    }
}

fn price_attempt<'a>(
    span: &'a SpanFacts,
    index: i32,
    book: &'a PricingBook,
    snapshot: Option<&'a Snapshot>,
    group_ratio: Option<Decimal>,
    assumed_output_cap: Option<i64>,
) -> Priced<'a> {
    let price = snapshot
        .zip(span.request_model.as_deref())
        .and_then(|(s, m)| s.models.get(m));
    let family = model_family(span, price, book);
    let (cap, output_cap_source) = output_cap(span, assumed_output_cap, price);
    let counts_invalid = usage_is_invalid(span, cap);
    let usage = |output: Count| -> Option<Usage> {
        Some(Usage {
            input: span.input_tokens.value()?,
            cached: span.cached_input_tokens.value().unwrap_or(0),
            cache_write: span.cache_write_input_tokens.value().unwrap_or(0),
            output: output.value()?,
        })
    };
    let cost = |output: Count| {
        let (price, ratio) = (price?, group_ratio?);
        if counts_invalid {
            return None;
        }
        cost_usd(price, ratio, usage(output)?)
    };
    let (planned, actual) = (cost(cap), cost(span.output_tokens));
    // Counts every check let through, priced by a known snapshot, can still be too large for a
    // decimal to hold the cost exactly: no provider bills that, and an audited row needs figures.
    let priceable = price.is_some() && group_ratio.is_some() && span.input_tokens.value().is_some();
    let unpriceable = |output: Count, cost: Option<Decimal>| {
        priceable && output.value().is_some() && cost.is_none()
    };
    let usage_invalid =
        counts_invalid || unpriceable(cap, planned) || unpriceable(span.output_tokens, actual);
    let tier = price
        .zip(span.input_tokens.value())
        .and_then(|(p, input)| p.tier_threshold(input));
    Priced {
        span,
        index,
        price,
        family,
        output_cap: cap,
        output_cap_source,
        usage_invalid,
        planned: planned.filter(|_| !usage_invalid),
        actual: actual.filter(|_| !usage_invalid),
        tier,
    }
}

/// The attempt's model family (SPEC §2): its own attribute, else the pinned snapshot's family
/// for the model (`price` is its row there), else the newest loaded snapshot's that lists the
/// model. A family does not depend on a price, so drift is found even when pricing is unknown.
fn model_family<'a>(
    span: &'a SpanFacts,
    price: Option<&'a ModelPrice>,
    book: &'a PricingBook,
) -> Option<&'a Symbol> {
    if let Some(family) = span.model_family.as_ref() {
        return Some(family);
    }
    match price {
        Some(listed) => listed.family.as_ref(),
        None => book.newest_family(span.request_model.as_deref()?),
    }
}

/// A negative or absurd count, or more cached and cache-write tokens than input tokens.
fn usage_is_invalid(span: &SpanFacts, output_cap: Count) -> bool {
    let counts = [
        span.input_tokens,
        span.cached_input_tokens,
        span.cache_write_input_tokens,
        span.output_tokens,
        output_cap,
    ];
    let subsets = span
        .cached_input_tokens
        .value()
        .unwrap_or(0)
        .saturating_add(span.cache_write_input_tokens.value().unwrap_or(0));
    counts.iter().any(|c| c.is_invalid_usage())
        || span
            .input_tokens
            .value()
            .is_some_and(|input| subsets > input)
}

/// The gateway served another model than requested; a dated variant (`<model>-…`) is not drift.
fn served_model_drift(span: &SpanFacts) -> bool {
    match (
        span.request_model.as_deref(),
        span.response_model.as_deref(),
    ) {
        (Some(requested), Some(served)) => {
            served != requested
                && !served
                    .strip_prefix(requested)
                    .is_some_and(|rest| rest.starts_with('-'))
        }
        _ => false,
    }
}

struct AuditInput<'a> {
    envelope: &'a Envelope,
    snapshot: Option<&'a Snapshot>,
    group_ratio: Option<Decimal>,
    attempt: &'a Priced<'a>,
    /// Adding this retry's estimate made the cumulative too large to hold exactly.
    sum_too_large: bool,
    first_missing: bool,
    gap: bool,
    earlier_retry_unpriced: bool,
    config: &'a RulesConfig,
}

/// The first unaudited reason that holds, in SPEC §4 order.
fn audit(input: AuditInput<'_>) -> Option<UnauditedReason> {
    use UnauditedReason as R;
    let env = &input.envelope.fields;
    let span = input.attempt.span;
    if !input.envelope.present() {
        return Some(R::NoEnvelope);
    }
    if input.envelope.incomplete() {
        return Some(R::EnvelopeIncomplete);
    }
    let Some(_version) = &env.pricing_version else {
        return Some(R::PricingVersionMissing);
    };
    // A `latest` policy with no snapshot old enough names no source or date to miss.
    if input.envelope.latest_unresolved {
        return Some(R::UnknownPricingVersion);
    }
    let Some(source) = &env.pricing_source else {
        return Some(R::PricingSourceMissing);
    };
    let Some(checked_at) = env.pricing_checked_at else {
        return Some(R::PricingCheckedAtMissing);
    };
    // `snapshot` is the one of this version and date when loaded, else the newest of the
    // version: another date, or another source, is a mismatch.
    let Some(snapshot) = input.snapshot else {
        return Some(R::UnknownPricingVersion);
    };
    if **source != *snapshot.source || checked_at != snapshot.checked_at {
        return Some(R::PricingMetadataMismatch);
    }
    let span_date = utc_date(span.start_time_unix_nano);
    if (span_date - checked_at).num_days() > input.config.max_pricing_age_days {
        return Some(R::PricingStale);
    }
    if input.group_ratio.is_none() {
        return Some(R::UnknownBillingGroup);
    }
    if input.attempt.price.is_none() {
        return Some(R::ModelNotInPricing);
    }
    if input.attempt.output_cap == Count::Missing {
        return Some(R::OutputCapMissing);
    }
    if span.input_tokens == Count::Missing {
        return Some(R::InputTokensMissing);
    }
    if input.attempt.usage_invalid || input.sum_too_large {
        return Some(R::InvalidUsage);
    }
    if input.first_missing {
        return Some(R::FirstAttemptMissing);
    }
    if input.gap {
        return Some(R::EarlierAttemptMissing);
    }
    if input.earlier_retry_unpriced {
        return Some(R::EarlierAttemptUnpriced);
    }
    if input.envelope.conflict {
        return Some(R::EnvelopeConflict);
    }
    None
}

/// OTLP times are u64 nanoseconds; Arrow's are i64. Times past 2262 are clamped, not wrapped.
fn nanos(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
