//! Resolving one request's envelope from every span that states it.

use std::sync::Arc;

use chrono::NaiveDate;

use crate::contract::{EnvelopeFields, SpanFacts};
use crate::policy::Policy;
use crate::pricing::PricingBook;
use crate::record::envelope_source;

/// The envelope a request is judged by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    /// Shared with the spans when one of them states it all (the usual request: its logical
    /// span does, its attempts state nothing), so resolving copies no field.
    pub fields: Arc<EnvelopeFields>,
    /// Two spans named different values for one field.
    pub conflict: bool,
    /// The policy the envelope came from, when the request's spans carried none.
    pub policy: Option<String>,
    /// A `latest` policy for which no loaded snapshot was checked on or before attempt 0's
    /// date: `pricing_version` stays `latest` and the pricing is unknown.
    pub latest_unresolved: bool,
}

impl Envelope {
    pub fn present(&self) -> bool {
        self.fields.present
    }

    /// The `envelope_source` column: `span`, `policy:<name>`, or none.
    pub fn source(&self) -> Option<String> {
        match &self.policy {
            Some(name) => Some(envelope_source::policy(name)),
            None => self.present().then(|| envelope_source::SPAN.to_owned()),
        }
    }

    /// Takes `policy`'s envelope for a request whose spans carry none. The spans' task type,
    /// when they name one, stays; a `latest` version pins the newest snapshot of `book`
    /// checked on or before `first_date` (attempt 0's start date), and the row records it.
    pub fn adopt(&mut self, policy: &Policy, book: &PricingBook, first_date: Option<NaiveDate>) {
        let mut fields = policy.envelope.clone();
        if let Some(task_type) = &self.fields.task_type {
            fields.task_type = Some(task_type.clone());
        }
        // The request's own spans' cap comes before the policy's (SPEC §4).
        if let Some(cap) = self.fields.assumed_output_cap {
            fields.assumed_output_cap = Some(cap);
        }
        if policy.pins_latest() {
            match first_date.and_then(|date| book.latest_on_or_before(date)) {
                Some(snapshot) => {
                    fields.pricing_version = Some(snapshot.version.as_str().into());
                    fields.pricing_checked_at = Some(snapshot.checked_at);
                    fields.pricing_source = Some(snapshot.source.as_str().into());
                }
                None => self.latest_unresolved = true,
            }
        }
        self.fields = Arc::new(fields);
        self.policy = Some(policy.name.clone());
    }

    /// `max_incremental_usd` or `max_attempts_after_first` missing, or the JSON form broken.
    pub fn incomplete(&self) -> bool {
        self.fields.json_invalid
            || self.fields.max_incremental_usd.is_none()
            || self.fields.max_attempts_after_first.is_none()
    }
}

/// Merges the logical span's and every attempt's envelope; attempts must already be in order.
///
/// Values are compared after parsing and an absent value never conflicts. On a conflict each
/// figure comes from the logical request span, else from the lowest-index attempt that has it.
pub fn resolve(
    logical: Option<&SpanFacts>,
    attempts: &[&SpanFacts],
    others: &[SpanFacts],
) -> Envelope {
    let sources = || {
        logical
            .into_iter()
            .chain(attempts.iter().copied())
            .chain(others)
            .flat_map(|span| std::iter::once(&span.envelope).chain(span.envelope_json.as_ref()))
    };
    // One envelope stated, by any number of spans sharing it, the rest stating nothing: the
    // merge would give that envelope, field for field, without a conflict.
    let mut stated: Option<&Arc<EnvelopeFields>> = None;
    let single = sources().all(|source| {
        if source.is_unstated() {
            return true;
        }
        match stated {
            None => {
                stated = Some(source);
                true
            }
            Some(first) => Arc::ptr_eq(first, source),
        }
    });
    if single {
        return Envelope {
            fields: stated.map_or_else(EnvelopeFields::empty, Arc::clone),
            conflict: false,
            policy: None,
            latest_unresolved: false,
        };
    }

    merge_all(sources())
}

/// [`resolve`]'s merge, field by field, of `sources` in precedence order.
fn merge_all<'s>(sources: impl Iterator<Item = &'s Arc<EnvelopeFields>>) -> Envelope {
    let mut merged = EnvelopeFields::default();
    let mut conflict = false;
    for source in sources {
        merged.present |= source.present;
        merged.json_invalid |= source.json_invalid;
        conflict |= merge(&mut merged.pricing_source, &source.pricing_source);
        conflict |= merge(&mut merged.pricing_checked_at, &source.pricing_checked_at);
        conflict |= merge(&mut merged.pricing_version, &source.pricing_version);
        conflict |= merge(&mut merged.billing_group, &source.billing_group);
        conflict |= merge(&mut merged.max_incremental_usd, &source.max_incremental_usd);
        conflict |= merge(
            &mut merged.max_attempts_after_first,
            &source.max_attempts_after_first,
        );
        conflict |= merge(
            &mut merged.allow_family_fallback,
            &source.allow_family_fallback,
        );
        conflict |= merge(
            &mut merged.allowed_fallback_families,
            &source.allowed_fallback_families,
        );
        conflict |= merge(&mut merged.replay_safe, &source.replay_safe);
        conflict |= merge(&mut merged.assumed_output_cap, &source.assumed_output_cap);
        conflict |= merge(&mut merged.task_type, &source.task_type);
    }
    // Sources are in precedence order (logical span first, then attempts by index) and `merge`
    // keeps the first value it meets, so on a conflict each figure already comes from the
    // logical request span, else from the lowest-index attempt that states it.
    Envelope {
        fields: Arc::new(merged),
        conflict,
        policy: None,
        latest_unresolved: false,
    }
}

/// Takes `value` when nothing is known yet; reports whether it disagrees with what is.
fn merge<T: Clone + PartialEq>(known: &mut Option<T>, value: &Option<T>) -> bool {
    match (known.as_ref(), value) {
        (_, None) => false,
        (None, Some(v)) => {
            *known = Some(v.clone());
            false
        }
        (Some(k), Some(v)) => k != v,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rust_decimal::Decimal;

    use super::*;

    /// A few envelopes, unstated ones among them, and the spans that state them: shared, as
    /// interning makes them, or equal copies, or different.
    fn envelopes() -> Vec<Arc<EnvelopeFields>> {
        let stated = EnvelopeFields {
            present: true,
            billing_group: Some("vip".into()),
            max_incremental_usd: Some(Decimal::new(15, 3)),
            max_attempts_after_first: Some(2),
            allowed_fallback_families: Some(vec!["glm".into()]),
            ..EnvelopeFields::default()
        };
        let shared = Arc::new(stated.clone());
        vec![
            EnvelopeFields::empty(),
            Arc::new(EnvelopeFields::default()),
            Arc::clone(&shared),
            shared,
            Arc::new(stated.clone()),
            Arc::new(EnvelopeFields {
                max_attempts_after_first: Some(3),
                ..stated.clone()
            }),
            Arc::new(EnvelopeFields {
                task_type: Some("summary".into()),
                ..EnvelopeFields::default()
            }),
            Arc::new(EnvelopeFields {
                present: true,
                json_invalid: true,
                ..EnvelopeFields::default()
            }),
        ]
    }

    fn span(envelope: Arc<EnvelopeFields>, json: Option<Arc<EnvelopeFields>>) -> SpanFacts {
        SpanFacts {
            envelope,
            envelope_json: json,
            ..SpanFacts::default()
        }
    }

    proptest! {
        /// Whatever spans state, shared or not, `resolve` gives what merging every field
        /// gives.
        #[test]
        fn resolving_gives_the_merge_of_every_field(
            picks in prop::collection::vec((0..8usize, prop::option::weighted(0.2, 0..8usize)), 0..6),
            with_logical in any::<bool>(),
            others in 0..2usize,
        ) {
            let pool = envelopes();
            let spans: Vec<SpanFacts> = picks
                .iter()
                .map(|&(e, json)| span(Arc::clone(&pool[e]), json.map(|j| Arc::clone(&pool[j]))))
                .collect();
            let (logical, rest) = match spans.split_first() {
                Some((first, rest)) if with_logical => (Some(first), rest),
                _ => (None, &spans[..]),
            };
            let split = rest.len().saturating_sub(others);
            let attempts: Vec<&SpanFacts> = rest[..split].iter().collect();
            let others = &rest[split..];
            let all = logical
                .into_iter()
                .chain(attempts.iter().copied())
                .chain(others)
                .flat_map(|span| std::iter::once(&span.envelope).chain(span.envelope_json.as_ref()));
            let resolved = resolve(logical, &attempts, others);
            prop_assert_eq!(&resolved, &merge_all(all));
        }
    }
}
