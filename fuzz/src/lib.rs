//! Helpers shared by weir's fuzz targets.
//!
//! Random bytes almost never carry a valid CRC-32C, so a fuzzer fed only raw bytes never
//! gets past `batch::validate`. Each target therefore takes a mode byte first: with the
//! fix-up bit set, the input is "repaired" (lengths, CRCs, offsets made consistent) before
//! it is checked, so the fuzzer explores what lies behind the checksums too.

use weir_storage::batch::{self, Record, CRC_START, HEADER_BYTES, LOG_OVERHEAD};

/// Splits the mode byte off the input: `(mode, rest)`. Empty input is mode 0.
pub fn split_mode(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((m, rest)) => (*m, rest),
        None => (0, data),
    }
}

/// Walks `bytes` as a sequence of batches and repairs each one in place so that it
/// validates: when `fix_length` is set a batch length that does not fit is clamped to the
/// bytes left; when `next_offset` is given, base offsets are made contiguous starting there
/// and leader epochs 0 (what recovery of a single-node segment keeps); then the CRC is
/// recomputed. Stops at the first batch whose framing still fails (garbage
/// tail). Returns the number of bytes of repaired batches.
pub fn repair_batches(bytes: &mut [u8], fix_length: bool, mut next_offset: Option<i64>) -> usize {
    let mut pos = 0;
    while bytes.len() - pos >= HEADER_BYTES {
        let b = &mut bytes[pos..];
        if fix_length {
            let len = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
            let left = (b.len() - LOG_OVERHEAD) as i64;
            let min = (HEADER_BYTES - LOG_OVERHEAD) as i64;
            if i64::from(len) < min || i64::from(len) > left {
                // Keep the fuzzer's choice when it fits, else take all that is left.
                let fixed = if left >= min {
                    min + (i64::from(len).unsigned_abs() as i64 % (left - min + 1))
                } else {
                    break;
                };
                b[8..12].copy_from_slice(&(fixed as i32).to_be_bytes());
            }
            b[16] = batch::MAGIC_V2 as u8;
        }
        // The rule recovery applies to stored batches (compaction leaves batches with fewer
        // records than offsets): what it accepts is what must be kept.
        let Ok(header) = batch::check_framing_stored(b) else {
            break;
        };
        let total = header.total_bytes();
        let last_delta = i64::from(header.last_offset_delta.get());
        if let Some(next) = next_offset {
            b[0..8].copy_from_slice(&next.to_be_bytes());
            // Recovery also requires the leader epoch a log without a `leader_epochs` file
            // writes (0): the epoch, like the base offset, is outside the CRC.
            b[12..16].copy_from_slice(&0i32.to_be_bytes());
            next_offset = Some(next.saturating_add(last_delta).saturating_add(1));
        }
        let crc = crc32c::crc32c(&b[CRC_START..total]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        pos += total;
    }
    pos
}

/// A crash of a known, reported bug (see README.md, "Findings"). All the findings so far are
/// fixed; the type stays so that a new finding can be masked the same way while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownIssue {}

/// Upper bound of the offsets the batches framed at the start of `bytes` claim (what a
/// segment recovered from them can span, with base offsets made contiguous from 0). A stored
/// batch may claim far more offsets than it holds records (compaction), so the sum stops
/// before the first batch whose last offset would not fit a segment's 32-bit relative
/// offsets: recovery cuts the segment there.
pub fn offsets_claimed(bytes: &[u8]) -> u64 {
    let mut end = 0u64;
    for (h, _) in batch::Batches::new(bytes) {
        let span = u64::from(h.last_offset_delta.get().max(0) as u32) + 1;
        if end + span - 1 > u64::from(u32::MAX) {
            break;
        }
        end += span;
    }
    end
}

/// Whether a segment made of `bytes` could trip an open relative-offset bug: none is open
/// (segments roll before their 32-bit relative offsets overflow).
pub fn may_wrap_relative_offsets(_bytes: &[u8]) -> Result<(), KnownIssue> {
    Ok(())
}

/// Whether the known issues are to be hit rather than masked (`WEIR_FUZZ_KNOWN=1`).
pub fn known_issues_on() -> bool {
    std::env::var_os("WEIR_FUZZ_KNOWN").is_some()
}

/// `batch::decode_records`; open bugs would come back as `Err` (none is open).
pub fn decode_records_masked(bytes: &[u8]) -> Result<Option<Vec<Record>>, KnownIssue> {
    Ok(batch::decode_records(bytes))
}

thread_local! {
    static EXECUTOR: std::cell::RefCell<Option<glommio::LocalExecutor>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `fut` on this thread's glommio executor (made once, small io_memory): the targets that
/// drive a `Log` on a simulated disk.
pub fn run<T>(fut: impl std::future::Future<Output = T>) -> T {
    EXECUTOR.with(|cell| {
        let mut ex = cell.borrow_mut();
        let ex = ex.get_or_insert_with(|| {
            glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
                .io_memory(256 << 10)
                .make()
                .expect("glommio executor")
        });
        ex.run(fut)
    })
}

/// Writes `bytes` as the whole file at `path` on a simulated disk, synced.
pub async fn write_file(vfs: &weir_storage::io::Vfs, path: &std::path::Path, bytes: &[u8]) {
    use weir_storage::io::BLOCK;
    let f = vfs.open(path, true).await.expect("sim open");
    if !bytes.is_empty() {
        let len = (bytes.len() as u64).div_ceil(BLOCK) * BLOCK;
        let mut buf = f.alloc(len as usize);
        buf.as_mut()[..bytes.len()].copy_from_slice(bytes);
        f.write_at(buf, 0).await.expect("sim write");
    }
    f.truncate(bytes.len() as u64).await.expect("sim truncate");
    f.fdatasync().await.expect("sim sync");
}
