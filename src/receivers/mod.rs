//! OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces`.
//!
//! Both decode, count and hand whole export requests to the pipeline through [`Intake`]; they
//! answer OK only once the pipeline has taken the request, so nothing acknowledged is dropped
//! at shutdown.

pub mod grpc;
pub mod http;

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokio::sync::mpsc;

use crate::pipeline::PipelineMessage;
use crate::sinks::metrics::Metrics;

/// Which receiver a request came through, as metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

/// The pipeline is gone (shutting down): the client should retry elsewhere or later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// The receivers' way into the pipeline.
#[derive(Clone)]
pub struct Intake {
    sender: mpsc::Sender<PipelineMessage>,
    metrics: Arc<Metrics>,
}

impl Intake {
    pub fn new(sender: mpsc::Sender<PipelineMessage>, metrics: Arc<Metrics>) -> Intake {
        Intake { sender, metrics }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Hands one decoded export request to the pipeline, waiting for room when it is busy.
    pub async fn submit(
        &self,
        request: ExportTraceServiceRequest,
        transport: Transport,
    ) -> Result<(), Closed> {
        let spans = span_count(&request);
        self.sender
            .send(PipelineMessage::Export { request, transport })
            .await
            .map_err(|_| Closed)?;
        self.metrics.spans_received(transport.as_str(), spans);
        Ok(())
    }
}

pub fn span_count(request: &ExportTraceServiceRequest) -> u64 {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len() as u64)
        .sum()
}
