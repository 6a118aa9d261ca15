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
use crate::sinks::metrics::Metrics;

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
