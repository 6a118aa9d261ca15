//! The next segment, zeroed ahead of time.
//!
//! On ext4 and XFS, which write blocks in place and journal their allocation, a write that
//! allocates blocks or moves a file's end makes the `fdatasync` after it commit the journal
//! too; a write over blocks that were written and synced before flushes only the data. A 288 KiB
//! direct append and its `fdatasync` took 0.51–0.59 ms here, the same write over zeros
//! 0.29–0.33 ms (BENCHMARKS.md, issue 18, twenty-seventh pass). With `fsync = "always"` that is on every export's answer, so
//! a thread writes a segment's worth of zeros, syncs them and hands the file over; the writer
//! renames it to the next segment's name when it rotates. Zeros are what a reader takes for the
//! end of a segment already ([`super::segment`]), so recovery reads such a segment as it reads
//! one being written, and sealing trims what was not used.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::direct::{set_direct, BLOCK};

/// The spare's name in the log's directory: no `.wal` extension, so recovery never reads it.
const NAME: &str = ".spare-segment";
/// Zeros written per call.
const CHUNK: usize = 1024 * 1024;
/// The most a spare is zeroed (the default segment and its margin): a larger segment is appended
/// past it.
const MOST_BYTES: u64 = 68 * 1024 * 1024;
/// Past the segment size: the batch that fills a segment still lands on zeros.
const MARGIN_BYTES: u64 = 4 * 1024 * 1024;
/// The longest the first append after a start waits for its segment's zeros (68 MiB took 60 ms
/// here); on a disk slower than that the first segment is appended to as before.
const FIRST_WAIT: Duration = Duration::from_millis(250);

/// Whether zeros written ahead pay on the filesystem of `dir`: on ext4 and XFS, which write
/// blocks in place and journal their allocation. Not on tmpfs (no journal: the zeros would only
/// fill memory), nor on copy-on-write filesystems such as btrfs, which allocate new blocks for
/// every write anyway.
pub fn pay_off_in(dir: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        const EXT4_SUPER_MAGIC: u64 = 0xEF53;
        const XFS_SUPER_MAGIC: u64 = 0x5846_5342;
        rustix::fs::statfs(dir)
            .is_ok_and(|fs| matches!(fs.f_type as u64, EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        false
    }
}

/// Makes one spare at a time, on its own thread.
pub struct Spares {
    path: PathBuf,
    bytes: u64,
    /// The thread zeroing the next spare, and where it sends the file.
    making: Option<(JoinHandle<()>, Receiver<io::Result<File>>)>,
    /// Made and not yet taken (tests settle a spare before they rotate).
    made: Option<io::Result<File>>,
    stop: Arc<AtomicBool>,
    /// The filesystem takes no direct I/O: the log is written through the page cache and no
    /// spare is made.
    off: bool,
}

impl Spares {
    /// Starts zeroing the first spare for segments of `segment_bytes` in `dir` (a spare a
    /// previous run left is replaced).
    pub fn start(dir: &Path, segment_bytes: u64) -> Spares {
        let mut spares = Spares {
            path: dir.join(NAME),
            bytes: segment_bytes
                .saturating_add(MARGIN_BYTES.min(segment_bytes))
                .min(MOST_BYTES)
                .next_multiple_of(BLOCK as u64),
            making: None,
            made: None,
            stop: Arc::new(AtomicBool::new(false)),
            off: false,
        };
        spares.prepare();
        spares
    }

    /// Where a spare taken lies until the writer renames it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The spare and its length, if it is ready (with `wait`: once it is, within
    /// [`FIRST_WAIT`]). `None` when it is not ready or could not be made (logged): the writer
    /// starts a segment of its own then.
    pub fn take(&mut self, wait: bool) -> Option<(File, u64)> {
        self.receive(if wait { FIRST_WAIT } else { Duration::ZERO });
        match self.made.take()? {
            Ok(file) => Some((file, self.bytes)),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                self.off = true;
                None
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot zero the next write-ahead log segment ahead of time; appending to a new one");
                None
            }
        }
    }

    /// Tests: waits for the spare being made.
    #[cfg(test)]
    pub fn settle(&mut self) {
        // Past any deadline: `recv_timeout` then waits as `recv` does.
        self.receive(Duration::MAX);
    }

    /// Takes the spare being made into `made` if it is ready within `timeout`.
    fn receive(&mut self, timeout: Duration) {
        let Some((_, made)) = &self.making else {
            return;
        };
        let made = match made.recv_timeout(timeout) {
            Ok(made) => made,
            Err(RecvTimeoutError::Timeout) => return,
            Err(RecvTimeoutError::Disconnected) => {
                Err(io::Error::other("the thread zeroing it panicked"))
            }
        };
        if let Some((thread, _)) = self.making.take() {
            let _ = thread.join();
        }
        self.made = Some(made);
    }

    /// Starts zeroing the next spare, unless one is on its way or made.
    pub fn prepare(&mut self) {
        if self.off || self.making.is_some() || self.made.is_some() {
            return;
        }
        let (path, bytes, stop) = (self.path.clone(), self.bytes, Arc::clone(&self.stop));
        let (send, made) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("wal-spare".to_owned())
            .spawn(move || {
                let made = zero(&path, bytes, &stop);
                if made.is_err() {
                    let _ = std::fs::remove_file(&path);
                }
                let _ = send.send(made);
            });
        match thread {
            Ok(thread) => self.making = Some((thread, made)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start zeroing write-ahead log segments ahead of time")
            }
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some((thread, _)) = self.making.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `bytes` zeros to a new file at `path` and syncs them: blocks written, not merely
/// allocated (`fallocate` leaves them unwritten, and writing over those commits the journal
/// again).
fn zero(path: &Path, bytes: u64, stop: &AtomicBool) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)?;
    // Spares are for a log written directly; where the filesystem refuses direct I/O, the log
    // goes through the page cache, and zeros there would only fill memory.
    set_direct(&file, true).map_err(|_| io::Error::from(io::ErrorKind::Unsupported))?;
    let raw = vec![0u8; CHUNK + BLOCK];
    let start = raw.as_ptr().align_offset(BLOCK);
    let zeros = &raw[start..start + CHUNK];
    let mut offset = 0;
    while offset < bytes {
        if stop.load(Ordering::Relaxed) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = (bytes - offset).min(CHUNK as u64);
        file.write_all_at(&zeros[..n as usize], offset)?;
        offset += n;
    }
    file.sync_data()?;
    Ok(file)
}
