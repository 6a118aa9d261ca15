//! Uploads completed Parquet files from local staging to their final keys.
//!
//! Each file goes whole: one PUT, or a multipart upload when it is larger than a part, and an
//! object store makes either visible only once complete, so a reader never sees a partial
//! object. Files go in the order they were completed, one at a time; a failed upload is retried
//! with backoff, for as long as it takes or, with [`UploadRetries::Limited`], until a permanent
//! error or the retry budget ends the uploads. Until its upload succeeded, a file's rows count
//! as open for the sink that staged it, which keeps its write-ahead log records pinned.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::future::Future;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::sync::mpsc;

use super::journal::{Entry, Journal};
use crate::sinks::parquet::config::ObjectStoreConfig;
use crate::sinks::parquet::output::RemoteOutput;
use crate::sinks::parquet::written::spans_in;
use crate::wal::LsnRange;

/// What the uploader tells the rest of the process: `serve` turns it into health and refusals,
/// `replay` into log lines.
pub trait UploadObserver: Send + Sync {
    /// An object is complete in the store.
    fn uploaded(&self, url: &str, rows: u64, bytes: u64);
    /// An upload failed and will be retried; `problem` says what and how much is waiting.
    fn failed(&self, problem: &str);
    /// Staged bytes went over the budget (`full`), or back under it.
    fn backlog(&self, full: bool, problem: &str);
}

/// An observer that only logs.
pub struct LogObserver;

impl UploadObserver for LogObserver {
    fn uploaded(&self, url: &str, rows: u64, bytes: u64) {
        tracing::debug!(url, rows, bytes, "uploaded");
    }
    fn failed(&self, problem: &str) {
        tracing::warn!("{problem}");
    }
    fn backlog(&self, full: bool, problem: &str) {
        if full {
            tracing::warn!("{problem}");
        }
    }
}

/// How long the uploader keeps trying a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadRetries {
    /// Every failure is retried, for as long as it takes: `serve`, whose intake waits for a store
    /// that is down and whose write-ahead log keeps the rows meanwhile.
    Unlimited,
    /// A permanent error (an HTTP 4xx other than 408 and 429: a missing bucket, a refused key, a
    /// bad request) ends the uploads at once, any other after this many retries of one file:
    /// `replay`, a batch job that must end and say why.
    Limited(u32),
}

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("cannot read staged file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The store's own message says it all; its sources only repeat it.
    #[error("{0}")]
    Store(object_store::Error),
    #[error("cannot record the upload in {}: {source}", path.display())]
    Journal {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the uploader: {0}")]
    Start(std::io::Error),
    #[error("the uploader has stopped")]
    Stopped,
    /// The uploads ended: a permanent error or the retry budget (`UploadRetries::Limited`).
    #[error("{0}")]
    GaveUp(String),
}

/// One sink's share of the uploads: its files not uploaded yet, whose rows stay open and whose
/// log records stay pinned, and the objects uploaded since it last asked.
#[derive(Debug, Default)]
pub struct Staged {
    state: Mutex<StagedState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct StagedState {
    pending: BTreeMap<u64, Pending>,
    uploaded: Vec<PathBuf>,
    uploaded_rows: u64,
    uploaded_files: u64,
    /// Why the uploads ended, once they did: the files still pending never will be uploaded.
    failure: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    wal: Option<LsnRange>,
    rows: u64,
}

/// Counts for [`crate::sinks::parquet::SinkStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StagedCounts {
    pub pending_files: usize,
    pub pending_rows: u64,
    pub uploaded_rows: u64,
    pub uploaded_files: u64,
}

impl Staged {
    fn state(&self) -> MutexGuard<'_, StagedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The oldest log record with rows in a file not uploaded yet.
    pub fn oldest_lsn(&self) -> Option<u64> {
        self.state()
            .pending
            .values()
            .filter_map(|p| p.wal.map(|w| w.min))
            .min()
    }

    pub fn counts(&self) -> StagedCounts {
        let state = self.state();
        StagedCounts {
            pending_files: state.pending.len(),
            pending_rows: state.pending.values().map(|p| p.rows).sum(),
            uploaded_rows: state.uploaded_rows,
            uploaded_files: state.uploaded_files,
        }
    }

    /// The URLs of objects uploaded since the last call.
    pub fn take_uploaded(&self) -> Vec<PathBuf> {
        std::mem::take(&mut self.state().uploaded)
    }

    /// Why the uploads ended, if they did ([`UploadRetries::Limited`]).
    pub fn failure(&self) -> Option<String> {
        self.state().failure.clone()
    }

    /// Waits until every staged file is uploaded, the uploads ended ([`failure`](Self::failure)),
    /// or `deadline`; true when all are uploaded.
    pub fn wait_uploaded(&self, deadline: Instant) -> bool {
        let mut state = self.state();
        while !state.pending.is_empty() {
            if state.failure.is_some() {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    fn add(&self, id: u64, pending: Pending) {
        self.state().pending.insert(id, pending);
    }

    fn fail(&self, problem: &str) {
        self.state()
            .failure
            .get_or_insert_with(|| problem.to_owned());
        self.changed.notify_all();
    }

    fn done(&self, id: u64, url: String) {
        let mut state = self.state();
        if let Some(pending) = state.pending.remove(&id) {
            state.uploaded_rows += pending.rows;
            state.uploaded_files += 1;
            state.uploaded.push(PathBuf::from(url));
        }
        drop(state);
        self.changed.notify_all();
    }
}

struct Job {
    id: u64,
    local: PathBuf,
    key: ObjectPath,
    bytes: u64,
    rows: u64,
    wal: Option<LsnRange>,
    owner: Arc<Staged>,
}

/// Bytes and files staged and not uploaded, and whether that is over the budget.
#[derive(Debug, Default)]
struct Backlog {
    bytes: u64,
    files: u64,
    full: bool,
}

struct Shared {
    store: Arc<dyn ObjectStore>,
    remote: RemoteOutput,
    /// Part size, backoff and the staged-bytes budget.
    config: ObjectStoreConfig,
    /// How long a closing sink waits for its files to be uploaded.
    close_timeout: Duration,
    retries: UploadRetries,
    /// Why the uploads ended, once they did; every file staged after that fails at once.
    failure: Mutex<Option<String>>,
    journal: Option<Journal>,
    observer: Arc<dyn UploadObserver>,
    backlog: Mutex<Backlog>,
    last_problem: Mutex<Option<String>>,
}

/// The upload queue of one output, shared by every sink writing to it. Runs on a runtime of its
/// own, so that `replay` (which has none) and `serve` use it alike.
pub struct Uploader {
    shared: Arc<Shared>,
    jobs: Option<mpsc::UnboundedSender<Job>>,
    handle: tokio::runtime::Handle,
    /// Taken on drop, to stop without waiting for an upload in progress.
    runtime: Option<tokio::runtime::Runtime>,
    next_id: AtomicU64,
}

impl Uploader {
    /// Starts uploading to `remote` as `config` says, retrying as `retries` says. A closing
    /// sink waits up to `close_timeout` for its files; uploaded objects are recorded in
    /// `journal` for crash recovery (`None`, as `replay` does: nothing is recorded).
    pub fn start(
        store: Arc<dyn ObjectStore>,
        remote: RemoteOutput,
        config: &ObjectStoreConfig,
        retries: UploadRetries,
        close_timeout: Duration,
        journal: Option<PathBuf>,
        observer: Arc<dyn UploadObserver>,
    ) -> Result<Arc<Uploader>, UploadError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("upload")
            .enable_all()
            .build()
            .map_err(UploadError::Start)?;
        let shared = Arc::new(Shared {
            store,
            remote,
            journal: journal.map(Journal::new),
            config: config.clone(),
            close_timeout,
            retries,
            failure: Mutex::default(),
            observer,
            backlog: Mutex::default(),
            last_problem: Mutex::default(),
        });
        let (jobs, queue) = mpsc::unbounded_channel();
        runtime.spawn(run(Arc::clone(&shared), queue));
        Ok(Arc::new(Uploader {
            shared,
            jobs: Some(jobs),
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
            next_id: AtomicU64::new(0),
        }))
    }

    pub fn remote(&self) -> &RemoteOutput {
        &self.shared.remote
    }

    pub fn close_timeout(&self) -> Duration {
        self.shared.close_timeout
    }

    /// The most recent upload failure, for error messages.
    pub fn last_problem(&self) -> Option<String> {
        lock(&self.shared.last_problem).clone()
    }

    /// Runs `future` on the uploader's runtime and waits for it, from any thread (a runtime's
    /// own included: the wait happens on a thread of its own).
    pub fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let handle = self.handle.clone();
        std::thread::scope(|scope| {
            scope
                .spawn(move || handle.block_on(future))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Checks that the store answers with these credentials, listing a key nothing has (so
    /// nothing is written). Needs list permission on the prefix.
    pub fn probe(&self) -> Result<(), UploadError> {
        let key = self.shared.remote.key("attempts/.retry-spend-probe");
        let store = Arc::clone(&self.shared.store);
        self.block_on(async move { store.list_with_delimiter(Some(&key)).await })?;
        Ok(())
    }

    /// Queues `local` (a completed file, `relative` to the staging root) for upload on behalf
    /// of `owner`.
    pub fn stage(
        &self,
        owner: &Arc<Staged>,
        local: PathBuf,
        relative: &str,
        rows: u64,
        wal: Option<LsnRange>,
    ) -> Result<(), UploadError> {
        if let Some(problem) = lock(&self.shared.failure).clone() {
            owner.fail(&problem);
            return Err(UploadError::GaveUp(problem));
        }
        let bytes = std::fs::metadata(&local)
            .map_err(|source| UploadError::Read {
                path: local.clone(),
                source,
            })?
            .len();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        owner.add(id, Pending { wal, rows });
        self.shared.backlog_changed(bytes as i128, 1);
        let job = Job {
            id,
            key: self.shared.remote.key(relative),
            local,
            bytes,
            rows,
            wal,
            owner: Arc::clone(owner),
        };
        self.jobs
            .as_ref()
            .ok_or(UploadError::Stopped)?
            .send(job)
            .map_err(|_| UploadError::Stopped)
    }

    /// The ids of every row of the objects recorded as uploaded that cover log records at or
    /// after `from_lsn`, read back from the store; the record then keeps only those. With
    /// `from_lsn` `None` (an empty log) it is emptied.
    pub fn recorded_spans(
        &self,
        from_lsn: Option<u64>,
    ) -> Result<crate::sinks::parquet::WrittenRows, String> {
        let mut written = HashSet::new();
        let Some(journal) = &self.shared.journal else {
            return Ok(written);
        };
        let shown = journal.path().display();
        let entries = journal
            .read()
            .map_err(|e| format!("cannot read {shown}: {e}"))?;
        let needed: Vec<Entry> = match from_lsn {
            Some(from) => entries.into_iter().filter(|e| e.wal.max >= from).collect(),
            None => Vec::new(),
        };
        for entry in &needed {
            let key = ObjectPath::parse(&entry.key)
                .map_err(|e| format!("{shown}: bad key {:?}: {e}", entry.key))?;
            let url = self.shared.remote.url_of(&key);
            let store = Arc::clone(&self.shared.store);
            let fetched = self.block_on(async move {
                match store.get(&key).await {
                    Ok(result) => result.bytes().await.map(Some),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            });
            match fetched {
                Ok(Some(bytes)) => spans_in(bytes, from_lsn.unwrap_or_default(), &mut written)
                    .map_err(|e| format!("cannot read {url}: {e}"))?,
                Ok(None) => tracing::warn!(%url, "an uploaded object is gone from the store; its rows cannot be told apart from the write-ahead log's and may be written again"),
                Err(e) => return Err(format!("cannot read back {url} to recover the write-ahead log: {e}; start again once the store is reachable")),
            }
        }
        journal
            .rewrite(&needed)
            .map_err(|e| format!("cannot rewrite {shown}: {e}"))?;
        Ok(written)
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        // Files still queued stay staged on disk; the next start uploads them.
        self.jobs.take();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl From<object_store::Error> for UploadError {
    fn from(error: object_store::Error) -> Self {
        UploadError::Store(error)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// `part_bytes` as a buffer length.
    fn part_bytes(&self) -> usize {
        usize::try_from(self.config.part_bytes).unwrap_or(usize::MAX)
    }

    /// Adds to (or takes from) the backlog and tells the observer when it crosses the budget.
    fn backlog_changed(&self, bytes: i128, files: i64) {
        let mut backlog = lock(&self.backlog);
        backlog.bytes = u64::try_from((backlog.bytes as i128 + bytes).max(0)).unwrap_or(u64::MAX);
        backlog.files = backlog.files.saturating_add_signed(files);
        let full = backlog.bytes > self.config.max_staged_bytes;
        if full != backlog.full {
            backlog.full = full;
            let problem = format!(
                "{} files ({} bytes) wait to be uploaded to {}, over the {}-byte budget{}",
                backlog.files,
                backlog.bytes,
                self.remote,
                self.config.max_staged_bytes,
                match lock(&self.last_problem).as_deref() {
                    Some(last) => format!("; last failure: {last}"),
                    None => String::new(),
                }
            );
            self.observer.backlog(full, &problem);
        }
    }

    async fn upload(&self, job: &Job) -> Result<(), UploadError> {
        let read_error = |source| UploadError::Read {
            path: job.local.clone(),
            source,
        };
        if job.bytes <= self.config.part_bytes {
            let data = std::fs::read(&job.local).map_err(read_error)?;
            self.store
                .put(&job.key, PutPayload::from(Bytes::from(data)))
                .await?;
        } else {
            let mut file = File::open(&job.local).map_err(read_error)?;
            let mut upload = self.store.put_multipart(&job.key).await?;
            let sent = async {
                loop {
                    let part = read_part(&mut file, self.part_bytes()).map_err(read_error)?;
                    if part.is_empty() {
                        break;
                    }
                    upload.put_part(PutPayload::from(Bytes::from(part))).await?;
                }
                upload.complete().await?;
                Ok::<_, UploadError>(())
            }
            .await;
            if let Err(error) = sent {
                // Parts of an unfinished upload are billed and never visible: give them back.
                if let Err(abort) = upload.abort().await {
                    tracing::debug!(key = %job.key, error = %abort, "cannot abort a failed multipart upload");
                }
                return Err(error);
            }
        }
        if let (Some(journal), Some(wal)) = (&self.journal, job.wal) {
            let entry = Entry {
                wal,
                key: job.key.to_string(),
            };
            journal
                .append(&entry)
                .map_err(|source| UploadError::Journal {
                    path: journal.path().to_path_buf(),
                    source,
                })?;
        }
        Ok(())
    }

    fn finish(&self, job: Job) {
        let url = self.remote.url_of(&job.key);
        // The object is complete and recorded; a staged copy left by a failed delete is only
        // uploaded again (same key, same bytes) at the next start.
        if let Err(error) = std::fs::remove_file(&job.local) {
            tracing::warn!(path = %job.local.display(), %error, "cannot remove an uploaded staged file");
        }
        crate::crash::reached(crate::crash::Point::Uploaded);
        // The sink first, so that whoever hears of the upload finds it complete there.
        job.owner.done(job.id, url.clone());
        self.observer.uploaded(&url, job.rows, job.bytes);
        self.backlog_changed(-(job.bytes as i128), -1);
    }
}

/// Up to `limit` bytes of `file`; empty at its end.
fn read_part(file: &mut File, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut part = Vec::with_capacity(limit);
    file.take(limit as u64).read_to_end(&mut part)?;
    Ok(part)
}

async fn run(shared: Arc<Shared>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = jobs.recv().await {
        if let Some(problem) = lock(&shared.failure).clone() {
            job.owner.fail(&problem);
            continue;
        }
        let mut backoff = shared.config.initial_backoff;
        let mut retries = 0;
        loop {
            let error = match shared.upload(&job).await {
                Ok(()) => {
                    shared.finish(job);
                    break;
                }
                Err(error) => error,
            };
            let failed = format!(
                "cannot upload {} to {}",
                job.local.display(),
                shared.remote.url_of(&job.key),
            );
            *lock(&shared.last_problem) = Some(error.to_string());
            if let Some(reason) = give_up(shared.retries, &error, retries) {
                let problem = format!("{failed}: {reason}: {error}");
                tracing::error!("{problem}");
                *lock(&shared.failure) = Some(problem.clone());
                job.owner.fail(&problem);
                break;
            }
            let waiting = lock(&shared.backlog).files;
            shared.observer.failed(&format!(
                "{failed}: {error}; retrying in {backoff:?}, {waiting} files waiting"
            ));
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(shared.config.max_backoff);
            retries += 1;
        }
    }
}

/// Why a failed upload, already retried `retries` times, is not tried again; `None`: it is.
fn give_up(budget: UploadRetries, error: &UploadError, retries: u32) -> Option<String> {
    let UploadRetries::Limited(limit) = budget else {
        return None;
    };
    let status = match error {
        UploadError::Store(error) => http_status(error),
        _ => None,
    };
    let answered = status.map(|s| format!("HTTP {s}, ")).unwrap_or_default();
    match status {
        Some(status) if is_permanent(status) => Some(format!(
            "the store answered HTTP {status}, which retrying cannot change"
        )),
        _ if retries >= limit => Some(format!(
            "{answered}still failing after {} (the retry budget)",
            match retries {
                1 => "1 retry".to_owned(),
                n => format!("{n} retries"),
            }
        )),
        _ => None,
    }
}

/// A client error, but for a timeout (408) and throttling (429), which pass.
pub fn is_permanent(status: u16) -> bool {
    (400..500).contains(&status) && status != 408 && status != 429
}

/// The HTTP status a store answered with, when the error came from one. `object_store` gives the
/// common ones variants of their own and keeps the others in a private type, whose message says
/// `status code: 400 Bad Request`.
pub fn http_status(error: &object_store::Error) -> Option<u16> {
    use object_store::Error;
    match error {
        Error::NotFound { .. } => Some(404),
        Error::PermissionDenied { .. } => Some(403),
        Error::Unauthenticated { .. } => Some(401),
        Error::AlreadyExists { .. } => Some(409),
        Error::Precondition { .. } => Some(412),
        Error::NotModified { .. } => Some(304),
        other => {
            let message = other.to_string();
            let (_, rest) = message.split_once("status code: ")?;
            let status: u16 = rest.get(..3)?.parse().ok()?;
            (100..600).contains(&status).then_some(status)
        }
    }
}

/// `file`'s path below `root` with `/` separators: its key below the output prefix.
pub(crate) fn relative_key(root: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(root).ok()?;
    let parts: Vec<&str> = relative
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect::<Option<_>>()?;
    Some(parts.join("/"))
}
