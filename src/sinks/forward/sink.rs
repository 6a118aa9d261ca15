//! The forward's runtime: a bounded queue that never makes intake wait, and one task that packs
//! it into export requests, sends them and retries.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::config_kernel::join_problems;

use super::batch::{span_count, Batch, Limits};
use super::{ForwardError, ForwardObserver, OtlpForwardConfig};

/// Starts the forward to `config.endpoint`: validates `config`, spawns the export task on the current tokio runtime
/// (so call it from within one) and returns the handle intake sends through, and the forwarder
/// that shuts it down.
///
/// The connection is made lazily, on the first export: a downstream that is not up yet costs
/// retries and counted failures, never a collector that refuses to start.
pub fn start(
    config: &OtlpForwardConfig,
    observer: Arc<dyn ForwardObserver>,
) -> Result<(ForwardHandle, Forwarder), ForwardError> {
    let endpoint = config.endpoint.as_deref().unwrap_or_default();
    if endpoint.trim().is_empty() {
        return Err(ForwardError::InvalidConfig(
            "exporters.otlp_forward.endpoint: must be set".to_owned(),
        ));
    }
    let uri = uri(endpoint)?;
    config
        .validate()
        .map_err(|problems| ForwardError::InvalidConfig(join_problems(&problems)))?;
    let client = TraceServiceClient::new(channel(endpoint, uri, config.timeout)?)
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Gzip);
    let queue = Arc::new(Queue {
        state: Mutex::default(),
        ready: Notify::new(),
        capacity: config.queue_capacity_spans,
        observer: Arc::clone(&observer),
    });
    let (stop, stop_requested) = watch::channel(false);
    let task = Task {
        queue: Arc::clone(&queue),
        carry: None,
        limits: Limits {
            spans: config.max_batch_spans,
            bytes: usize::try_from(config.max_batch_bytes).unwrap_or(usize::MAX),
        },
        stop: stop_requested,
        export: Export {
            client,
            observer,
            max_retries: config.max_retries,
            initial_backoff: config.initial_backoff,
            max_backoff: config.max_backoff,
        },
    };
    let task = tokio::spawn(task.run());
    let handle = ForwardHandle {
        queue: Arc::clone(&queue),
    };
    let forwarder = Forwarder {
        queue,
        stop,
        task: Some(task),
    };
    Ok((handle, forwarder))
}

/// The URI of `endpoint`, which may be a bare `host:port`; only `http://` is supported.
fn uri(endpoint: &str) -> Result<String, ForwardError> {
    let trimmed = endpoint.trim();
    let uri = if trimmed.contains("://") {
        trimmed.to_owned()
    } else {
        format!("http://{trimmed}")
    };
    if !uri.to_ascii_lowercase().starts_with("http://") {
        return Err(ForwardError::UnsupportedScheme(endpoint.to_owned()));
    }
    Ok(uri)
}

fn channel(endpoint: &str, uri: String, timeout: Duration) -> Result<Channel, ForwardError> {
    let channel = Endpoint::from_shared(uri).map_err(|source| ForwardError::Endpoint {
        endpoint: endpoint.to_owned(),
        source,
    })?;
    Ok(channel
        .timeout(timeout)
        .connect_timeout(timeout)
        .tcp_nodelay(true)
        .connect_lazy())
}

/// Where intake hands spans to the forward. Cheap to clone; sending never waits.
#[derive(Clone)]
pub struct ForwardHandle {
    queue: Arc<Queue>,
}

impl ForwardHandle {
    /// Queues spans for the downstream, or drops them (counted through
    /// [`ForwardObserver::dropped`]) when the queue has no room for all of them or the forwarder
    /// has shut down. One call's spans are queued or dropped together.
    pub fn send(&self, resource_spans: Vec<ResourceSpans>) {
        self.queue.push(resource_spans);
    }
}

impl fmt::Debug for ForwardHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardHandle").finish_non_exhaustive()
    }
}

/// Owns the export task; [`Forwarder::shutdown`] ends it.
pub struct Forwarder {
    queue: Arc<Queue>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Stops accepting spans, sends everything already queued, and returns once that is done or
    /// `deadline` has passed. At the deadline the export in flight is abandoned and it and all
    /// still queued spans are counted as failed. Handles still held afterwards count what they
    /// send as dropped.
    pub async fn shutdown(mut self, deadline: Duration) {
        self.queue.close();
        let Some(mut task) = self.task.take() else {
            return;
        };
        let ended = match tokio::time::timeout(deadline, &mut task).await {
            Ok(ended) => ended,
            Err(_) => {
                self.stop.send_replace(true);
                task.await
            }
        };
        if let Err(error) = ended {
            tracing::error!(%error, "the forward task ended abnormally; queued spans are lost");
        }
    }
}

impl Drop for Forwarder {
    /// Dropped without a shutdown, the forwarder still stops accepting, so its task sends what is
    /// queued and ends instead of waiting for spans forever.
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarder").finish_non_exhaustive()
    }
}

/// Spans waiting for the task, bounded by their span count, the unit the capacity is set in.
struct Queue {
    state: Mutex<QueueState>,
    /// Woken on every push and on close; the task is the only waiter.
    ready: Notify,
    capacity: usize,
    observer: Arc<dyn ForwardObserver>,
}

#[derive(Default)]
struct QueueState {
    items: VecDeque<ResourceSpans>,
    spans: usize,
    closed: bool,
}

enum Next {
    Item(ResourceSpans),
    Empty,
    Closed,
}

impl Queue {
    fn push(&self, items: Vec<ResourceSpans>) {
        let spans: usize = items.iter().map(span_count).sum();
        if spans == 0 {
            return;
        }
        let accepted = {
            let mut state = self.lock();
            let room = !state.closed
                && state
                    .spans
                    .checked_add(spans)
                    .is_some_and(|total| total <= self.capacity);
            if room {
                state.spans += spans;
                state
                    .items
                    .extend(items.into_iter().filter(|item| span_count(item) > 0));
            }
            room
        };
        if accepted {
            self.ready.notify_one();
        } else {
            self.observer.dropped(spans as u64);
        }
    }

    fn pop(&self) -> Next {
        let mut state = self.lock();
        match state.items.pop_front() {
            Some(item) => {
                state.spans -= span_count(&item);
                Next::Item(item)
            }
            None if state.closed => Next::Closed,
            None => Next::Empty,
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// Empties the queue and returns how many spans it held.
    fn clear(&self) -> usize {
        let mut state = self.lock();
        state.items.clear();
        std::mem::take(&mut state.spans)
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // Nothing that can panic runs under the lock and every update leaves the state whole, so
        // a poisoned lock still guards a consistent queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The export task: one request in flight at a time, so requests reach the downstream in the
/// order their spans were queued.
struct Task {
    queue: Arc<Queue>,
    /// The part of a queued item the previous batch had no room for; it opens the next batch.
    carry: Option<ResourceSpans>,
    limits: Limits,
    /// Set by shutdown when its deadline passes.
    stop: watch::Receiver<bool>,
    export: Export,
}

impl Task {
    async fn run(mut self) {
        while let Some(batch) = self.next_batch().await {
            let spans = batch.spans() as u64;
            tokio::select! {
                biased;
                () = stop_requested(&mut self.stop) => {
                    self.export.observer.failed(spans);
                    self.give_up();
                    return;
                }
                () = self.export.send(batch.into_request(), spans) => {}
            }
        }
    }

    /// Fills a batch and hands it over as soon as it is full or the queue is momentarily empty:
    /// waiting for more spans would only delay these. `None` once the queue is closed and drained.
    async fn next_batch(&mut self) -> Option<Batch> {
        let mut batch = Batch::default();
        loop {
            let item = match self.carry.take() {
                Some(item) => item,
                None => match self.queue.pop() {
                    Next::Item(item) => item,
                    Next::Empty | Next::Closed if !batch.is_empty() => return Some(batch),
                    Next::Closed => return None,
                    Next::Empty => {
                        self.queue.ready.notified().await;
                        continue;
                    }
                },
            };
            self.carry = batch.add(item, self.limits);
            if self.carry.is_some() || batch.is_full(self.limits) {
                return Some(batch);
            }
        }
    }

    /// Counts every span the task still holds as failed.
    fn give_up(&mut self) {
        self.queue.close();
        let spans = self.carry.take().map_or(0, |item| span_count(&item)) + self.queue.clear();
        if spans > 0 {
            tracing::warn!(
                spans,
                "forward shutdown deadline passed; queued spans were not sent"
            );
            self.export.observer.failed(spans as u64);
        }
    }
}

/// Resolves once shutdown's deadline has passed; never when the forwarder was dropped instead,
/// because then the task is meant to finish sending.
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

struct Export {
    client: TraceServiceClient<Channel>,
    observer: Arc<dyn ForwardObserver>,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl Export {
    /// Sends one request, retrying retryable failures with exponential backoff, and counts the
    /// outcome.
    async fn send(&mut self, request: ExportTraceServiceRequest, spans: u64) {
        let mut backoff = self.initial_backoff.min(self.max_backoff);
        let mut retries = 0;
        loop {
            match self.client.export(request.clone()).await {
                Ok(response) => {
                    self.accepted(response.into_inner(), spans);
                    return;
                }
                Err(status) if is_retryable(status.code()) && retries < self.max_retries => {
                    retries += 1;
                    tracing::debug!(
                        code = ?status.code(),
                        message = status.message(),
                        retries,
                        "forward export failed; retrying"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2).min(self.max_backoff);
                }
                Err(status) => {
                    tracing::warn!(
                        code = ?status.code(),
                        message = status.message(),
                        retries,
                        spans,
                        "forward export failed; spans not sent"
                    );
                    self.observer.failed(spans);
                    return;
                }
            }
        }
    }

    /// A success may still reject some spans (OTLP partial success); those are not retried, as
    /// the downstream has said they would fail again.
    fn accepted(&self, response: ExportTraceServiceResponse, spans: u64) {
        let rejected = match &response.partial_success {
            Some(partial) if partial.rejected_spans > 0 => {
                let rejected = u64::try_from(partial.rejected_spans)
                    .unwrap_or(0)
                    .min(spans);
                tracing::warn!(
                    rejected,
                    message = partial.error_message,
                    "downstream rejected part of a forward export"
                );
                rejected
            }
            _ => 0,
        };
        if rejected > 0 {
            self.observer.failed(rejected);
        }
        if spans > rejected {
            self.observer.sent(spans - rejected);
        }
    }
}

/// The codes OTLP/gRPC lists as retryable. The spec retries `RESOURCE_EXHAUSTED` only when the
/// server adds `RetryInfo`; it is retried here regardless, since the retries are bounded and a
/// throttling downstream is the common case behind it.
fn is_retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Cancelled
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::OutOfRange
            | Code::Unavailable
            | Code::DataLoss
    )
}
