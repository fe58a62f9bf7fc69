//! `raft_state`, one per replica (docs/replication.md §3.3): the Raft `HardState` (term,
//! vote, commit), the `ConfState` (voters, learners) and the snapshot point (the Raft index,
//! its term, and the Kafka offset below which everything is the snapshot). Small, replaced
//! whole: written to `raft_state.tmp`, fdatasync'ed, renamed over `raft_state`, the directory
//! fsync'ed — on the blocking pool, never on a reactor (`save`).
//!
//! Layout (all integers little-endian):
//! ```text
//! 0..4    magic "WRST"
//! 4       format version = 1
//! 5..9    body length n (u32)
//! 9..9+n  body:
//!           term u64 | vote u64 | commit u64
//!           snapshot index u64 | snapshot term u64 | snapshot offset u64
//!           voters count u32 | voters u64 ... | learners count u32 | learners u64 ...
//! 9+n..   CRC-32C of bytes 0..9+n (u32)
//! ```
//! A file that does not decode (torn by a crash between write and rename cannot happen: the
//! rename is atomic; corrupted by the disk can) is an error naming what is wrong, never a
//! guess: a replica that forgot its vote could vote twice in a term.

use std::path::{Path, PathBuf};

pub const STATE_FILE: &str = "raft_state";
const MAGIC: &[u8; 4] = b"WRST";
const VERSION: u8 = 1;
const HEAD_BYTES: usize = 9;
/// Most voters plus learners a file may list (a replication factor is far below it).
const MAX_MEMBERS: usize = 1024;

/// Where raft-rs's log starts: entries up to `index` (of term `term`) are compacted away,
/// and every Kafka offset below `offset` belongs to them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotPoint {
    pub index: u64,
    pub term: u64,
    pub offset: u64,
}

/// The contents of `raft_state`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftState {
    pub term: u64,
    pub vote: u64,
    pub commit: u64,
    pub snapshot: SnapshotPoint,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
}

impl RaftState {
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(64 + 8 * (self.voters.len() + self.learners.len()));
        for v in [
            self.term,
            self.vote,
            self.commit,
            self.snapshot.index,
            self.snapshot.term,
            self.snapshot.offset,
        ] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        for list in [&self.voters, &self.learners] {
            body.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for id in list {
                body.extend_from_slice(&id.to_le_bytes());
            }
        }
        let mut out = Vec::with_capacity(HEAD_BYTES + body.len() + 4);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<RaftState, String> {
        if bytes.len() < HEAD_BYTES + 4 {
            return Err(format!("{STATE_FILE}: {} bytes, too short", bytes.len()));
        }
        if &bytes[..4] != MAGIC {
            return Err(format!("{STATE_FILE}: bad magic"));
        }
        if bytes[4] != VERSION {
            return Err(format!("{STATE_FILE}: unknown format version {}", bytes[4]));
        }
        let n = u32::from_le_bytes(bytes[5..9].try_into().expect("4 bytes")) as usize;
        if bytes.len() != HEAD_BYTES + n + 4 {
            return Err(format!(
                "{STATE_FILE}: {} bytes, the header says {}",
                bytes.len(),
                HEAD_BYTES + n + 4
            ));
        }
        let crc = u32::from_le_bytes(bytes[HEAD_BYTES + n..].try_into().expect("4 bytes"));
        if crc != crc32c::crc32c(&bytes[..HEAD_BYTES + n]) {
            return Err(format!("{STATE_FILE}: CRC mismatch"));
        }
        let mut r = Reader {
            b: &bytes[HEAD_BYTES..HEAD_BYTES + n],
        };
        let mut s = RaftState {
            term: r.u64()?,
            vote: r.u64()?,
            commit: r.u64()?,
            snapshot: SnapshotPoint {
                index: r.u64()?,
                term: r.u64()?,
                offset: r.u64()?,
            },
            ..Default::default()
        };
        s.voters = r.list()?;
        s.learners = r.list()?;
        if !r.b.is_empty() {
            return Err(format!("{STATE_FILE}: {} trailing bytes", r.b.len()));
        }
        if s.commit < s.snapshot.index {
            return Err(format!(
                "{STATE_FILE}: commit {} below the snapshot index {}",
                s.commit, s.snapshot.index
            ));
        }
        Ok(s)
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// Reads `dir/raft_state` (blocking: call it on the blocking pool or before the reactor
    /// serves); `None` if there is none yet (a new replica).
    pub fn load_sync(dir: &Path) -> Result<Option<RaftState>, String> {
        match std::fs::read(Self::path(dir)) {
            Ok(b) => Self::decode(&b).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", Self::path(dir).display())),
        }
    }

    /// Replaces `dir/raft_state` durably (blocking: temp file, fdatasync, rename, directory
    /// fsync).
    pub fn save_sync(&self, dir: &Path) -> Result<(), String> {
        use std::io::Write;
        let tmp = dir.join(format!("{STATE_FILE}.tmp"));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&self.encode())?;
            f.sync_data()?;
            drop(f);
            std::fs::rename(&tmp, Self::path(dir))?;
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| format!("writing {}: {e}", Self::path(dir).display()))
    }

    /// `save_sync` on the blocking pool: the reactor keeps serving while it runs.
    pub async fn save(&self, dir: &Path) -> Result<(), String> {
        let (state, dir) = (self.clone(), dir.to_path_buf());
        weir_storage::io::off_reactor(move || state.save_sync(&dir)).await
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl Reader<'_> {
    fn u64(&mut self) -> Result<u64, String> {
        let (v, rest) = self
            .b
            .split_first_chunk::<8>()
            .ok_or_else(|| format!("{STATE_FILE}: body cut short"))?;
        self.b = rest;
        Ok(u64::from_le_bytes(*v))
    }

    fn list(&mut self) -> Result<Vec<u64>, String> {
        let (n, rest) = self
            .b
            .split_first_chunk::<4>()
            .ok_or_else(|| format!("{STATE_FILE}: body cut short"))?;
        self.b = rest;
        let n = u32::from_le_bytes(*n) as usize;
        if n > MAX_MEMBERS {
            return Err(format!("{STATE_FILE}: {n} members"));
        }
        (0..n).map(|_| self.u64()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RaftState {
        RaftState {
            term: 7,
            vote: 2,
            commit: 41,
            snapshot: SnapshotPoint {
                index: 30,
                term: 5,
                offset: 1200,
            },
            voters: vec![1, 2, 3],
            learners: vec![],
        }
    }

    #[test]
    fn roundtrip_and_every_damage_is_an_error() {
        let s = sample();
        let bytes = s.encode();
        assert_eq!(RaftState::decode(&bytes).unwrap(), s);
        // Every truncation and every single flipped byte is refused, never misread.
        for cut in 0..bytes.len() {
            assert!(RaftState::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x41;
            assert!(RaftState::decode(&b).is_err(), "byte {i} flipped");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(RaftState::decode(&long).is_err());
    }

    #[test]
    fn commit_below_the_snapshot_is_refused() {
        let mut s = sample();
        s.commit = 3;
        assert!(RaftState::decode(&s.encode())
            .unwrap_err()
            .contains("below the snapshot"));
    }

    #[test]
    fn save_replaces_and_load_reads_back() {
        let dir = std::env::temp_dir().join(format!("weir-raft-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(RaftState::load_sync(&dir).unwrap(), None);
        let mut s = sample();
        s.save_sync(&dir).unwrap();
        s.term = 8;
        s.save_sync(&dir).unwrap();
        assert_eq!(RaftState::load_sync(&dir).unwrap(), Some(s));
        assert!(!dir.join("raft_state.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
