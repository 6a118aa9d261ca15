use std::io::Write;

use super::segment::parse_segment;
use super::*;

fn open(dir: &Path, segment_bytes: u64, recovery: &Recovery) -> WalWriter {
    open_with(dir, segment_bytes, recovery, FsyncMode::Always)
}

/// `FsyncMode::Always` writes with direct I/O where the filesystem takes it, the others through
/// the page cache.
fn open_with(dir: &Path, segment_bytes: u64, recovery: &Recovery, fsync: FsyncMode) -> WalWriter {
    let config = WalConfig {
        segment_bytes,
        fsync,
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

/// Appends of every size, across the direct writer's blocks and 1 MiB chunks, read back after
/// each append from the open segment (zeros after the last record while it is open) and from
/// the sealed one, which has no zeros left; in both write modes.
#[test]
fn appends_of_any_size_read_back_as_written_in_both_modes() {
    for fsync in [FsyncMode::Always, FsyncMode::Off] {
        let dir = tempfile::tempdir().unwrap();
        let recovery = recover(dir.path()).unwrap();
        let mut writer = open_with(dir.path(), 1 << 30, &recovery, fsync);
        let mut expected: Vec<Vec<u8>> = Vec::new();
        let mut seed = 7u64;
        let mut next = |bound: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % bound
        };
        for round in 0..40u64 {
            let batch: Vec<Vec<u8>> = (0..1 + next(4))
                .map(|i| {
                    // Mostly small, now and then past a block or a whole chunk.
                    let len = match next(10) {
                        0 => 1_048_576 + next(9_000),
                        1 | 2 => next(20_000),
                        _ => next(600),
                    };
                    (0..len).map(|b| (b + round * 31 + i) as u8 | 1).collect()
                })
                .collect();
            let payloads: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            let first = writer.append(&payloads).unwrap();
            assert_eq!(first, expected.len() as u64 + 1);
            expected.extend(batch);
            if round == 0 && fsync == FsyncMode::Always && !writer.writes_direct() {
                eprintln!(
                    "no direct I/O under {}: only the page cache is tested",
                    dir.path().display()
                );
            }
            let read = parse_segment(&std::fs::read(last_segment(dir.path())).unwrap());
            assert_eq!(read.problem, None, "{fsync:?} round {round}");
            let payloads: Vec<&[u8]> = read.records.iter().map(|r| r.payload.as_ref()).collect();
            assert!(
                payloads == expected.iter().map(Vec::as_slice).collect::<Vec<_>>(),
                "{fsync:?} round {round}"
            );
        }
        drop(writer);
        let logical: u64 = expected
            .iter()
            .map(|p| (RECORD_HEADER_BYTES + p.len()) as u64)
            .sum();
        assert_eq!(
            std::fs::metadata(last_segment(dir.path())).unwrap().len(),
            logical
        );
        let recovery = recover(dir.path()).unwrap();
        assert!(recovery.problems.is_empty(), "{:?}", recovery.problems);
        assert_eq!(recovery.records.len(), expected.len());
    }
}

#[test]
fn zeros_after_the_last_record_end_a_segment_and_anything_else_is_a_problem() {
    let mut bytes = Vec::new();
    segment::encode_record(&mut bytes, 1, b"one");
    segment::encode_record(&mut bytes, 2, b"");
    let end = bytes.len() as u64;
    bytes.resize(4096, 0);
    let read = parse_segment(&bytes);
    assert_eq!(
        (read.records.len(), read.valid_bytes, read.problem),
        (2, end, None)
    );

    bytes[4000] = 1;
    let read = parse_segment(&bytes);
    assert_eq!((read.records.len(), read.valid_bytes), (2, end));
    assert!(read.problem.is_some());
}

/// A filesystem that takes O_DIRECT at `fcntl` but refuses the writes: the batch goes through
/// the page cache after the records written directly (the zeros after them cut off first), and
/// so does every later segment.
#[test]
fn a_refused_direct_write_goes_through_the_page_cache_after_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let recovery = recover(dir.path()).unwrap();
    let mut writer = open(dir.path(), 64 * 1024, &recovery);
    writer.append(&[b"direct one", &[9u8; 5000]]).unwrap();
    if !writer.writes_direct() {
        eprintln!(
            "no direct I/O under {}: nothing to refuse",
            dir.path().display()
        );
        return;
    }
    writer.refuse_direct_writes();
    assert_eq!(writer.append(&[b"buffered", b"two"]).unwrap(), 3);
    assert!(!writer.writes_direct());
    let read = parse_segment(&std::fs::read(last_segment(dir.path())).unwrap());
    assert_eq!(read.problem, None);
    let payloads: Vec<&[u8]> = read.records.iter().map(|r| r.payload.as_ref()).collect();
    assert_eq!(
        payloads,
        [&b"direct one"[..], &[9u8; 5000], b"buffered", b"two"]
    );
    // Past the segment size: the next segment is not tried with direct I/O again.
    writer.append(&[&[1u8; 70 * 1024]]).unwrap();
    writer.append(&[b"next segment"]).unwrap();
    assert_eq!(writer.segments(), 2);
    assert!(!writer.writes_direct());
    drop(writer);
    let recovery = recover(dir.path()).unwrap();
    assert!(recovery.problems.is_empty(), "{:?}", recovery.problems);
    assert_eq!(
        recovery.records.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
}

/// An append whose fsync fails is not acknowledged and is cut off; the next one goes on from the
/// bytes the segment really ends with (with direct I/O: its last partial block as it was before
/// the failed append, not as that append left it).
#[test]
fn an_append_whose_fsync_fails_is_cut_off_and_the_next_goes_on() {
    for fsync in [FsyncMode::Always, FsyncMode::Off] {
        let dir = tempfile::tempdir().unwrap();
        let recovery = recover(dir.path()).unwrap();
        let mut writer = open_with(dir.path(), 1 << 30, &recovery, fsync);
        writer.append(&[&[3u8; 1000]]).unwrap();
        if fsync == FsyncMode::Always {
            writer.fail_next_sync();
            assert!(writer.append(&[&[4u8; 5000], b"lost"]).is_err());
        }
        assert_eq!(writer.append(&[b"after"]).unwrap(), 2);
        drop(writer);
        let recovery = recover(dir.path()).unwrap();
        assert!(
            recovery.problems.is_empty(),
            "{fsync:?} {:?}",
            recovery.problems
        );
        let payloads: Vec<&[u8]> = recovery
            .records
            .iter()
            .map(|r| r.payload.as_ref())
            .collect();
        assert_eq!(payloads, [&[3u8; 1000][..], b"after"], "{fsync:?}");
    }
}

/// The spare's name in the log's directory (`spare::NAME`).
const SPARE: &str = ".spare-segment";

/// A directory on the checkout's disk: `/tmp` may be tmpfs, where no zeros are written ahead.
fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(".wal-test")
        .tempdir_in(env!("CARGO_MANIFEST_DIR"))
        .unwrap()
}

/// A writer of 64 KiB segments in `dir` with one 40 KiB record appended to a zeroed first
/// segment; `None` (said on stderr) where no zeros are written ahead.
fn zeroing_writer_after_40_kib(dir: &Path) -> Option<WalWriter> {
    let recovery = recover(dir).unwrap();
    let mut writer = open(dir, 64 * 1024, &recovery);
    // However busy the disk: the first append waits for its zeros only so long.
    writer.settle_spare();
    writer.append(&[&[5u8; 40 * 1024]]).unwrap();
    if !writer.zeroes_ahead() || !writer.writes_direct() {
        eprintln!("no zeros ahead under {}", dir.display());
        return None;
    }
    Some(writer)
}

/// With direct I/O, a segment starts as a zeroed spare: while open it is longer than its records
/// (the zeros read as its end), sealing trims it, and the next segment, zeroed while the first
/// filled, is renamed into place. Recovery never reads the spare, and the writer removes it.
#[test]
fn segments_start_zeroed_and_are_trimmed_when_sealed() {
    let dir = disk_dir();
    let Some(mut writer) = zeroing_writer_after_40_kib(dir.path()) else {
        return;
    };
    let first = last_segment(dir.path());
    let logical = (RECORD_HEADER_BYTES + 40 * 1024) as u64;
    // The segment's size and a margin, zeroed.
    assert_eq!(std::fs::metadata(&first).unwrap().len(), 128 * 1024);
    // Past half the segment the next spare is on its way; once made, the rotation takes it.
    writer.settle_spare();
    assert!(dir.path().join(SPARE).exists());
    let recovered = recover(dir.path()).unwrap();
    assert!(recovered.problems.is_empty(), "{:?}", recovered.problems);
    assert_eq!(recovered.records.len(), 1);
    assert_eq!(recovered.segments.len(), 1, "the spare is not a segment");

    writer.append(&[&[6u8; 30 * 1024]]).unwrap();
    assert_eq!(writer.segments(), 1, "sealed once full");
    assert_eq!(
        std::fs::metadata(&first).unwrap().len(),
        logical + (RECORD_HEADER_BYTES + 30 * 1024) as u64,
        "trimmed to its records"
    );
    writer.append(&[b"next"]).unwrap();
    let second = last_segment(dir.path());
    assert_ne!(first, second);
    assert!(!dir.path().join(SPARE).exists(), "renamed to the segment");
    assert_eq!(std::fs::metadata(&second).unwrap().len(), 128 * 1024);

    drop(writer);
    assert!(!dir.path().join(SPARE).exists());
    assert_eq!(
        std::fs::metadata(&second).unwrap().len(),
        (RECORD_HEADER_BYTES + 4) as u64
    );
    let recovery = recover(dir.path()).unwrap();
    assert!(recovery.problems.is_empty(), "{:?}", recovery.problems);
    assert_eq!(
        recovery.records.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

/// A crash mid-append into a zeroed segment leaves part of a record before the zeros: recovery
/// reports it and cuts the segment after the last whole record, as after an append to the end.
#[test]
fn a_record_torn_before_zeros_is_cut_off() {
    let mut bytes = Vec::new();
    segment::encode_record(&mut bytes, 1, b"whole");
    let end = bytes.len() as u64;
    let mut torn = Vec::new();
    segment::encode_record(&mut torn, 2, &[8u8; 3000]);
    bytes.extend_from_slice(&torn[..1000]);
    bytes.resize(128 * 1024, 0);
    let read = parse_segment(&bytes);
    assert_eq!((read.records.len(), read.valid_bytes), (1, end));
    assert!(
        read.problem
            .as_deref()
            .is_some_and(|p| p.contains("bad CRC")),
        "{:?}",
        read.problem
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000001.wal");
    std::fs::write(&path, &bytes).unwrap();
    let recovery = recover(dir.path()).unwrap();
    assert_eq!(recovery.records.len(), 1);
    assert_eq!(recovery.problems.len(), 1, "{:?}", recovery.problems);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), end);
}

/// Once the filesystem refuses a direct write, the log goes through the page cache and no zeros
/// are written ahead: the spare being made is removed and the next segment starts empty.
#[test]
fn a_refused_direct_write_stops_the_spares() {
    let dir = disk_dir();
    let Some(mut writer) = zeroing_writer_after_40_kib(dir.path()) else {
        return;
    };
    writer.settle_spare();
    assert!(dir.path().join(SPARE).exists());
    writer.refuse_direct_writes();
    writer.append(&[&[6u8; 30 * 1024]]).unwrap();
    assert!(!writer.writes_direct());
    assert!(!dir.path().join(SPARE).exists());
    writer.append(&[b"next"]).unwrap();
    assert_eq!(writer.segments(), 2);
    assert_eq!(
        std::fs::metadata(last_segment(dir.path())).unwrap().len(),
        (RECORD_HEADER_BYTES + 4) as u64,
        "the second segment was not zeroed"
    );
    drop(writer);
    let recovery = recover(dir.path()).unwrap();
    assert!(recovery.problems.is_empty(), "{:?}", recovery.problems);
    assert_eq!(recovery.records.len(), 3);
}

/// Zeros are written ahead on ext4 and XFS only, whatever `/tmp` and `/dev/shm` are here (tmpfs
/// has no journal to spare).
#[test]
fn zeros_ahead_only_on_filesystems_that_write_in_place() {
    for parent in ["/dev/shm", "/tmp"] {
        let Ok(dir) = tempfile::tempdir_in(parent) else {
            continue;
        };
        let fs_type = rustix::fs::statfs(dir.path()).unwrap().f_type as u64;
        let recovery = recover(dir.path()).unwrap();
        let writer = open(dir.path(), 64 * 1024, &recovery);
        assert_eq!(
            writer.zeroes_ahead(),
            fs_type == 0xEF53 || fs_type == 0x5846_5342,
            "{parent}: filesystem type {fs_type:#x}"
        );
    }
}

/// A crash after a segment was started and before its first record was whole leaves a segment
/// without records, named for the next LSN: the next segment takes its name. It is not a sealed
/// segment to release after that, or releasing would delete the live one.
#[test]
fn a_segment_left_without_records_is_replaced_not_released() {
    for leftover in [&[][..], &[0u8; 8192], b"\x10\x00\x00\x00torn"] {
        let dir = disk_dir();
        std::fs::write(dir.path().join("00000000000000000001.wal"), leftover).unwrap();
        let recovery = recover(dir.path()).unwrap();
        assert_eq!(recovery.next_lsn, 1);
        let mut writer = open(dir.path(), 1 << 20, &recovery);
        assert_eq!(writer.append(&[b"kept"]).unwrap(), 1);
        // Record 1 is still needed: nothing may go.
        writer.release_below(1);
        assert_eq!(writer.segments(), 1);
        let read = recover(dir.path()).unwrap();
        assert_eq!(read.records.len(), 1, "{leftover:?}");
        assert_eq!(read.records[0].payload.as_ref(), b"kept");
    }
}
