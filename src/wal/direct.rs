//! Direct I/O for the log: records go from an aligned buffer to the disk, not through the page
//! cache.
//!
//! With `fsync = "always"` every append waits for the disk anyway, and the page cache only adds
//! the kernel's copy into freshly allocated cache pages: 1–21% of the collector's CPU depending
//! on the host (BENCHMARKS.md, issue 18). O_DIRECT wants block-aligned file offsets, lengths and
//! memory, so an append copies its records into an aligned buffer behind the segment's last
//! partial block (kept in memory), writes whole blocks, and pads the last one with zeros. The
//! next append writes that block again with the same bytes in front, so a torn write can never
//! change an acknowledged byte; the zeros past the end are what a reader takes for the end of
//! the segment, and sealing trims them.

use std::fs::File;
use std::io;

/// Block size for offsets, lengths and addresses: the largest logical block size in use.
pub const BLOCK: usize = 4096;
/// Records are gathered in this much aligned memory per write.
const CHUNK: usize = 1024 * 1024;

/// Switches O_DIRECT on or off for `file`; an error means the filesystem does not take it.
#[cfg(target_os = "linux")]
pub fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(file)?;
    let flags = if on {
        flags | OFlags::DIRECT
    } else {
        flags - OFlags::DIRECT
    };
    Ok(fcntl_setfl(file, flags)?)
}

#[cfg(not(target_os = "linux"))]
pub fn set_direct(_file: &File, on: bool) -> io::Result<()> {
    if on {
        Err(io::ErrorKind::Unsupported.into())
    } else {
        Ok(())
    }
}

/// The last partial block of a segment: its bytes are written again in front of the next
/// append's.
#[derive(Debug, Default, Clone)]
pub struct Tail {
    bytes: Vec<u8>,
}

/// The aligned memory appends are gathered in; one per writer, reused across segments.
pub struct DirectBuffer {
    raw: Vec<u8>,
    /// Where the aligned `CHUNK` bytes start in `raw`.
    start: usize,
    /// Tests: every write is refused as a filesystem refuses a misaligned one.
    #[cfg(test)]
    pub refuse: bool,
}

impl Default for DirectBuffer {
    fn default() -> Self {
        let raw = vec![0; CHUNK + BLOCK];
        let start = raw.as_ptr().align_offset(BLOCK);
        DirectBuffer {
            raw,
            start,
            #[cfg(test)]
            refuse: false,
        }
    }
}

impl DirectBuffer {
    /// Writes `pieces` at byte `end` of `file` (its logical length, whose last partial block is
    /// `tail`), in aligned blocks, and returns the new last partial block. `tail` is left as it
    /// was: the caller takes the new one once the append is durable, so a segment cut back to
    /// `end` after a failed write or sync goes on from the bytes it really ends with.
    pub fn write<'a>(
        &mut self,
        file: &File,
        end: u64,
        tail: &Tail,
        pieces: impl IntoIterator<Item = &'a [u8]>,
    ) -> io::Result<Tail> {
        use std::os::unix::fs::FileExt;

        #[cfg(test)]
        if self.refuse {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::INVAL.raw_os_error(),
            ));
        }
        let window = &mut self.raw[self.start..self.start + CHUNK];
        let mut offset = end - end % BLOCK as u64;
        debug_assert_eq!(tail.bytes.len() as u64, end - offset);
        let mut filled = tail.bytes.len();
        window[..filled].copy_from_slice(&tail.bytes);
        for mut piece in pieces {
            while !piece.is_empty() {
                let n = (CHUNK - filled).min(piece.len());
                window[filled..filled + n].copy_from_slice(&piece[..n]);
                filled += n;
                piece = &piece[n..];
                if filled == CHUNK {
                    file.write_all_at(window, offset)?;
                    offset += CHUNK as u64;
                    filled = 0;
                }
            }
        }
        if filled > 0 {
            let padded = filled.next_multiple_of(BLOCK);
            window[filled..padded].fill(0);
            file.write_all_at(&window[..padded], offset)?;
        }
        Ok(Tail {
            bytes: window[filled - filled % BLOCK..filled].to_vec(),
        })
    }
}
