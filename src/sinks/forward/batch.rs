//! Packing queued `ResourceSpans` into export requests bounded by spans and encoded bytes.
//!
//! Pure: no I/O, so the limits are tested without a network.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message;

/// Bounds of one export request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    pub spans: usize,
    pub bytes: usize,
}

/// One export request being filled.
#[derive(Debug, Default)]
pub(super) struct Batch {
    resource_spans: Vec<ResourceSpans>,
    spans: usize,
    /// Exact encoded length of the request built so far.
    bytes: usize,
}

impl Batch {
    pub fn spans(&self) -> usize {
        self.spans
    }

    pub fn is_empty(&self) -> bool {
        self.resource_spans.is_empty()
    }

    /// No further span can join, whatever its size.
    pub fn is_full(&self, limits: Limits) -> bool {
        self.spans >= limits.spans || self.bytes >= limits.bytes
    }

    /// Adds as much of `item` as fits and returns the rest, if any; a batch that returns a rest is
    /// full. An empty batch always takes at least one span, so a span larger than the byte limit
    /// is sent alone rather than never.
    pub fn add(&mut self, item: ResourceSpans, limits: Limits) -> Option<ResourceSpans> {
        let spans = span_count(&item);
        let bytes = field_len(item.encoded_len());
        if self.spans + spans <= limits.spans && self.bytes + bytes <= limits.bytes {
            self.push(item, spans, bytes);
            return None;
        }
        let (head, rest) = split(
            item,
            limits.spans.saturating_sub(self.spans),
            limits.bytes.saturating_sub(self.bytes),
            self.spans == 0,
        );
        if let Some(head) = head {
            let spans = span_count(&head);
            let bytes = field_len(head.encoded_len());
            self.push(head, spans, bytes);
        }
        rest
    }

    pub fn into_request(self) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: self.resource_spans,
        }
    }

    fn push(&mut self, item: ResourceSpans, spans: usize, bytes: usize) {
        self.resource_spans.push(item);
        self.spans += spans;
        self.bytes += bytes;
    }
}

pub(super) fn span_count(item: &ResourceSpans) -> usize {
    item.scope_spans.iter().map(|scope| scope.spans.len()).sum()
}

/// Widest tag plus length prefix of an embedded message, so estimates of a part never undercount.
const WIDEST_WRAPPER: usize = 1 + 10;

/// Encoded length of a message as a field of its parent: a one-byte tag (field numbers below
/// 16), the varint length, then the message.
fn field_len(len: usize) -> usize {
    1 + varint_len(len) + len
}

fn varint_len(mut value: usize) -> usize {
    let mut len = 1;
    while value >= 0x80 {
        value >>= 7;
        len += 1;
    }
    len
}

/// Splits `item` after its leading spans that fit `max_spans` and `max_bytes` (as a field of the
/// request), each part keeping the resource and scopes of its spans. With `at_least_one`, the
/// first span is taken even if it alone is over the byte budget. Scopes without spans carry
/// nothing to forward and are left out of the parts.
fn split(
    item: ResourceSpans,
    max_spans: usize,
    max_bytes: usize,
    at_least_one: bool,
) -> (Option<ResourceSpans>, Option<ResourceSpans>) {
    let ResourceSpans {
        resource,
        scope_spans,
        schema_url,
    } = item;
    let part = |scope_spans: Vec<ScopeSpans>| ResourceSpans {
        resource: resource.clone(),
        scope_spans,
        schema_url: schema_url.clone(),
    };

    let mut bytes = WIDEST_WRAPPER + part(Vec::new()).encoded_len();
    let mut spans = 0;
    let mut head = Vec::new();
    let mut rest = Vec::new();
    for scope in scope_spans {
        if !rest.is_empty() {
            if !scope.spans.is_empty() {
                rest.push(scope);
            }
            continue;
        }
        let ScopeSpans {
            scope: instrumentation,
            spans: scope_members,
            schema_url: scope_schema_url,
        } = scope;
        let scope_part = |spans| ScopeSpans {
            scope: instrumentation.clone(),
            spans,
            schema_url: scope_schema_url.clone(),
        };
        let scope_overhead = WIDEST_WRAPPER + scope_part(Vec::new()).encoded_len();

        let mut taken = Vec::new();
        let mut members = scope_members.into_iter();
        while let Some(span) = members.next() {
            let mut cost = field_len(span.encoded_len());
            if taken.is_empty() {
                cost += scope_overhead;
            }
            let fits = spans < max_spans && bytes + cost <= max_bytes;
            if fits || (at_least_one && spans == 0) {
                spans += 1;
                bytes += cost;
                taken.push(span);
            } else {
                let left: Vec<_> = std::iter::once(span).chain(members).collect();
                rest.push(scope_part(left));
                break;
            }
        }
        if !taken.is_empty() {
            head.push(scope_part(taken));
        }
    }
    let head = (!head.is_empty()).then(|| part(head));
    let rest = (!rest.is_empty()).then(|| part(rest));
    (head, rest)
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::Span;

    use super::*;
    use crate::contract::{attr, kv};
    use opentelemetry_proto::tonic::common::v1::any_value::Value;

    fn span(id: u8, payload: usize) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![id; 8],
            name: "x".repeat(payload),
            ..Default::default()
        }
    }

    /// One resource with one scope per entry of `scopes`, each holding spans of the given ids.
    fn resource_spans(scopes: &[&[u8]], payload: usize) -> ResourceSpans {
        ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv(attr::SERVICE_NAME, Value::StringValue("svc".into()))],
                ..Default::default()
            }),
            scope_spans: scopes
                .iter()
                .enumerate()
                .map(|(i, ids)| ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: format!("scope-{i}"),
                        ..Default::default()
                    }),
                    spans: ids.iter().map(|id| span(*id, payload)).collect(),
                    schema_url: String::new(),
                })
                .collect(),
            schema_url: "https://opentelemetry.io/schemas/1.30.0".into(),
        }
    }

    /// Packs `items` the way the forward task does and returns the requests.
    fn pack(items: Vec<ResourceSpans>, limits: Limits) -> Vec<ExportTraceServiceRequest> {
        let mut requests = Vec::new();
        let mut batch = Batch::default();
        for item in items {
            let mut next = Some(item);
            while let Some(item) = next.take() {
                next = batch.add(item, limits);
                if next.is_some() || batch.is_full(limits) {
                    requests.push(std::mem::take(&mut batch).into_request());
                }
            }
        }
        if !batch.is_empty() {
            requests.push(batch.into_request());
        }
        requests
    }

    /// Span ids in request order, with the resource and scope name each arrived under.
    fn delivered(requests: &[ExportTraceServiceRequest]) -> Vec<(u8, String)> {
        requests
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|rs| {
                assert_eq!(rs.resource, resource_spans(&[], 0).resource);
                assert_eq!(rs.schema_url, "https://opentelemetry.io/schemas/1.30.0");
                &rs.scope_spans
            })
            .flat_map(|scope| {
                let name = scope.scope.as_ref().map(|s| s.name.clone());
                scope
                    .spans
                    .iter()
                    .map(move |s| (s.span_id[0], name.clone().unwrap_or_default()))
            })
            .collect()
    }

    fn request_spans(request: &ExportTraceServiceRequest) -> usize {
        request.resource_spans.iter().map(span_count).sum()
    }

    #[test]
    fn small_items_share_one_request() {
        let items = vec![resource_spans(&[&[1, 2]], 10), resource_spans(&[&[3]], 10)];
        let limits = Limits {
            spans: 10,
            bytes: 1 << 20,
        };
        let requests = pack(items, limits);
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].resource_spans.len(), 2);
    }

    #[test]
    fn requests_hold_at_most_max_batch_spans() {
        let items = vec![
            resource_spans(&[&[1, 2, 3], &[4, 5, 6, 7]], 10),
            resource_spans(&[&[8, 9, 10]], 10),
        ];
        let limits = Limits {
            spans: 4,
            bytes: 1 << 20,
        };
        let requests = pack(items, limits);
        let sizes: Vec<_> = requests.iter().map(request_spans).collect();
        assert_eq!(sizes, [4, 4, 2]);
        let expected: Vec<_> = [1, 2, 3, 4, 5, 6, 7]
            .map(|id| (id, if id <= 3 { "scope-0" } else { "scope-1" }.to_owned()))
            .into_iter()
            .chain([8, 9, 10].map(|id| (id, "scope-0".to_owned())))
            .collect();
        assert_eq!(delivered(&requests), expected);
    }

    #[test]
    fn requests_hold_at_most_max_batch_bytes() {
        let ids: Vec<u8> = (1..=40).collect();
        let items = vec![resource_spans(&[&ids[..25], &ids[25..]], 100)];
        let limits = Limits {
            spans: 1000,
            bytes: 700,
        };
        let requests = pack(items, limits);
        assert!(requests.len() > 1);
        for request in &requests {
            assert!(
                request.encoded_len() <= limits.bytes,
                "{}",
                request.encoded_len()
            );
        }
        let got: Vec<_> = delivered(&requests).into_iter().map(|(id, _)| id).collect();
        assert_eq!(got, ids);
    }

    #[test]
    fn a_span_larger_than_the_byte_limit_is_sent_alone() {
        let items = vec![
            resource_spans(&[&[1]], 10),
            resource_spans(&[&[2]], 5000),
            resource_spans(&[&[3]], 10),
        ];
        let limits = Limits {
            spans: 100,
            bytes: 1000,
        };
        let requests = pack(items, limits);
        let ids: Vec<Vec<u8>> = requests
            .iter()
            .map(|r| {
                delivered(std::slice::from_ref(r))
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect()
            })
            .collect();
        assert_eq!(ids, [vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn scopes_without_spans_are_not_forwarded_when_split() {
        let items = vec![resource_spans(&[&[], &[1, 2], &[]], 10)];
        let limits = Limits {
            spans: 1,
            bytes: 1 << 20,
        };
        let requests = pack(items, limits);
        assert_eq!(requests.len(), 2);
        assert!(requests
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|rs| &rs.scope_spans)
            .all(|scope| !scope.spans.is_empty()));
    }

    #[test]
    fn varint_lengths() {
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(16_383), 2);
        assert_eq!(varint_len(16_384), 3);
    }
}
