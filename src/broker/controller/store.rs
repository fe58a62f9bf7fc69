//! The metadata group's Raft log on disk: `DATA_DIR/metadata-raft.log`, an append-only file
//! of records, each fdatasync'ed before raft-rs is told it is persisted (so a restart never
//! loses a committed entry, and never forgets a vote it gave in a term).
//!
//! Layout:
//! ```text
//! header   0..8   magic "WEIRRAFT"
//!          8..12  format version (u32 LE) = 1
//! record   0..4   body length (u32 LE)
//!          4..8   CRC-32C of kind + body (u32 LE)
//!          8      kind: 1 = Entry, 2 = HardState
//!          9..    body: the raft-rs protobuf encoding
//! ```
//! An entry with index i replaces every entry from i on (a follower's log was overwritten by
//! a new leader), exactly as raft-rs's `MemStorage::append` does; the last HardState wins.
//! A torn or corrupt tail (a crash mid-write) is cut at the last whole record: it was never
//! reported persisted. The log is never compacted (metadata changes are rare; a few hundred
//! bytes each).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::prelude::{Entry, HardState};

pub const LOG_FILE: &str = "metadata-raft.log";
const MAGIC: &[u8; 8] = b"WEIRRAFT";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 12;
const RECORD_HEADER_BYTES: usize = 9;
const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
/// Largest record body read back (an entry is one admin request's records).
const MAX_BODY_BYTES: usize = 64 << 20;

/// What a restart finds: the entries (contiguous from index 1), the last hard state, and the
/// file opened for appending after the last whole record.
pub struct Loaded {
    pub entries: Vec<Entry>,
    pub hard_state: HardState,
    pub file: File,
}

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(LOG_FILE)
}

/// Reads the log (creating it if missing) on the main thread, before the executors start.
pub fn load(data_dir: &Path) -> Result<Loaded, String> {
    let path = path(data_dir);
    let ctx = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(ctx)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(ctx)?;
    if bytes.len() < HEADER_BYTES {
        // New (or torn while being created): start it.
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&VERSION.to_le_bytes());
        file.set_len(0).map_err(ctx)?;
        file.seek(SeekFrom::Start(0)).map_err(ctx)?;
        file.write_all(&header).map_err(ctx)?;
        file.sync_all().map_err(ctx)?;
        if let Some(dir) = path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(ctx)?;
        }
        return Ok(Loaded {
            entries: Vec::new(),
            hard_state: HardState::default(),
            file,
        });
    }
    let (entries, hard_state, valid) =
        decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if valid < bytes.len() {
        tracing::warn!(path = %path.display(), kept = valid, dropped = bytes.len() - valid,
            "metadata Raft log: cutting a torn tail (never reported persisted)");
        file.set_len(valid as u64).map_err(ctx)?;
        file.sync_all().map_err(ctx)?;
    }
    file.seek(SeekFrom::Start(valid as u64)).map_err(ctx)?;
    Ok(Loaded {
        entries,
        hard_state,
        file,
    })
}

/// Decodes a whole log file: its entries, last hard state, and the length of its valid
/// prefix. Only a wrong header or a gap in the entries' indexes is an error.
pub fn decode(bytes: &[u8]) -> Result<(Vec<Entry>, HardState, usize), String> {
    if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
        return Err("not a weir metadata Raft log (bad magic)".into());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("unsupported metadata Raft log version {version}"));
    }
    let mut entries: Vec<Entry> = Vec::new();
    let mut hard_state = HardState::default();
    let mut at = HEADER_BYTES;
    while bytes.len() - at >= RECORD_HEADER_BYTES {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        if len > MAX_BODY_BYTES || bytes.len() - at - RECORD_HEADER_BYTES < len {
            break;
        }
        let kind_and_body = &bytes[at + 8..at + RECORD_HEADER_BYTES + len];
        if crc32c::crc32c(kind_and_body) != crc {
            break;
        }
        let body = &kind_and_body[1..];
        match kind_and_body[0] {
            KIND_ENTRY => {
                let Ok(e) = Entry::parse_from_bytes(body) else {
                    break;
                };
                while entries.last().is_some_and(|l| l.index >= e.index) {
                    entries.pop();
                }
                let expected = entries.last().map_or(e.index, |l| l.index + 1);
                if e.index != expected || e.index == 0 {
                    return Err(format!(
                        "entry {} follows entry {} (a gap)",
                        e.index,
                        expected.saturating_sub(1)
                    ));
                }
                entries.push(e);
            }
            KIND_HARD_STATE => {
                let Ok(hs) = HardState::parse_from_bytes(body) else {
                    break;
                };
                hard_state = hs;
            }
            _ => break,
        }
        at += RECORD_HEADER_BYTES + len;
    }
    Ok((entries, hard_state, at))
}

/// The records for `entries` and `hard_state`, ready to append.
pub fn encode(entries: &[Entry], hard_state: Option<&HardState>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut push = |kind: u8, body: Vec<u8>| {
        let mut kind_and_body = Vec::with_capacity(body.len() + 1);
        kind_and_body.push(kind);
        kind_and_body.extend_from_slice(&body);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&kind_and_body).to_le_bytes());
        out.extend_from_slice(&kind_and_body);
    };
    for e in entries {
        push(KIND_ENTRY, e.write_to_bytes().expect("an entry encodes"));
    }
    if let Some(hs) = hard_state {
        push(
            KIND_HARD_STATE,
            hs.write_to_bytes().expect("a hard state encodes"),
        );
    }
    out
}

/// Appends and fdatasyncs (on the blocking pool: the caller runs on core 0).
pub fn append_sync(file: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Default::default()
        }
    }

    fn header() -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&VERSION.to_le_bytes());
        h
    }

    /// A later entry replaces the suffix from its index; the last hard state wins; a torn
    /// tail is cut at the last whole record.
    #[test]
    fn replay_overwrites_and_cuts_torn_tail() {
        let hs = HardState {
            term: 2,
            vote: 3,
            commit: 1,
            ..Default::default()
        };
        let mut bytes = header();
        bytes.extend(encode(
            &[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")],
            None,
        ));
        bytes.extend(encode(&[entry(2, 2, b"B")], Some(&hs)));
        let whole = bytes.len();
        let (entries, got_hs, valid) = decode(&bytes).unwrap();
        assert_eq!(valid, whole);
        assert_eq!(
            entries
                .iter()
                .map(|e| (e.index, e.term))
                .collect::<Vec<_>>(),
            [(1, 1), (2, 2)]
        );
        assert_eq!(&entries[1].data[..], b"B");
        assert_eq!(got_hs, hs);
        // Every cut inside the last record (or a flipped byte in it) drops only that record.
        let last = encode(&[entry(3, 2, b"C")], None);
        for cut in 0..last.len() {
            let mut torn = bytes.clone();
            torn.extend_from_slice(&last[..cut]);
            let (entries, _, valid) = decode(&torn).unwrap();
            assert_eq!(valid, whole, "cut at {cut}");
            assert_eq!(entries.len(), 2);
        }
        let mut flipped = bytes.clone();
        flipped.extend_from_slice(&last);
        let n = flipped.len();
        flipped[n - 1] ^= 0xff;
        assert_eq!(decode(&flipped).unwrap().2, whole);
        flipped[n - 1] ^= 0xff;
        assert_eq!(decode(&flipped).unwrap().0.len(), 3);
    }

    #[test]
    fn refuses_foreign_files_and_gaps() {
        assert!(decode(b"something else").is_err());
        let mut bytes = header();
        bytes.extend(encode(&[entry(1, 1, b"a"), entry(3, 1, b"c")], None));
        assert!(decode(&bytes).unwrap_err().contains("gap"));
    }

    #[test]
    fn load_creates_then_appends() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = load(dir.path()).unwrap();
        assert!(l.entries.is_empty());
        append_sync(&mut l.file, &encode(&[entry(1, 1, b"x")], None)).unwrap();
        drop(l);
        let l = load(dir.path()).unwrap();
        assert_eq!(l.entries.len(), 1);
    }
}
