//! Appending: batches of records, one write and (by policy) one fsync per batch, segment
//! rotation, and deletion of segments every row of which is in a completed Parquet file.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Instant;

use super::direct::{set_direct, DirectBuffer, Tail};
use super::segment::{encode_record, record_header, RECORD_HEADER_BYTES};
use super::spare::{self, Spares};
use super::{segment_path, FsyncPolicy, Recovery, WalConfig, WalError};

struct Sealed {
    path: PathBuf,
    /// Last LSN it holds (`None`: empty); it may go once everything up to here is written.
    last_lsn: Option<u64>,
}

pub struct WalWriter {
    dir: PathBuf,
    /// A segment is sealed and a new one started once it reaches this size.
    segment_bytes: u64,
    fsync: FsyncPolicy,
    current: Option<Current>,
    sealed: VecDeque<Sealed>,
    next_lsn: u64,
    /// The headers of the batch being appended; its payloads are written from where they are.
    headers: Vec<[u8; RECORD_HEADER_BYTES]>,
    unsynced_since: Option<Instant>,
    /// New segments are written with direct I/O ([`super::direct`]): with `fsync = "always"`,
    /// until the filesystem refuses it.
    direct: bool,
    /// Allocated with the first segment written directly.
    direct_buffer: Option<DirectBuffer>,
    /// Zeroed segments made ahead, while the log is written directly ([`super::spare`]).
    spares: Option<Spares>,
    /// Whether this writer has started a segment: the first waits for its spare.
    started: bool,
    /// Tests: the next fsync of an append fails with this.
    #[cfg(test)]
    sync_failure: Option<io::Error>,
}

struct Current {
    path: PathBuf,
    file: File,
    bytes: u64,
    last_lsn: Option<u64>,
    /// Written with direct I/O; its file then ends in zeros up to a block boundary.
    direct: bool,
    tail: Tail,
    /// Bytes of zeros the file held when it became the segment (a spare's), written over since.
    zeroed: u64,
}

impl WalWriter {
    /// Continues after `recovery` (of `dir`, where `config.dir` resolves to): its segments stay
    /// (sealed) until released; new records go to a new segment.
    pub fn open(dir: PathBuf, config: &WalConfig, recovery: &Recovery) -> WalWriter {
        let sealed = recovery
            .segments
            .iter()
            .map(|s| Sealed {
                path: s.path.clone(),
                last_lsn: s.last_lsn,
            })
            .collect();
        let fsync = config.fsync_policy();
        let direct = fsync == FsyncPolicy::Always;
        WalWriter {
            spares: (direct && spare::pay_off_in(&dir))
                .then(|| Spares::start(&dir, config.segment_bytes)),
            started: false,
            dir,
            segment_bytes: config.segment_bytes,
            fsync,
            current: None,
            sealed,
            next_lsn: recovery.next_lsn.max(1),
            headers: Vec::new(),
            unsynced_since: None,
            direct,
            direct_buffer: None,
            #[cfg(test)]
            sync_failure: None,
        }
    }

    /// Whether the current segment is written with direct I/O.
    pub fn writes_direct(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.direct)
    }

    /// Tests: the next append's fsync fails.
    #[cfg(test)]
    pub fn fail_next_sync(&mut self) {
        self.sync_failure = Some(io::Error::other("injected fsync failure"));
    }

    /// Tests: from now on the filesystem refuses direct writes.
    #[cfg(test)]
    pub fn refuse_direct_writes(&mut self) {
        if let Some(buffer) = &mut self.direct_buffer {
            buffer.refuse = true;
        }
    }

    /// Tests: whether segments start as zeros written ahead here.
    #[cfg(test)]
    pub fn zeroes_ahead(&self) -> bool {
        self.spares.is_some()
    }

    /// Tests: waits until the spare being zeroed is made, so the next rotation takes it.
    #[cfg(test)]
    pub fn settle_spare(&mut self) {
        if let Some(spares) = &mut self.spares {
            spares.settle();
        }
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Appends `payloads` as consecutive records and returns the LSN of the first. On error
    /// nothing of the batch counts as written: the segment is cut back to where it was.
    pub fn append(&mut self, payloads: &[&[u8]]) -> Result<u64, WalError> {
        let first_lsn = self.next_lsn;
        self.headers.clear();
        self.headers.extend(
            payloads
                .iter()
                .enumerate()
                .map(|(i, payload)| record_header(first_lsn + i as u64, payload)),
        );
        let batch_bytes: u64 = payloads
            .iter()
            .map(|p| (RECORD_HEADER_BYTES + p.len()) as u64)
            .sum();
        self.ensure_current()?;
        let fsync = self.fsync;
        let Some(current) = self.current.as_mut() else {
            return Err(WalError::io(
                &self.dir,
                std::io::Error::other("no current segment"),
            ));
        };
        if crate::crash::armed(crate::crash::Point::WalAppend) {
            let mut encoded = Vec::new();
            for (i, payload) in payloads.iter().enumerate() {
                encode_record(&mut encoded, first_lsn + i as u64, payload);
            }
            let half = &encoded[..encoded.len() / 2];
            let torn = match self.direct_buffer.as_mut().filter(|_| current.direct) {
                Some(buffer) => buffer
                    .write(&current.file, current.bytes, &current.tail, [half])
                    .map(drop),
                None => current.file.write_all(half),
            };
            let _ = torn.and_then(|()| current.file.sync_data());
            crate::crash::reached(crate::crash::Point::WalAppend);
            let _ = current.file.seek(SeekFrom::Start(current.bytes));
        }
        let headers = &self.headers;
        let mut new_tail = None;
        let mut written = match self.direct_buffer.as_mut().filter(|_| current.direct) {
            Some(buffer) => buffer
                .write(
                    &current.file,
                    current.bytes,
                    &current.tail,
                    headers
                        .iter()
                        .zip(payloads)
                        .flat_map(|(header, payload)| [&header[..], payload]),
                )
                .map(|tail| new_tail = Some(tail)),
            None => write_records(&mut current.file, headers, payloads),
        };
        if written.as_ref().is_err_and(|e| {
            current.direct && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
        }) {
            // Accepted by `fcntl`, refused by the write: this filesystem's direct I/O wants
            // other alignments. The page cache it is, from here on.
            tracing::info!(path = %current.path.display(), "direct I/O refused by the filesystem; the write-ahead log goes through the page cache");
            self.direct = false;
            self.spares = None;
            current.direct = false;
            current.zeroed = current.zeroed.min(current.bytes);
            written = set_direct(&current.file, false)
                .and_then(|()| current.file.set_len(current.bytes))
                .and_then(|()| current.file.seek(SeekFrom::Start(current.bytes)).map(drop))
                .and_then(|()| write_records(&mut current.file, headers, payloads));
        }
        #[cfg(test)]
        let injected = self.sync_failure.take();
        #[cfg(not(test))]
        let injected: Option<io::Error> = None;
        let result = written.and_then(|()| match fsync {
            FsyncPolicy::Always => injected.map_or_else(|| current.file.sync_data(), Err),
            FsyncPolicy::Interval(_) | FsyncPolicy::Off => Ok(()),
        });
        if let Err(source) = result {
            let path = current.path.clone();
            // Cut the partial batch off so later records are not stranded behind a torn one;
            // if even that fails, the segment is sealed and recovery truncates it.
            let cut = current
                .file
                .set_len(current.bytes)
                .and_then(|()| current.file.seek(SeekFrom::Start(current.bytes)).map(drop));
            current.zeroed = current.zeroed.min(current.bytes);
            if cut.is_err() {
                self.seal();
            }
            return Err(WalError::io(&path, source));
        }
        current.bytes += batch_bytes;
        if let Some(tail) = new_tail {
            current.tail = tail;
        }
        if !payloads.is_empty() {
            current.last_lsn = Some(first_lsn + payloads.len() as u64 - 1);
        }
        let full = current.bytes >= self.segment_bytes;
        // Half a segment ahead is time enough to zero the next one, and a collector that never
        // fills half a segment never writes a second segment's zeros.
        if current.bytes >= self.segment_bytes / 2 {
            if let Some(spares) = &mut self.spares {
                spares.prepare();
            }
        }
        self.next_lsn += payloads.len() as u64;
        if fsync != FsyncPolicy::Always {
            self.unsynced_since.get_or_insert_with(Instant::now);
        }
        if full {
            self.seal();
        }
        Ok(first_lsn)
    }

    /// For the `interval` policy: fsyncs when the oldest unsynced append is old enough.
    pub fn sync_if_due(&mut self, now: Instant) -> Result<(), WalError> {
        let FsyncPolicy::Interval(interval) = self.fsync else {
            return Ok(());
        };
        if self
            .unsynced_since
            .is_some_and(|since| now.duration_since(since) >= interval)
        {
            if let Some(current) = &self.current {
                current
                    .file
                    .sync_data()
                    .map_err(|e| WalError::io(&current.path, e))?;
            }
            self.unsynced_since = None;
        }
        Ok(())
    }

    /// Deletes sealed segments all of whose records are below `lsn` (every row from them is in
    /// a completed Parquet file). Returns how many went.
    pub fn release_below(&mut self, lsn: u64) -> usize {
        let mut released = 0;
        while let Some(oldest) = self.sealed.front() {
            if oldest.last_lsn.is_some_and(|last| last >= lsn) {
                break;
            }
            if let Some(segment) = self.sealed.pop_front() {
                match std::fs::remove_file(&segment.path) {
                    Ok(()) => released += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => released += 1,
                    Err(e) => {
                        tracing::warn!(path = %segment.path.display(), error = %e, "cannot delete write-ahead log segment");
                        self.sealed.push_front(segment);
                        break;
                    }
                }
            }
        }
        if released > 0 {
            sync_dir(&self.dir);
        }
        released
    }

    /// Segments on disk, the current one included.
    pub fn segments(&self) -> usize {
        self.sealed.len() + usize::from(self.current.is_some())
    }

    pub fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Seals the current segment and zeroes no more spares: for a log nothing is appended to
    /// again, only released.
    pub fn retire(&mut self) {
        self.seal();
        self.spares = None;
    }

    /// Seals the current segment, syncing it first so it is complete on disk.
    pub fn seal(&mut self) {
        if let Some(current) = self.current.take() {
            // The zeros after the last record are not part of the segment.
            if current.zeroed > current.bytes
                || (current.direct && current.bytes % super::direct::BLOCK as u64 != 0)
            {
                if let Err(e) = current.file.set_len(current.bytes) {
                    tracing::warn!(path = %current.path.display(), error = %e, "cannot trim write-ahead log segment");
                }
            }
            if let Err(e) = current.file.sync_data() {
                tracing::warn!(path = %current.path.display(), error = %e, "cannot sync write-ahead log segment");
            }
            self.sealed.push_back(Sealed {
                path: current.path,
                last_lsn: current.last_lsn,
            });
        }
    }

    fn ensure_current(&mut self) -> Result<(), WalError> {
        if self.current.is_none() {
            let dir = &self.dir;
            std::fs::create_dir_all(dir).map_err(|e| WalError::io(dir, e))?;
            let path = segment_path(dir, self.next_lsn);
            // A segment recovered with this name holds no record (the LSNs go on after every
            // one recovered): a crash left it before its first record was whole. It is replaced
            // below; kept as sealed, releasing it would delete the live segment.
            self.sealed.retain(|sealed| sealed.path != path);
            // The first segment waits for its spare: zeroing it takes tens of milliseconds once,
            // and without it every append to it would pay the journal. Later ones are made
            // while a segment fills, and a rotation that finds none ready does not wait.
            let spare = match self.spares.as_mut() {
                Some(spares) => spares.take(!self.started).and_then(|(file, zeroed)| {
                    match std::fs::rename(spares.path(), &path) {
                        Ok(()) => Some((file, zeroed)),
                        Err(e) => {
                            tracing::warn!(path = %path.display(), error = %e, "cannot rename the zeroed write-ahead log segment; appending to a new one");
                            None
                        }
                    }
                }),
                None => None,
            };
            let (file, zeroed) = match spare {
                Some(spare) => spare,
                None => {
                    let file = OpenOptions::new()
                        .create(true)
                        .truncate(true)
                        .write(true)
                        .open(&path)
                        .map_err(|e| WalError::io(&path, e))?;
                    (file, 0)
                }
            };
            sync_dir(dir);
            self.started = true;
            let direct = self.direct
                && match set_direct(&file, true) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::info!(dir = %dir.display(), error = %e, "no direct I/O here; the write-ahead log goes through the page cache");
                        self.direct = false;
                        self.spares = None;
                        false
                    }
                };
            if direct {
                self.direct_buffer.get_or_insert_with(DirectBuffer::default);
            }
            self.current = Some(Current {
                path,
                file,
                bytes: 0,
                last_lsn: None,
                direct,
                tail: Tail::default(),
                zeroed,
            });
        }
        Ok(())
    }
}

impl Drop for WalWriter {
    fn drop(&mut self) {
        self.seal();
    }
}

fn sync_dir(dir: &std::path::Path) {
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot sync write-ahead log directory");
    }
}

/// Writes each header followed by its payload, the bytes one buffer of encoded records would
/// hold, from where they are: a batch of exports is hundreds of KiB that a copy into a buffer
/// would pass through the cache once more before the kernel copies it again.
fn write_records(
    file: &mut File,
    headers: &[[u8; RECORD_HEADER_BYTES]],
    payloads: &[&[u8]],
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = headers
        .iter()
        .zip(payloads)
        .flat_map(|(header, payload)| [IoSlice::new(header), IoSlice::new(payload)])
        // An empty payload needs no slice of its own.
        .filter(|slice| !slice.is_empty())
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match file.write_vectored(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut rest, written),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
