//! Offsets committed inside a transaction (TxnOffsetCommit): kept pending per (producer id,
//! group) until the transaction ends; its commit makes them the group's committed offsets,
//! its abort drops them. Both steps are records of the bucket's offsets log, so a restart
//! between them (even a kill -9) finds the pending offsets again and the coordinator's
//! markers still apply them. Record layout (big-endian), beside `offsets.rs`' kind 1:
//!
//! ```text
//! kind 2, pending offset:  key   kind u8 | producer_id i64 | group len u16 | group | topic len u16 | topic | partition i32
//!                          value as a committed offset (offsets.rs)
//! kind 3, transaction end: key   kind u8 | producer_id i64 | group len u16 | group
//!                          value commit u8 (1 commit, 0 abort)
//! ```

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use weir_storage::batch::RecordBatchBuilder;

use super::{decode_value, encode_value, get_str, now_ms, Committed, Key, OffsetStore};

pub(crate) const KIND_TXN_OFFSET: u8 = 2;
pub(crate) const KIND_TXN_END: u8 = 3;

/// Pending offsets: (producer id, group) → (topic, partition) → offset.
pub(crate) type Pending = BTreeMap<(i64, String), BTreeMap<(String, i32), Committed>>;

fn put_str(k: &mut BytesMut, s: &str) {
    k.put_u16(s.len() as u16);
    k.put_slice(s.as_bytes());
}

pub(super) fn pending_key(pid: i64, group: &str, topic: &str, partition: i32) -> Bytes {
    let mut k = BytesMut::with_capacity(17 + group.len() + topic.len());
    k.put_u8(KIND_TXN_OFFSET);
    k.put_i64(pid);
    put_str(&mut k, group);
    put_str(&mut k, topic);
    k.put_i32(partition);
    k.freeze()
}

pub(super) fn end_key(pid: i64, group: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(11 + group.len());
    k.put_u8(KIND_TXN_END);
    k.put_i64(pid);
    put_str(&mut k, group);
    k.freeze()
}

/// A kind 2 or 3 key: (kind, producer id, group, the topic and partition of a pending
/// offset — `None` for a transaction end).
pub(crate) type TxnKey = (u8, i64, String, Option<(String, i32)>);

/// Decodes a kind 2 or 3 key (`None` for any other or a malformed one).
pub(crate) fn decode_key(mut k: &[u8]) -> Option<TxnKey> {
    if k.remaining() < 9 {
        return None;
    }
    let kind = k.get_u8();
    let pid = k.get_i64();
    let group = get_str(&mut k)?;
    match kind {
        KIND_TXN_OFFSET => {
            let topic = get_str(&mut k)?;
            if k.remaining() != 4 {
                return None;
            }
            Some((kind, pid, group, Some((topic, k.get_i32()))))
        }
        KIND_TXN_END if k.is_empty() => Some((kind, pid, group, None)),
        _ => None,
    }
}

/// Replays one record of kind 2 or 3 (`key[0]`) into `pending` and `entries`.
pub(crate) fn replay(
    key: &[u8],
    value: Option<&[u8]>,
    pending: &mut Pending,
    entries: &mut BTreeMap<Key, Committed>,
) {
    let mut k = key;
    if k.remaining() < 9 {
        return;
    }
    let kind = k.get_u8();
    let pid = k.get_i64();
    let Some(group) = get_str(&mut k) else { return };
    match kind {
        KIND_TXN_OFFSET => {
            let Some(topic) = get_str(&mut k) else { return };
            if k.remaining() != 4 {
                return;
            }
            let partition = k.get_i32();
            if let Some(c) = value.and_then(decode_value) {
                pending
                    .entry((pid, group))
                    .or_default()
                    .insert((topic, partition), c);
            }
        }
        KIND_TXN_END => {
            let offsets = pending.remove(&(pid, group.clone())).unwrap_or_default();
            if value == Some(&[1u8][..]) {
                for ((t, p), c) in offsets {
                    entries.insert((group.clone(), t, p), c);
                }
            }
        }
        _ => {}
    }
}

impl OffsetStore {
    /// Durably records offsets `producer_id`'s transaction commits for `group` (pending
    /// until [`OffsetStore::txn_end`]).
    pub async fn txn_commit(
        &self,
        producer_id: i64,
        group: &str,
        offsets: Vec<(String, i32, Committed)>,
    ) -> Result<(), super::BucketError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut b = RecordBatchBuilder::new(now_ms());
        for (t, p, c) in &offsets {
            b = b.record(
                Some(&pending_key(producer_id, group, t, *p)),
                Some(&encode_value(c)),
                &[],
            );
        }
        self.append_applied(b.build(), |s| {
            let mut pending = s.pending.borrow_mut();
            let mine = pending.entry((producer_id, group.to_owned())).or_default();
            for (t, p, c) in offsets {
                mine.insert((t, p), c);
            }
        })
        .await
    }

    /// Ends `producer_id`'s transaction for `group`: on commit its pending offsets become
    /// the committed ones, on abort they are dropped. Durable before it returns; a
    /// transaction without pending offsets here writes nothing.
    pub async fn txn_end(
        &self,
        producer_id: i64,
        group: &str,
        commit: bool,
    ) -> Result<(), super::BucketError> {
        let key = (producer_id, group.to_owned());
        if !self.pending.borrow().contains_key(&key) {
            return Ok(());
        }
        let batch = RecordBatchBuilder::new(now_ms())
            .record(
                Some(&end_key(producer_id, group)),
                Some(&[u8::from(commit)]),
                &[],
            )
            .build();
        self.append_applied(batch, |s| {
            let offsets = s.pending.borrow_mut().remove(&key).unwrap_or_default();
            if commit {
                let mut e = s.entries.borrow_mut();
                for ((t, p), c) in offsets {
                    e.insert((group.to_owned(), t, p), c);
                }
            }
        })
        .await
    }

    /// Whether an open transaction has a pending offset for this partition of `group`
    /// (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT).
    pub fn has_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.pending
            .borrow()
            .iter()
            .any(|((_, g), o)| g == group && o.contains_key(&(topic.to_owned(), partition)))
    }
}

#[cfg(test)]
mod tests {

    use weir_storage::BatchCache;

    use super::*;

    fn c(offset: i64) -> Committed {
        Committed {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_ms: 0,
        }
    }

    /// Pending offsets survive a restart (a kill -9 between TxnOffsetCommit and the marker);
    /// a commit marker applies them, an abort drops them, also across restarts.
    #[test]
    fn pending_offsets_survive_restarts_and_end_with_their_marker() {
        super::super::run_on_disk(|path| async move {
            let cache = BatchCache::new(8 << 20);
            let open = || OffsetStore::open(&path, 1, cache.clone());
            let s = open().await.expect("open");
            s.commit("g", vec![("t".into(), 0, c(1))])
                .await
                .expect("commit");
            s.txn_commit(7, "g", vec![("t".into(), 0, c(5))])
                .await
                .expect("txn commit");
            s.txn_commit(8, "g", vec![("t".into(), 1, c(9))])
                .await
                .expect("txn commit");
            assert_eq!(s.get("g", "t", 0).map(|c| c.offset), Some(1), "pending");
            assert!(s.has_pending("g", "t", 0) && s.has_pending("g", "t", 1));
            drop(s); // no clean close

            let s = open().await.expect("reopen");
            assert!(s.has_pending("g", "t", 0), "pending after a crash");
            s.txn_end(7, "g", true).await.expect("commit marker");
            s.txn_end(8, "g", false).await.expect("abort marker");
            assert_eq!(s.get("g", "t", 0).map(|c| c.offset), Some(5));
            assert_eq!(s.get("g", "t", 1), None, "aborted");
            drop(s);

            let s = open().await.expect("reopen");
            assert_eq!(s.get("g", "t", 0).map(|c| c.offset), Some(5));
            assert_eq!(s.get("g", "t", 1), None);
            assert!(!s.has_pending("g", "t", 0) && !s.has_pending("g", "t", 1));
            s.close().await.expect("close");
        });
    }
}
