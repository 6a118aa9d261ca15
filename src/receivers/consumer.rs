//! What a receiver hands an export to: the next stage, seen only through [`TracesConsumer`]
//! (the OpenTelemetry Collector's `consumer.Traces`).
//!
//! The receivers are generic over it, so the hot path is a direct call and a receiver can be
//! tested with a consumer of the test's own. `serve` picks the pipeline's
//! [`crate::pipeline::Intake`], or [`DiscardConsumer`] for `--sink none`.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use super::{Refusal, Transport};
use crate::contract::wire::{read_export, WireError, WireExport};
use crate::contract::SharedAttributeKeys;
use crate::telemetry::Metrics;

/// The stage after the receivers. A receiver calls [`refuse_early`](Self::refuse_early), then
/// [`read`](Self::read), then [`consume`](Self::consume), and answers the client `OK` only when
/// `consume` does.
pub trait TracesConsumer: Clone + Send + Sync + 'static {
    /// A refusal known before the request is even read, so an overloaded collector spends no
    /// CPU decoding requests it will refuse.
    fn refuse_early(&self) -> Option<Refusal>;

    /// Reads an encoded export request into span facts. An error is the client's (invalid
    /// argument / 400).
    fn read(&self, bytes: &Bytes) -> Result<WireExport, WireError>;

    /// Takes one export request (`bytes` is its protobuf encoding, `export` what
    /// [`read`](Self::read) made of it). `Ok` is the consumer's promise: the client may forget
    /// the spans.
    fn consume(
        &self,
        bytes: Bytes,
        export: WireExport,
        transport: Transport,
    ) -> impl Future<Output = Result<(), Refusal>> + Send;

    /// Where the receivers count the requests they answer.
    fn metrics(&self) -> &Metrics;
}

/// Acknowledges and drops every export after decoding (`--sink none`): the floor a real
/// pipeline is measured against. It never refuses.
#[derive(Clone)]
pub struct DiscardConsumer {
    metrics: Arc<Metrics>,
    /// Read as the pipeline would, so the floor includes capturing the policies' attributes.
    policy_keys: Arc<SharedAttributeKeys>,
}

impl DiscardConsumer {
    pub fn new(metrics: Arc<Metrics>, policy_keys: Arc<SharedAttributeKeys>) -> DiscardConsumer {
        DiscardConsumer {
            metrics,
            policy_keys,
        }
    }
}

impl TracesConsumer for DiscardConsumer {
    fn refuse_early(&self) -> Option<Refusal> {
        None
    }

    fn read(&self, bytes: &Bytes) -> Result<WireExport, WireError> {
        // Nothing is forwarded, so no span's bytes are kept.
        read_export(bytes, false, &self.policy_keys.get())
    }

    async fn consume(
        &self,
        _bytes: Bytes,
        export: WireExport,
        transport: Transport,
    ) -> Result<(), Refusal> {
        self.metrics
            .spans_received(transport.as_str(), export.spans.len() as u64);
        Ok(())
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    use super::*;

    /// An encoded export request of `spans` spans in one trace.
    pub(crate) fn export_of(spans: u8) -> Bytes {
        let spans = (1..=spans)
            .map(|i| Span {
                trace_id: vec![7; 16],
                span_id: vec![i; 8],
                name: format!("span {i}"),
                ..Span::default()
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        };
        Bytes::from(request.encode_to_vec())
    }

    /// A consumer answering as the test says, counting the spans it took.
    #[derive(Clone)]
    pub(crate) struct Scripted {
        pub early: Option<Refusal>,
        pub answer: Result<(), Refusal>,
        pub consumed: Arc<AtomicU64>,
        pub metrics: Arc<Metrics>,
    }

    impl Scripted {
        pub(crate) fn answering(answer: Result<(), Refusal>) -> Scripted {
            Scripted {
                early: None,
                answer,
                consumed: Arc::default(),
                metrics: Metrics::new(),
            }
        }

        pub(crate) fn consumed(&self) -> u64 {
            self.consumed.load(Ordering::Relaxed)
        }
    }

    impl TracesConsumer for Scripted {
        fn refuse_early(&self) -> Option<Refusal> {
            self.early.clone()
        }

        fn read(&self, bytes: &Bytes) -> Result<WireExport, WireError> {
            read_export(bytes, false, &crate::contract::AttributeKeys::NONE)
        }

        async fn consume(
            &self,
            _bytes: Bytes,
            export: WireExport,
            _transport: Transport,
        ) -> Result<(), Refusal> {
            self.consumed
                .fetch_add(export.spans.len() as u64, Ordering::Relaxed);
            self.answer.clone()
        }

        fn metrics(&self) -> &Metrics {
            &self.metrics
        }
    }

    fn discard() -> DiscardConsumer {
        DiscardConsumer::new(Metrics::new(), Arc::default())
    }

    #[test]
    fn discarding_never_refuses_early() {
        assert_eq!(discard().refuse_early(), None);
    }

    #[tokio::test]
    async fn discarding_acknowledges_and_counts_the_spans_received() {
        let consumer = discard();
        let bytes = export_of(3);
        let export = consumer.read(&bytes).unwrap();
        assert_eq!(export.spans.len(), 3);
        consumer
            .consume(bytes, export, Transport::Http)
            .await
            .unwrap();
        let export = consumer.read(&export_of(2)).unwrap();
        consumer
            .consume(export_of(2), export, Transport::Grpc)
            .await
            .unwrap();
        let text = consumer.metrics().render();
        assert!(
            text.contains(r#"transport="http"} 3"#),
            "http spans not counted:\n{text}"
        );
        assert!(
            text.contains(r#"transport="grpc"} 2"#),
            "grpc spans not counted:\n{text}"
        );
    }

    #[test]
    fn discarding_keeps_no_span_bytes() {
        let export = discard().read(&export_of(1)).unwrap();
        assert!(export.raw.is_empty());
    }

    #[test]
    fn discarding_still_rejects_malformed_protobuf() {
        assert!(discard().read(&Bytes::from_static(&[0x0a, 0xff])).is_err());
    }
}
