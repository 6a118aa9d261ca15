//! Splitting an export across pipeline shards by trace.
//!
//! Every group key, every logical span and every inferred request lives inside one trace, so a
//! shard that owns a trace owns all of its requests: rows do not depend on the shard count.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use crate::contract::wire::{OriginRanges, WireExport};
use crate::contract::SpanFacts;

/// The shard of a trace id (as the span reader reads it: wrong lengths are all zeros).
pub fn shard_of(trace_id: &[u8; 16], shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    let (high, low) = trace_id.split_at(8);
    let mut x = u64::from_le_bytes(high.try_into().unwrap_or_default())
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ u64::from_le_bytes(low.try_into().unwrap_or_default());
    // A multiply-xorshift finaliser: trace ids are random, but nothing forces a client to make
    // them so.
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % shards as u64) as usize
}

/// One shard's spans of an export: their facts and, when spans are forwarded, where each lies in
/// the export's bytes.
#[derive(Debug, Default)]
pub struct ExportPart {
    pub spans: Vec<SpanFacts>,
    pub raw: Option<RawSpans>,
}

/// The export's bytes (shared, not copied) and, for each span of a part, its origin and range.
#[derive(Debug, Clone)]
pub struct RawSpans {
    bytes: Bytes,
    origins: Arc<[OriginRanges]>,
    spans: Vec<(u32, Range<usize>)>,
}

/// One span kept for forwarding: decoded only when it is sent on.
#[derive(Debug, Clone)]
pub struct RawSpan {
    bytes: Bytes,
    origins: Arc<[OriginRanges]>,
    origin: u32,
    range: Range<usize>,
}

impl RawSpans {
    /// The `i`-th span of the part.
    pub fn span(&self, i: usize) -> Option<RawSpan> {
        let (origin, range) = self.spans.get(i)?.clone();
        Some(RawSpan {
            bytes: self.bytes.clone(),
            origins: Arc::clone(&self.origins),
            origin,
            range,
        })
    }
}

impl RawSpan {
    /// The span under its resource and scope, decoded for the forwarder; `None` if its bytes
    /// hold what the reader skipped but prost refuses (e.g. a span name that is not UTF-8).
    pub fn decode(&self) -> Option<(u32, ResourceSpans)> {
        let origin = self.origins.get(self.origin as usize)?;
        let merged = |ranges: &[Range<usize>]| -> Option<Vec<u8>> {
            let mut all = Vec::new();
            for range in ranges {
                all.extend_from_slice(self.bytes.get(range.clone())?);
            }
            Some(all)
        };
        let text = |range: &Option<Range<usize>>| -> Option<String> {
            match range {
                Some(r) => String::from_utf8(self.bytes.get(r.clone())?.to_vec()).ok(),
                None => Some(String::new()),
            }
        };
        // Concatenated encodings of one message merge, as repeated occurrences do in protobuf.
        let resource = match origin.resource.is_empty() {
            true => None,
            false => Some(Resource::decode(merged(&origin.resource)?.as_slice()).ok()?),
        };
        let scope = match origin.scope.is_empty() {
            true => None,
            false => Some(InstrumentationScope::decode(merged(&origin.scope)?.as_slice()).ok()?),
        };
        let span = Span::decode(self.bytes.get(self.range.clone())?).ok()?;
        Some((
            self.origin,
            ResourceSpans {
                resource,
                scope_spans: vec![ScopeSpans {
                    scope,
                    spans: vec![span],
                    schema_url: text(&origin.scope_schema_url)?,
                }],
                schema_url: text(&origin.resource_schema_url)?,
            },
        ))
    }

    /// Mutable access for enrichment, after [`RawSpan::decode`].
    pub fn span_mut(resource_spans: &mut ResourceSpans) -> Option<&mut Span> {
        resource_spans.scope_spans.first_mut()?.spans.first_mut()
    }
}

/// Spans decoded for forwarding, merged back under one resource and scope per origin.
pub fn regroup(spans: Vec<(u32, ResourceSpans)>) -> Vec<ResourceSpans> {
    let mut out: Vec<(u32, ResourceSpans)> = Vec::new();
    for (origin, rs) in spans {
        match out.iter_mut().find(|(o, _)| *o == origin) {
            Some((_, known)) => {
                if let (Some(into), Some(from)) = (
                    known.scope_spans.first_mut(),
                    rs.scope_spans.into_iter().next(),
                ) {
                    into.spans.extend(from.spans);
                }
            }
            None => out.push((origin, rs)),
        }
    }
    out.into_iter().map(|(_, rs)| rs).collect()
}

/// The parts of an export for each shard that has spans, in shard order. With one shard the
/// spans are passed on whole, without a copy.
pub fn partition(export: WireExport, bytes: &Bytes, shards: usize) -> Vec<(usize, ExportPart)> {
    let keep_raw = !export.raw.is_empty();
    let origins: Arc<[OriginRanges]> = export.origins.into();
    let raw_for = |spans: Vec<(u32, Range<usize>)>| {
        (keep_raw && !spans.is_empty()).then(|| RawSpans {
            bytes: bytes.clone(),
            origins: Arc::clone(&origins),
            spans,
        })
    };
    if shards <= 1 {
        if export.spans.is_empty() {
            return Vec::new();
        }
        let raw = raw_for(export.raw);
        return vec![(
            0,
            ExportPart {
                spans: export.spans,
                raw,
            },
        )];
    }
    // Exact capacities: growing vectors of `SpanFacts` copied them and faulted in fresh pages.
    let targets: Vec<usize> = export
        .spans
        .iter()
        .map(|facts| shard_of(&facts.trace_id, shards))
        .collect();
    let mut counts = vec![0usize; shards];
    for &shard in &targets {
        counts[shard] += 1;
    }
    let mut spans: Vec<Vec<SpanFacts>> = counts.iter().map(|&n| Vec::with_capacity(n)).collect();
    let mut raws: Vec<Vec<(u32, Range<usize>)>> = counts
        .iter()
        .map(|&n| Vec::with_capacity(if keep_raw { n } else { 0 }))
        .collect();
    let mut raw = export.raw.into_iter();
    for (facts, shard) in export.spans.into_iter().zip(targets) {
        if let Some(r) = raw.next() {
            raws[shard].push(r);
        }
        spans[shard].push(facts);
    }
    spans
        .into_iter()
        .zip(raws)
        .enumerate()
        .filter(|(_, (spans, _))| !spans.is_empty())
        .map(|(shard, (spans, raw))| {
            (
                shard,
                ExportPart {
                    spans,
                    raw: raw_for(raw),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::wire::read_export;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

    fn span(trace: u8, id: u8) -> Span {
        Span {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            ..Default::default()
        }
    }

    fn encoded(spans: Vec<Span>) -> Bytes {
        Bytes::from(
            ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
            .encode_to_vec(),
        )
    }

    #[test]
    fn one_shard_keeps_the_spans_whole() {
        let bytes = encoded(vec![span(1, 1), span(2, 2)]);
        let parts = partition(
            read_export(&bytes, false, &crate::contract::AttributeKeys::NONE).unwrap(),
            &bytes,
            1,
        );
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].1.spans.len(), 2);
        assert!(parts[0].1.raw.is_none());
    }

    #[test]
    fn spans_of_one_trace_go_to_one_shard_and_none_is_lost() {
        let bytes = encoded((0..64u8).map(|i| span(i % 16, i)).collect());
        let parts = partition(
            read_export(&bytes, true, &crate::contract::AttributeKeys::NONE).unwrap(),
            &bytes,
            4,
        );
        let mut seen = 0;
        for (shard, part) in &parts {
            let raw = part.raw.as_ref().expect("kept for forwarding");
            for (i, facts) in part.spans.iter().enumerate() {
                assert_eq!(shard_of(&facts.trace_id, 4), *shard);
                let (_, rs) = raw.span(i).unwrap().decode().unwrap();
                assert_eq!(rs.scope_spans[0].spans[0].span_id, facts.span_id.to_vec());
                seen += 1;
            }
        }
        assert_eq!(seen, 64);
        assert!(parts.len() > 1, "16 traces over 4 shards use more than one");
    }
}
