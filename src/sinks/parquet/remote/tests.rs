//! The staging sink's contract with the pipeline, against an in-memory store that fails on
//! demand: a file counts as complete only once uploaded, and until then its write-ahead log
//! records stay pinned.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::journal::{Journal, JOURNAL_FILE};
use super::upload::{http_status, is_permanent};
use super::{UploadObserver, UploadRetries, Uploader};
use crate::sinks::parquet::output::{Output, RemoteOutput};
use crate::sinks::parquet::tests::retry_at;
use crate::sinks::parquet::{
    ObjectStoreConfig, ParquetExporterConfig, ParquetSink, ParquetSinkError,
};
use crate::wal::LsnRange;

/// 2025-03-14T12:00:00Z.
const MARCH_14_NOON: i64 = 1_741_953_600_000_000_000;
/// Only a guard against a hang; every wait below ends on a signal.
const DEADLINE: Duration = Duration::from_secs(30);

/// An in-memory store whose writes fail while the gate is closed: a store that is down.
#[derive(Debug, Default)]
struct Gate {
    inner: InMemory,
    closed: AtomicBool,
    /// Every put is refused as a store refuses a key it has no permission for (HTTP 403).
    refusing: AtomicBool,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("gate")
    }
}

#[async_trait]
impl ObjectStore for Gate {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "gate",
                source: "the store is down".into(),
            });
        }
        if self.refusing.load(Ordering::SeqCst) {
            return Err(object_store::Error::PermissionDenied {
                path: location.to_string(),
                source: "access denied".into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }
    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Event {
    Uploaded(String),
    Failed,
    Backlog(bool),
}

/// Every observer call as an event on a channel, so tests wait for signals, not time.
struct Events(Mutex<mpsc::Sender<Event>>);

impl Events {
    fn send(&self, event: Event) {
        let _ = self.0.lock().map(|sender| sender.send(event));
    }
}

impl UploadObserver for Events {
    fn uploaded(&self, url: &str, _rows: u64, _bytes: u64) {
        self.send(Event::Uploaded(url.to_owned()));
    }
    fn failed(&self, _problem: &str) {
        self.send(Event::Failed);
    }
    fn backlog(&self, full: bool, _problem: &str) {
        self.send(Event::Backlog(full));
    }
}

fn next(events: &mpsc::Receiver<Event>) -> Event {
    events.recv_timeout(DEADLINE).expect("an upload event")
}

struct Setup {
    store: Arc<Gate>,
    uploader: Arc<Uploader>,
    events: mpsc::Receiver<Event>,
    state: tempfile::TempDir,
}

fn setup(max_staged_bytes: u64) -> Setup {
    setup_with(max_staged_bytes, UploadRetries::Unlimited)
}

fn setup_with(max_staged_bytes: u64, retries: UploadRetries) -> Setup {
    let Ok(Output::Remote(remote)) = Output::parse(std::path::Path::new("s3://lake/llm")) else {
        panic!("an s3 URL parses");
    };
    let state = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Gate::default());
    let (sender, events) = mpsc::channel();
    let uploader = Uploader::start(
        Arc::clone(&store) as Arc<dyn ObjectStore>,
        remote,
        &ObjectStoreConfig {
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            max_staged_bytes,
            ..ObjectStoreConfig::default()
        },
        retries,
        Duration::from_secs(30),
        Some(state.path().join(JOURNAL_FILE)),
        Arc::new(Events(Mutex::new(sender))),
    )
    .expect("uploader");
    Setup {
        store,
        uploader,
        events,
        state,
    }
}

fn staging_sink(setup: &Setup) -> ParquetSink {
    ParquetSink::staging(
        setup.state.path().join("staging"),
        ParquetExporterConfig::default(),
        Arc::clone(&setup.uploader),
    )
    .expect("sink")
}

fn remote_of(uploader: &Uploader) -> RemoteOutput {
    uploader.remote().clone()
}

#[test]
fn a_file_keeps_its_log_records_pinned_until_its_upload_succeeds() {
    let setup = setup(u64::MAX);
    setup.store.closed.store(true, Ordering::SeqCst);
    let mut sink = staging_sink(&setup);
    let rows = [retry_at(MARCH_14_NOON, 1), retry_at(MARCH_14_NOON, 2)];
    let wal = LsnRange { min: 3, max: 5 };
    assert!(sink
        .write_from_wal(&rows, Some(wal))
        .expect("write")
        .is_empty());
    assert!(sink.flush_all().expect("complete locally").is_empty());

    assert_eq!(next(&setup.events), Event::Failed);
    assert_eq!(
        sink.oldest_open_lsn(),
        Some(3),
        "still pinned while the store is down"
    );
    let stats = sink.stats();
    assert_eq!((stats.rows_open, stats.rows_written), (2, 0));

    setup.store.closed.store(false, Ordering::SeqCst);
    let url = loop {
        match next(&setup.events) {
            Event::Uploaded(url) => break url,
            Event::Failed => continue,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(
        url.starts_with("s3://lake/llm/attempts/date=2025-03-14/part-"),
        "{url}"
    );
    // Complete now: the next call returns it, and the log may let its records go.
    let completed = sink.rotate_expired(Instant::now()).expect("rotate");
    assert_eq!(completed, vec![std::path::PathBuf::from(&url)]);
    assert_eq!(sink.oldest_open_lsn(), None);
    let stats = sink.stats();
    assert_eq!(
        (stats.rows_open, stats.rows_written, stats.files_completed),
        (0, 2, 1)
    );
    assert!(
        crate::sinks::parquet::written::completed_files(&setup.state.path().join("staging"))
            .expect("list staging")
            .is_empty(),
        "the staged copy is gone once uploaded"
    );
    let recorded = Journal::new(setup.state.path().join(JOURNAL_FILE))
        .read()
        .expect("journal");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].wal, wal);
    assert_eq!(
        remote_of(&setup.uploader).url_of(&ObjectPath::from(recorded[0].key.as_str())),
        url
    );
    assert!(sink.close().expect("close").is_empty());
}

#[test]
fn a_backlog_over_budget_is_reported_until_uploads_catch_up() {
    let setup = setup(1);
    setup.store.closed.store(true, Ordering::SeqCst);
    let mut sink = staging_sink(&setup);
    sink.write(&[retry_at(MARCH_14_NOON, 1)]).expect("write");
    sink.flush_all().expect("complete locally");
    assert_eq!(next(&setup.events), Event::Backlog(true));
    setup.store.closed.store(false, Ordering::SeqCst);
    let mut seen = Vec::new();
    while seen.last() != Some(&Event::Backlog(false)) {
        seen.push(next(&setup.events));
    }
    assert!(
        seen.iter().any(|e| matches!(e, Event::Uploaded(_))),
        "{seen:?}"
    );
    assert_eq!(sink.close().expect("close").len(), 1);
}

#[test]
fn recovery_reads_back_only_recorded_objects_the_log_still_holds() {
    let setup = setup(u64::MAX);
    let mut sink = staging_sink(&setup);
    let (old, new) = (retry_at(MARCH_14_NOON, 1), retry_at(MARCH_14_NOON, 2));
    // Each call returns the objects uploaded since the one before.
    let mut uploaded = sink
        .write_from_wal(
            std::slice::from_ref(&old),
            Some(LsnRange { min: 1, max: 2 }),
        )
        .expect("write");
    uploaded.extend(sink.flush_all().expect("flush"));
    uploaded.extend(
        sink.write_from_wal(
            std::slice::from_ref(&new),
            Some(LsnRange { min: 5, max: 6 }),
        )
        .expect("write"),
    );
    uploaded.extend(sink.close().expect("close"));
    assert_eq!(uploaded.len(), 2, "{uploaded:?}");

    let written = setup.uploader.recorded_spans(Some(5)).expect("read back");
    let ids = |row: &crate::record::AttemptRow| (row.trace_id, row.span_id, row.attempt_index);
    assert_eq!(written, [ids(&new)].into_iter().collect());
    let journal = Journal::new(setup.state.path().join(JOURNAL_FILE));
    assert_eq!(
        journal.read().expect("journal").len(),
        1,
        "older entries pruned"
    );
    assert!(setup
        .uploader
        .recorded_spans(None)
        .expect("empty log")
        .is_empty());
    assert!(journal.read().expect("journal").is_empty());
}

#[test]
fn files_left_staged_by_an_earlier_run_are_uploaded_and_pinned_meanwhile() {
    let setup = setup(u64::MAX);
    // An earlier run's completed file, written by a plain sink into the same staging root.
    let mut earlier = ParquetSink::new(
        setup.state.path().join("staging"),
        ParquetExporterConfig::default(),
    )
    .expect("sink");
    earlier
        .write_from_wal(
            &[retry_at(MARCH_14_NOON, 1)],
            Some(LsnRange { min: 7, max: 7 }),
        )
        .expect("write");
    earlier.close().expect("close");

    setup.store.closed.store(true, Ordering::SeqCst);
    let mut sink = staging_sink(&setup);
    assert_eq!(sink.adopt_staged().expect("adopt"), 1);
    assert_eq!(next(&setup.events), Event::Failed);
    assert_eq!(sink.oldest_open_lsn(), Some(7));
    setup.store.closed.store(false, Ordering::SeqCst);
    assert_eq!(sink.close().expect("uploaded at close").len(), 1);
}

#[test]
fn client_errors_but_timeouts_and_throttling_are_permanent() {
    for status in [400, 401, 403, 404, 405, 409, 411, 412, 413, 499] {
        assert!(is_permanent(status), "{status}");
    }
    for status in [200, 304, 408, 429, 500, 502, 503, 504] {
        assert!(!is_permanent(status), "{status}");
    }
}

#[test]
fn the_status_of_a_store_error_comes_from_its_variant_or_its_message() {
    let not_found = object_store::Error::NotFound {
        path: "x".into(),
        source: "gone".into(),
    };
    assert_eq!(http_status(&not_found), Some(404));
    let generic = |message: &str| object_store::Error::Generic {
        store: "S3",
        source: message.to_owned().into(),
    };
    let bad_request = generic("Error performing PUT http://s/x in 2ms - Server returned non-2xx status code: 400 Bad Request: <Error/>");
    assert_eq!(http_status(&bad_request), Some(400));
    assert_eq!(
        http_status(&generic(
            "Server returned non-2xx status code: 503 Service Unavailable: "
        )),
        Some(503)
    );
    assert_eq!(
        http_status(&generic("error sending request: connection refused")),
        None
    );
}

/// Writes one row and completes its file, then waits until the sink's close gives up.
fn close_error(setup: &Setup) -> String {
    let mut sink = staging_sink(setup);
    sink.write(&[retry_at(MARCH_14_NOON, 1)]).expect("write");
    // The upload may fail before the file's completion returns, or only while close waits.
    let ended = match sink.flush_all() {
        Err(error) => error,
        Ok(_) => sink.close().expect_err("the uploads end"),
    };
    match ended {
        ParquetSinkError::UploadsEnded(problem) => problem,
        other => panic!("the uploads end, not {other:?}"),
    }
}

#[test]
fn a_permanent_error_ends_limited_uploads_at_once_naming_the_object_and_status() {
    let setup = setup_with(u64::MAX, UploadRetries::Limited(5));
    setup.store.refusing.store(true, Ordering::SeqCst);
    let problem = close_error(&setup);
    assert!(
        problem.contains("to s3://lake/llm/attempts/date=2025-03-14/part-")
            && problem.contains("HTTP 403, which retrying cannot change"),
        "{problem}"
    );
    assert!(
        setup.events.try_iter().all(|e| e != Event::Failed),
        "no retry was announced"
    );
    // Later files fail at once, without a try.
    let mut sink = staging_sink(&setup);
    sink.write(&[retry_at(MARCH_14_NOON, 2)]).expect("write");
    assert!(matches!(
        sink.flush_all(),
        Err(ParquetSinkError::UploadsEnded(p)) if p == problem
    ));
}

#[test]
fn a_store_that_stays_down_ends_limited_uploads_once_the_retries_are_spent() {
    let setup = setup_with(u64::MAX, UploadRetries::Limited(2));
    setup.store.closed.store(true, Ordering::SeqCst);
    let problem = close_error(&setup);
    assert!(
        problem.contains("still failing after 2 retries (the retry budget): Generic gate error: the store is down"),
        "{problem}"
    );
    let retried = setup
        .events
        .try_iter()
        .filter(|e| *e == Event::Failed)
        .count();
    assert_eq!(retried, 2);
}
