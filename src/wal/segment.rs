//! The record format: `len: u32 LE | crc32: u32 LE | lsn: u64 LE | payload (len bytes)`, the CRC
//! covering the LSN and the payload. Zeros after the last record end the segment: a segment
//! written with direct I/O is padded to a block boundary until it is sealed, and no record
//! starts with sixteen zero bytes (LSNs start at 1).

use std::io::{self, Read};
use std::path::Path;

use bytes::Bytes;

use super::Record;

pub const RECORD_HEADER_BYTES: usize = 16;
/// Larger than any request a receiver accepts; a length above it means a corrupt header.
const MAX_RECORD_BYTES: u32 = 256 * 1024 * 1024;

pub fn crc(lsn: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&lsn.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// The header of the record of `payload` at `lsn`; the payload follows it.
pub fn record_header(lsn: u64, payload: &[u8]) -> [u8; RECORD_HEADER_BYTES] {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut header = [0; RECORD_HEADER_BYTES];
    header[0..4].copy_from_slice(&len.to_le_bytes());
    header[4..8].copy_from_slice(&crc(lsn, payload).to_le_bytes());
    header[8..16].copy_from_slice(&lsn.to_le_bytes());
    header
}

/// Appends one encoded record to `out`.
pub fn encode_record(out: &mut Vec<u8>, lsn: u64, payload: &[u8]) {
    out.extend_from_slice(&record_header(lsn, payload));
    out.extend_from_slice(payload);
}

/// The good records of a segment, and where and why reading stopped early.
#[derive(Debug, Default)]
pub struct SegmentRead {
    pub records: Vec<Record>,
    /// Bytes up to the end of the last good record.
    pub valid_bytes: u64,
    pub problem: Option<String>,
}

pub fn read_segment(path: &Path) -> io::Result<SegmentRead> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    Ok(parse_segment(&bytes))
}

pub fn parse_segment(bytes: &[u8]) -> SegmentRead {
    let mut read = SegmentRead::default();
    let mut offset = 0usize;
    let mut previous_lsn = None;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        if all_zeros(rest) {
            break;
        }
        let Some(header) = rest.get(..RECORD_HEADER_BYTES) else {
            read.problem = Some(format!(
                "torn record header ({} of {RECORD_HEADER_BYTES} bytes)",
                rest.len()
            ));
            break;
        };
        let field = |range: std::ops::Range<usize>| header.get(range).unwrap_or_default();
        let len = u32::from_le_bytes(field(0..4).try_into().unwrap_or_default());
        let stored_crc = u32::from_le_bytes(field(4..8).try_into().unwrap_or_default());
        let lsn = u64::from_le_bytes(field(8..16).try_into().unwrap_or_default());
        if len > MAX_RECORD_BYTES {
            read.problem = Some(format!("corrupt record header (length {len})"));
            break;
        }
        let Some(payload) = rest.get(RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + len as usize)
        else {
            read.problem = Some(format!(
                "torn record (LSN {lsn}: {} of {len} payload bytes)",
                rest.len() - RECORD_HEADER_BYTES
            ));
            break;
        };
        if crc(lsn, payload) != stored_crc {
            read.problem = Some(format!("record with a bad CRC (LSN {lsn})"));
            break;
        }
        if previous_lsn.is_some_and(|p| lsn <= p) {
            read.problem = Some(format!("record out of sequence (LSN {lsn})"));
            break;
        }
        previous_lsn = Some(lsn);
        read.records.push(Record {
            lsn,
            payload: Bytes::copy_from_slice(payload),
        });
        offset += RECORD_HEADER_BYTES + len as usize;
        read.valid_bytes = offset as u64;
    }
    read
}

/// Whether `bytes` are all zeros, a block at a time: a segment made from a zeroed spare ends in
/// tens of MiB of them.
fn all_zeros(bytes: &[u8]) -> bool {
    const ZEROS: [u8; 4096] = [0; 4096];
    bytes
        .chunks(ZEROS.len())
        .all(|block| block == &ZEROS[..block.len()])
}
