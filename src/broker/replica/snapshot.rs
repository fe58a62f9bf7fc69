//! Raft snapshots of a replicated partition (docs/replication.md, "Installing a snapshot"):
//! what a leader sends a follower that is behind its log start, and the file that makes the
//! follower's install redoable after a crash.
//!
//! A partition's "state machine" is its log, and retention deleted the log below the leader's
//! snapshot point, so a snapshot carries no data: its metadata is the point (Raft index, term,
//! voters) and its `data` names the Kafka offset where the log continues — the follower
//! restarts its log empty there, as a Kafka follower does with `truncateFullyAndStartAt`.
//!
//! `data` layout (13 bytes): `magic "WSNP" | version u8 = 1 | offset u64 LE`; a tiered
//! partition's: `magic | version u8 = 2 | offset u64 LE | remote manifest` (its
//! `remote_segments` file's bytes, with their own CRC: the follower installs the leader's
//! list of the segments in the store).
//!
//! `snapshot_install` (in the partition directory), written before a follower changes anything
//! and removed once the install is complete; a group that opens with it present does the
//! install again first, so every crash point ends in the installed state. Replaced whole like
//! `raft_state` (temp file, fdatasync, rename, directory fsync); layout, little-endian:
//! ```text
//! 0..4    magic "WSNI"
//! 4       format version = 1
//! 5..29   snapshot index u64 | snapshot term u64 | offset u64
//! 29..33  CRC-32C of bytes 0..29 (u32)
//! ```

use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::state::SnapshotPoint;

pub const INSTALL_FILE: &str = "snapshot_install";
const DATA_MAGIC: &[u8; 4] = b"WSNP";
const DATA_VERSION: u8 = 1;
const DATA_VERSION_TIERED: u8 = 2;
const DATA_BYTES: usize = 13;
const FILE_MAGIC: &[u8; 4] = b"WSNI";
const FILE_VERSION: u8 = 1;
const FILE_BYTES: usize = 33;

/// A snapshot's `data`: the offset where the log continues after it, and (a tiered
/// partition) the remote tier's manifest (version 2; without one version 1, which a weir
/// that predates tiered replicas reads too).
pub fn encode_data(offset: u64, remote_manifest: Option<&[u8]>) -> Bytes {
    let extra = remote_manifest.unwrap_or_default();
    let mut out = Vec::with_capacity(DATA_BYTES + extra.len());
    out.extend_from_slice(DATA_MAGIC);
    out.push(if remote_manifest.is_some() {
        DATA_VERSION_TIERED
    } else {
        DATA_VERSION
    });
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(extra);
    Bytes::from(out)
}

/// What a snapshot's `data` names: the offset, and the remote manifest's bytes if it
/// carries one (checked when installed: `Log::install_remote_manifest`); an error for
/// anything else.
pub fn decode_data(data: &[u8]) -> Result<(u64, Option<&[u8]>), String> {
    let refuse = || {
        format!(
            "a Raft snapshot whose data is not a weir snapshot point ({} bytes)",
            data.len()
        )
    };
    if data.len() < DATA_BYTES || &data[..4] != DATA_MAGIC {
        return Err(refuse());
    }
    let offset = u64::from_le_bytes(data[5..DATA_BYTES].try_into().expect("8 bytes"));
    match data[4] {
        DATA_VERSION if data.len() == DATA_BYTES => Ok((offset, None)),
        DATA_VERSION_TIERED if data.len() > DATA_BYTES => Ok((offset, Some(&data[DATA_BYTES..]))),
        _ => Err(refuse()),
    }
}

pub fn encode_install(p: SnapshotPoint) -> Vec<u8> {
    let mut out = Vec::with_capacity(FILE_BYTES);
    out.extend_from_slice(FILE_MAGIC);
    out.push(FILE_VERSION);
    for v in [p.index, p.term, p.offset] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub fn decode_install(b: &[u8]) -> Result<SnapshotPoint, String> {
    if b.len() != FILE_BYTES || &b[..4] != FILE_MAGIC || b[4] != FILE_VERSION {
        return Err(format!("{INSTALL_FILE}: not a snapshot install record"));
    }
    let crc = u32::from_le_bytes(b[29..].try_into().expect("4 bytes"));
    if crc != crc32c::crc32c(&b[..29]) {
        return Err(format!("{INSTALL_FILE}: CRC mismatch"));
    }
    let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    Ok(SnapshotPoint {
        index: u(5),
        term: u(13),
        offset: u(21),
    })
}

fn path(dir: &Path) -> PathBuf {
    dir.join(INSTALL_FILE)
}

/// The install a crash interrupted, if any (blocking: the blocking pool).
pub fn load_install_sync(dir: &Path) -> Result<Option<SnapshotPoint>, String> {
    match std::fs::read(path(dir)) {
        Ok(b) => decode_install(&b).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("reading {}: {e}", path(dir).display())),
    }
}

/// Names `point` durably before the install changes anything (blocking).
pub fn save_install_sync(dir: &Path, point: SnapshotPoint) -> Result<(), String> {
    use std::io::Write;
    let tmp = dir.join(format!("{INSTALL_FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&encode_install(point))?;
        f.sync_data()?;
        drop(f);
        std::fs::rename(&tmp, path(dir))?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| format!("writing {}: {e}", path(dir).display()))
}

/// Removes the file durably once the install is complete (blocking): a power loss must not
/// bring it back after the replica has appended and acknowledged entries past the point — a
/// redo would delete them.
pub fn remove_install_sync(dir: &Path) -> Result<(), String> {
    let remove = || -> std::io::Result<()> {
        match std::fs::remove_file(path(dir)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::File::open(dir)?.sync_all()
    };
    remove().map_err(|e| format!("removing {}: {e}", path(dir).display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: SnapshotPoint = SnapshotPoint {
        index: 812,
        term: 4,
        offset: 120_345,
    };

    #[test]
    fn data_and_install_file_roundtrip_and_refuse_damage() {
        assert_eq!(
            decode_data(&encode_data(P.offset, None)).unwrap(),
            (P.offset, None)
        );
        let manifest = b"WEIRRSM1 and the rest";
        assert_eq!(
            decode_data(&encode_data(P.offset, Some(manifest))).unwrap(),
            (P.offset, Some(&manifest[..]))
        );
        assert!(
            decode_data(b"").is_err(),
            "an empty snapshot names no offset"
        );
        let mut d = encode_data(7, None).to_vec();
        d[4] = 2;
        assert!(decode_data(&d).is_err(), "version 2 without a manifest");
        d[4] = 3;
        assert!(decode_data(&d).is_err(), "unknown version");
        let mut d = encode_data(7, Some(manifest)).to_vec();
        d[4] = 1;
        assert!(decode_data(&d).is_err(), "version 1 with more bytes");
        let b = encode_install(P);
        assert_eq!(decode_install(&b).unwrap(), P);
        for cut in 0..b.len() {
            assert!(decode_install(&b[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x20;
            assert!(decode_install(&bad).is_err(), "byte {i} flipped");
        }
    }

    #[test]
    fn the_install_file_is_saved_loaded_and_removed() {
        let dir = std::env::temp_dir().join(format!("weir-snapshot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(load_install_sync(&dir).unwrap(), None);
        save_install_sync(&dir, P).unwrap();
        assert_eq!(load_install_sync(&dir).unwrap(), Some(P));
        assert!(!dir.join(format!("{INSTALL_FILE}.tmp")).exists());
        remove_install_sync(&dir).unwrap();
        assert_eq!(load_install_sync(&dir).unwrap(), None);
        remove_install_sync(&dir).expect("removing twice is no error");
        std::fs::write(dir.join(INSTALL_FILE), b"garbage").unwrap();
        assert!(
            load_install_sync(&dir).is_err(),
            "a damaged file is refused"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
