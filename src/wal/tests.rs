use std::io::Write;

use super::segment::parse_segment;
use super::*;

fn open(dir: &Path, segment_bytes: u64, recovery: &Recovery) -> WalWriter {
    let config = WalConfig {
        segment_bytes,
        fsync: FsyncMode::Always,
        ..WalConfig::default()
    };
    WalWriter::open(dir.to_path_buf(), &config, recovery)
}

fn write_records(dir: &Path, payloads: &[&[u8]], segment_bytes: u64) {
    let recovery = recover(dir).unwrap();
    let mut writer = open(dir, segment_bytes, &recovery);
    for payload in payloads {
        writer.append(&[payload]).unwrap();
    }
}

fn last_segment(dir: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segments.sort();
    segments.pop().unwrap()
}

#[test]
fn records_survive_a_restart_in_order() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), &[b"one", b"two"], 1 << 20);
    write_records(dir.path(), &[b"three"], 1 << 20);
    let recovery = recover(dir.path()).unwrap();
    let payloads: Vec<&[u8]> = recovery
        .records
        .iter()
        .map(|r| r.payload.as_ref())
        .collect();
    assert_eq!(payloads, vec![&b"one"[..], b"two", b"three"]);
    assert_eq!(
        recovery.records.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(recovery.next_lsn, 4);
    assert!(recovery.problems.is_empty());
}

#[test]
fn a_batch_shares_one_append_and_gets_consecutive_lsns() {
    let dir = tempfile::tempdir().unwrap();
    let recovery = recover(dir.path()).unwrap();
    let mut writer = open(dir.path(), 1 << 20, &recovery);
    assert_eq!(writer.append(&[b"a", b"b", b"c"]).unwrap(), 1);
    assert_eq!(writer.append(&[b"d"]).unwrap(), 4);
    drop(writer);
    assert_eq!(recover(dir.path()).unwrap().records.len(), 4);
}

#[test]
fn truncated_tail_record_is_cut_and_earlier_records_recovered() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), &[b"first", b"second", b"third record"], 1 << 20);
    let path = last_segment(dir.path());
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 5).unwrap();

    let recovery = recover(dir.path()).unwrap();
    assert_eq!(recovery.records.len(), 2);
    assert_eq!(recovery.problems.len(), 1, "{:?}", recovery.problems);
    assert!(
        recovery.problems[0].contains("torn record"),
        "{:?}",
        recovery.problems
    );
    // The tail was truncated away: a second recovery finds nothing wrong.
    let again = recover(dir.path()).unwrap();
    assert!(again.problems.is_empty());
    assert_eq!(again.records.len(), 2);
    // And appending continues after the last good record.
    write_records(dir.path(), &[b"fourth"], 1 << 20);
    let lsns: Vec<u64> = recover(dir.path())
        .unwrap()
        .records
        .iter()
        .map(|r| r.lsn)
        .collect();
    assert_eq!(lsns, vec![1, 2, 3]);
}

#[test]
fn bit_flipped_tail_record_is_detected_by_its_crc() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), &[b"first", b"second", b"third"], 1 << 20);
    let path = last_segment(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let recovery = recover(dir.path()).unwrap();
    assert_eq!(recovery.records.len(), 2);
    assert!(
        recovery.problems[0].contains("bad CRC"),
        "{:?}",
        recovery.problems
    );
}

#[test]
fn torn_header_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), &[b"first"], 1 << 20);
    let path = last_segment(dir.path());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&[1, 2, 3])
        .unwrap();
    let recovery = recover(dir.path()).unwrap();
    assert_eq!(recovery.records.len(), 1);
    assert!(recovery.problems[0].contains("torn record header"));
}

#[test]
fn segments_rotate_and_are_released_once_written() {
    let dir = tempfile::tempdir().unwrap();
    let recovery = recover(dir.path()).unwrap();
    let mut writer = open(dir.path(), 50, &recovery);
    for _ in 0..6 {
        writer.append(&[&[7u8; 40]]).unwrap();
    }
    assert_eq!(
        writer.segments(),
        6,
        "every 56-byte record fills a 50-byte segment"
    );
    assert_eq!(writer.release_below(4), 3);
    drop(writer);
    let lsns: Vec<u64> = recover(dir.path())
        .unwrap()
        .records
        .iter()
        .map(|r| r.lsn)
        .collect();
    assert_eq!(lsns, vec![4, 5, 6]);
}

#[test]
fn garbage_never_panics_the_parser() {
    for bytes in [&b""[..], b"\xff\xff\xff\xff", &[0u8; 15], &[0xffu8; 64]] {
        let read = parse_segment(bytes);
        assert!(read.records.is_empty());
    }
}

/// One append of more records than one `writev` takes (the kernel's limit is 1,024 slices, two
/// a record), empty payloads among them, reads back record by record, in order.
#[test]
fn a_batch_larger_than_one_vectored_write_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    // The last is empty (1,498 is a multiple of 7).
    let payloads: Vec<Vec<u8>> = (0..1_499u32)
        .map(|i| {
            if i % 7 == 0 {
                Vec::new()
            } else {
                i.to_le_bytes().repeat(1 + i as usize % 300)
            }
        })
        .collect();
    let batch: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    {
        let recovery = recover(dir.path()).unwrap();
        let mut writer = open(dir.path(), 1 << 30, &recovery);
        assert_eq!(writer.append(&batch).unwrap(), 1);
        assert_eq!(writer.append(&[b"after"]).unwrap(), 1_500);
    }
    let recovery = recover(dir.path()).unwrap();
    let read: Vec<(u64, &[u8])> = recovery
        .records
        .iter()
        .map(|r| (r.lsn, r.payload.as_ref()))
        .collect();
    let expected: Vec<(u64, &[u8])> = batch
        .iter()
        .copied()
        .chain([&b"after"[..]])
        .enumerate()
        .map(|(i, p)| (i as u64 + 1, p))
        .collect();
    assert_eq!(read, expected);
    assert_eq!(
        std::fs::metadata(last_segment(dir.path())).unwrap().len(),
        expected
            .iter()
            .map(|(_, p)| (RECORD_HEADER_BYTES + p.len()) as u64)
            .sum::<u64>()
    );
}
