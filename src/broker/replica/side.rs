//! `raft_entries`, the side log of a replica (docs/replication.md §3.2): the Raft entries
//! that are not record batches — the empty entry a new leader appends, a committed move
//! of the log start (DeleteRecords: `replica::log_start`) and an upload to the remote tier
//! (`replica::remote`) — so that they take no Kafka offset. One record each, appended and fdatasync'ed before any later entry is
//! written; `before_offset` is the log end offset when it was appended, which places it
//! exactly among the data batches when the Raft log is rebuilt (`rebuild::Rebuild`).
//!
//! Layout (integers little-endian):
//! ```text
//! record  0..4    body length n (u32)
//!         4..8    CRC-32C of the body (u32)
//!         8..8+n  body: index u64 | term u64 | before_offset u64 | kind u8 | context
//! ```
//! kind 0 = empty (a leader's first entry of its term; no context); kind 1 = an entry with no
//! data whose raft-rs `context` holds a command (the log start move of `replica::log_start`,
//! the upload of `replica::remote`), `context` = the rest of the body. Others are refused (membership
//! changes are not built); an older weir reads a kind-1 record as damage and cuts the side
//! log there, so a downgrade across this format is not supported. A torn or corrupt tail — a crash mid-append, never reported
//! persisted — is cut at the last whole record when the file is read back. Truncation (a
//! follower's uncommitted suffix replaced by a new leader) cuts the file at the first record
//! whose index is cut, and fdatasyncs, before anything new is appended.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

pub const SIDE_FILE: &str = "raft_entries";
const RECORD_HEAD_BYTES: usize = 8;
const BODY_FIXED_BYTES: usize = 25;
/// Largest body read back (contexts are a few bytes).
const MAX_BODY_BYTES: usize = 1 << 20;
const KIND_EMPTY: u8 = 0;
const KIND_CONTEXT: u8 = 1;

/// One Raft-only entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideEntry {
    pub index: u64,
    pub term: u64,
    /// The log end offset when it was appended.
    pub before_offset: u64,
    /// The raft-rs entry's context (empty for a leader's empty entry).
    pub context: Vec<u8>,
}

impl SideEntry {
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(BODY_FIXED_BYTES + self.context.len());
        body.extend_from_slice(&self.index.to_le_bytes());
        body.extend_from_slice(&self.term.to_le_bytes());
        body.extend_from_slice(&self.before_offset.to_le_bytes());
        if self.context.is_empty() {
            body.push(KIND_EMPTY);
        } else {
            body.push(KIND_CONTEXT);
            body.extend_from_slice(&self.context);
        }
        let mut out = Vec::with_capacity(RECORD_HEAD_BYTES + body.len());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn decode_body(body: &[u8]) -> Result<SideEntry, String> {
        if body.len() < BODY_FIXED_BYTES {
            return Err(format!("side entry body of {} bytes", body.len()));
        }
        let context = match body[24] {
            KIND_EMPTY if body.len() == BODY_FIXED_BYTES => Vec::new(),
            KIND_CONTEXT if body.len() > BODY_FIXED_BYTES => body[BODY_FIXED_BYTES..].to_vec(),
            kind => {
                return Err(format!(
                    "side entry of kind {kind} with a body of {} bytes",
                    body.len()
                ))
            }
        };
        let u = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
        Ok(SideEntry {
            index: u(0),
            term: u(8),
            before_offset: u(16),
            context,
        })
    }
}

/// The commands among `entries` up to `applied` that a reopening replica carries out again
/// (committed before a crash, perhaps not carried out): the highest log start move
/// (`replica::log_start`) past `log_start`, and every upload to the remote tier in order
/// (`replica::remote`; listing one already listed changes nothing). The side log keeps them
/// below the snapshot point too.
pub fn commands_to_redo(
    entries: &[SideEntry],
    applied: u64,
    log_start: u64,
) -> (Option<u64>, Vec<weir_storage::tier::RemoteSegment>) {
    let upto = || entries.iter().filter(move |s| s.index <= applied);
    let cut = upto()
        .filter_map(|s| super::log_start::decode(&s.context))
        .max()
        .filter(|&o| o > log_start);
    let uploads = upto()
        .filter_map(|s| super::remote::decode(&s.context))
        .collect();
    (cut, uploads)
}

/// Decodes the whole records of a side log's bytes, in order, each with its file position;
/// stops at the first torn or corrupt record (and at a record whose index does not grow).
/// Returns them and the length of the good prefix.
pub fn scan(bytes: &[u8]) -> (Vec<(SideEntry, u64)>, u64) {
    let mut out: Vec<(SideEntry, u64)> = Vec::new();
    let mut pos = 0usize;
    while bytes.len() - pos >= RECORD_HEAD_BYTES {
        let n = u32::from_le_bytes(bytes[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().expect("4 bytes"));
        if n > MAX_BODY_BYTES || bytes.len() - pos - RECORD_HEAD_BYTES < n {
            break;
        }
        let body = &bytes[pos + RECORD_HEAD_BYTES..pos + RECORD_HEAD_BYTES + n];
        if crc32c::crc32c(body) != crc {
            break;
        }
        let Ok(e) = SideEntry::decode_body(body) else {
            break;
        };
        if out.last().is_some_and(|(prev, _)| prev.index >= e.index) {
            break;
        }
        out.push((e, pos as u64));
        pos += RECORD_HEAD_BYTES + n;
    }
    (out, pos as u64)
}

/// The side log file of one replica, with its records and their positions (blocking calls:
/// run them on the blocking pool).
pub struct SideLog {
    file: File,
    pub entries: Vec<(SideEntry, u64)>,
    len: u64,
}

impl SideLog {
    /// Opens (creating) `dir/raft_entries`, reads its records back and cuts a torn tail.
    pub fn open_sync(dir: &Path) -> std::io::Result<SideLog> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(SIDE_FILE))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (entries, len) = scan(&bytes);
        if len < bytes.len() as u64 {
            tracing::warn!(dir = %dir.display(), kept = len, found = bytes.len(),
                "cutting a torn tail of the Raft side log");
            file.set_len(len)?;
            file.sync_data()?;
        }
        file.seek(SeekFrom::Start(len))?;
        Ok(SideLog { file, entries, len })
    }

    /// Appends `e` and fdatasyncs.
    pub fn append_sync(&mut self, e: SideEntry) -> std::io::Result<()> {
        let bytes = e.encode();
        self.file.write_all(&bytes)?;
        self.file.sync_data()?;
        self.entries.push((e, self.len));
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Removes every record of index `from` or above (cut, fdatasync'ed).
    pub fn truncate_sync(&mut self, from: u64) -> std::io::Result<()> {
        let Some(i) = self.entries.iter().position(|(e, _)| e.index >= from) else {
            return Ok(());
        };
        let pos = self.entries[i].1;
        self.file.set_len(pos)?;
        self.file.sync_data()?;
        self.file.seek(SeekFrom::Start(pos))?;
        self.entries.truncate(i);
        self.len = pos;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u64, term: u64, before_offset: u64) -> SideEntry {
        SideEntry {
            index,
            term,
            before_offset,
            context: Vec::new(),
        }
    }

    #[test]
    fn an_entry_with_a_context_reads_back_whole() {
        let with = SideEntry {
            context: b"weir.log_start\0\0\0\0\0\0\0\x2a".to_vec(),
            ..e(7, 3, 90)
        };
        let mut bytes = e(5, 2, 40).encode();
        bytes.extend(with.encode());
        bytes.extend(e(8, 3, 90).encode());
        let (all, len) = scan(&bytes);
        assert_eq!(len, bytes.len() as u64);
        let got: Vec<SideEntry> = all.into_iter().map(|x| x.0).collect();
        assert_eq!(got, vec![e(5, 2, 40), with.clone(), e(8, 3, 90)]);
        // A kind-0 record with extra bytes, or a kind-1 record without any, is damage.
        let mut bad = e(9, 3, 90).encode();
        bad[8 + 24] = KIND_CONTEXT;
        let crc = crc32c::crc32c(&bad[8..]);
        bad[4..8].copy_from_slice(&crc.to_le_bytes());
        assert!(scan(&bad).0.is_empty());
        let mut bad = with.encode();
        bad[8 + 24] = KIND_EMPTY;
        let crc = crc32c::crc32c(&bad[8..]);
        bad[4..8].copy_from_slice(&crc.to_le_bytes());
        assert!(scan(&bad).0.is_empty());
    }

    #[test]
    fn scan_keeps_the_whole_records_and_stops_at_damage() {
        let mut bytes = Vec::new();
        for x in [e(1, 1, 0), e(5, 2, 40), e(9, 3, 90)] {
            bytes.extend(x.encode());
        }
        let (all, len) = scan(&bytes);
        assert_eq!(len, bytes.len() as u64);
        assert_eq!(all.len(), 3);
        assert_eq!(all[1].0, e(5, 2, 40));
        // A torn tail: every cut keeps exactly the records wholly before it.
        let rec = bytes.len() / 3;
        for cut in 0..bytes.len() {
            let (kept, len) = scan(&bytes[..cut]);
            assert_eq!(kept.len(), cut / rec, "cut at {cut}");
            assert_eq!(len as usize, kept.len() * rec);
        }
        // A flipped byte in the second record: only the first is kept.
        for i in rec..2 * rec {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert_eq!(scan(&b).0.len(), 1, "byte {i}");
        }
        // Garbage is no record at all.
        assert!(scan(&[0xff; 100]).0.is_empty());
        // An index that does not grow ends the log.
        let mut back = e(9, 3, 90).encode();
        back.extend(e(2, 3, 90).encode());
        assert_eq!(scan(&back).0.len(), 1);
    }

    #[test]
    fn append_truncate_reopen() {
        let dir = std::env::temp_dir().join(format!("weir-side-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = SideLog::open_sync(&dir).unwrap();
        for x in [e(1, 1, 0), e(4, 2, 30), e(7, 3, 50)] {
            s.append_sync(x).unwrap();
        }
        s.truncate_sync(4).unwrap();
        s.append_sync(e(4, 4, 30)).unwrap();
        drop(s);
        // A torn record at the end (a crash mid-append) is cut at the reopen.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(SIDE_FILE))
            .unwrap();
        f.write_all(&e(5, 4, 31).encode()[..10]).unwrap();
        drop(f);
        let s = SideLog::open_sync(&dir).unwrap();
        let got: Vec<SideEntry> = s.entries.iter().map(|x| x.0.clone()).collect();
        assert_eq!(got, vec![e(1, 1, 0), e(4, 4, 30)]);
        assert_eq!(
            std::fs::metadata(dir.join(SIDE_FILE)).unwrap().len(),
            2 * e(1, 1, 0).encode().len() as u64
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
