//! Splitting an export across pipeline shards by trace.
//!
//! Every group key, every logical span and every inferred request lives inside one trace, so a
//! shard that owns a trace owns all of its requests: rows do not depend on the shard count.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};

/// The shard of a trace id. Ids of the wrong length read as all zeros, as the span reader
/// reads them.
pub fn shard_of(trace_id: &[u8], shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    let id: [u8; 16] = trace_id.try_into().unwrap_or([0; 16]);
    let (high, low) = id.split_at(8);
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

/// The parts of `request` for each shard that has spans, in shard order. With one shard the
/// request is passed on whole, without a copy.
pub fn partition(
    request: ExportTraceServiceRequest,
    shards: usize,
) -> Vec<(usize, ExportTraceServiceRequest)> {
    if shards <= 1 {
        return vec![(0, request)];
    }
    let mut parts: Vec<ExportTraceServiceRequest> = vec![Default::default(); shards];
    for resource_spans in request.resource_spans {
        let mut scopes: Vec<Vec<ScopeSpans>> = vec![Vec::new(); shards];
        for scope_spans in resource_spans.scope_spans {
            let mut spans = vec![Vec::new(); shards];
            for span in scope_spans.spans {
                spans[shard_of(&span.trace_id, shards)].push(span);
            }
            for (shard, spans) in spans.into_iter().enumerate() {
                if !spans.is_empty() {
                    scopes[shard].push(ScopeSpans {
                        scope: scope_spans.scope.clone(),
                        spans,
                        schema_url: scope_spans.schema_url.clone(),
                    });
                }
            }
        }
        for (shard, scope_spans) in scopes.into_iter().enumerate() {
            if !scope_spans.is_empty() {
                parts[shard].resource_spans.push(ResourceSpans {
                    resource: resource_spans.resource.clone(),
                    scope_spans,
                    schema_url: resource_spans.schema_url.clone(),
                });
            }
        }
    }
    parts
        .into_iter()
        .enumerate()
        .filter(|(_, part)| !part.resource_spans.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::Span;

    fn span(trace: u8, id: u8) -> Span {
        Span {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            ..Default::default()
        }
    }

    fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn one_shard_keeps_the_request_whole() {
        let parts = partition(request(vec![span(1, 1), span(2, 2)]), 1);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].1, request(vec![span(1, 1), span(2, 2)]));
    }

    #[test]
    fn spans_of_one_trace_go_to_one_shard_and_none_is_lost() {
        let spans: Vec<Span> = (0..64u8).map(|i| span(i % 16, i)).collect();
        let parts = partition(request(spans), 4);
        let mut seen = 0;
        for (shard, part) in &parts {
            for s in part
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
            {
                assert_eq!(shard_of(&s.trace_id, 4), *shard);
                seen += 1;
            }
        }
        assert_eq!(seen, 64);
        assert!(parts.len() > 1, "16 traces over 4 shards use more than one");
    }

    #[test]
    fn malformed_trace_ids_share_the_zero_trace_shard() {
        assert_eq!(shard_of(&[1, 2, 3], 8), shard_of(&[0; 16], 8));
    }
}
