//! A replicated partition's Raft log written: a `Ready`'s entries appended to the segment
//! files (batches, with `Log::append_assigned`) and to the side log (Raft-only entries), a
//! conflicting suffix cut from both first (docs/replication.md §3.2, §3.5; the ordering that
//! makes each crash safe is in "Step 3 as built").

use raft::prelude::Entry;
use tracing::info;

use super::replication::Group;
use super::*;
use crate::broker::replica::side::{SideEntry, SideLog};
use crate::broker::replica::store;

impl Shard {
    /// Writes a `Ready`'s entries: cuts a conflicting suffix first (`truncate_to` and the
    /// side log), then appends each entry — batches with `append_assigned`, empty entries
    /// to the side log — and records where each ends.
    pub(super) async fn persist_entries(
        &self,
        g: &Rc<Group>,
        entries: Vec<Entry>,
    ) -> Result<(), String> {
        let Some(first) = entries.first().map(|e| e.index) else {
            return Ok(());
        };
        if first <= g.store.last() {
            let offset = g.store.start_of(first);
            info!(topic = %g.topic, partition = g.partition, index = first, offset,
                "replacing a suffix of the Raft log a new leader does not have");
            g.part
                .log
                .truncate_to(offset)
                .await
                .map_err(|e| format!("truncating to {offset}: {e}"))?;
            self.side_op(g, move |s| s.truncate_sync(first)).await?;
            g.next_offset.set(None);
        }
        let mut at = g.store.start_of(first);
        let mut unflushed = false;
        // Consecutive batches are appended in one `append_assigned` (one write, not one
        // write awaited per entry: a follower's MsgAppend holds up to 1 MiB of entries).
        let mut run: Vec<&Entry> = Vec::new();
        for e in &entries {
            if e.data.is_empty() {
                self.append_run(g, &mut run).await?;
                if unflushed {
                    // The side entry names the offset it follows: the batches before it must
                    // not be lost in a power loss that keeps it.
                    g.part
                        .log
                        .flush()
                        .await
                        .map_err(|e| format!("flush: {e}"))?;
                    unflushed = false;
                }
                let side = SideEntry {
                    index: e.index,
                    term: e.term,
                    before_offset: at,
                    context: e.context.to_vec(),
                };
                self.side_op(g, move |s| s.append_sync(side)).await?;
            } else {
                let (_, end) = store::check_data_entry(e, at)?;
                run.push(e);
                at = end;
                unflushed = true;
            }
        }
        self.append_run(g, &mut run).await?;
        g.store.append(&entries)
    }

    /// Appends a run of checked, consecutive data entries with one `append_assigned` (the
    /// batches copied into one buffer when there are several) and empties it.
    async fn append_run(&self, g: &Group, run: &mut Vec<&Entry>) -> Result<(), String> {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            return Ok(());
        };
        let (from, to) = (first.index, last.index);
        let data = if run.len() == 1 {
            first.data.clone()
        } else {
            let mut b = bytes::BytesMut::with_capacity(run.iter().map(|e| e.data.len()).sum());
            for e in run.iter() {
                b.extend_from_slice(&e.data);
            }
            b.freeze()
        };
        run.clear();
        g.part
            .log
            .append_assigned(data)
            .await
            .map_err(|err| format!("appending entries {from}-{to}: {err}"))?;
        Ok(())
    }

    /// Runs a side log operation on the blocking pool.
    async fn side_op(
        &self,
        g: &Group,
        op: impl FnOnce(&mut SideLog) -> std::io::Result<()> + Send + 'static,
    ) -> Result<(), String> {
        let mut side = g.side.borrow_mut().take().ok_or("side log in use")?;
        let (side, res) = weir_storage::io::off_reactor(move || {
            let res = op(&mut side);
            (side, res)
        })
        .await;
        *g.side.borrow_mut() = Some(side);
        res.map_err(|e| format!("{}: {e}", g.dir.join("raft_entries").display()))
    }
}
