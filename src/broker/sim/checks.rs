//! What a run checks: after every step, terms never go back, one leader per term, committed
//! prefixes agree; at the end, convergence, every acknowledged record where it was
//! acknowledged, no idempotent batch twice.

use raft::StateRole;

use super::*;

impl World {
    /// The invariants that hold at every step.
    pub(super) async fn check_step(&mut self) -> Result<(), String> {
        for (id, r, _) in self.ups() {
            let (term, leader) = {
                let raw = r.raw.borrow();
                (raw.raft.term, raw.raft.state == StateRole::Leader)
            };
            let b = self.broker_mut(id);
            if term < b.term {
                return Err(format!(
                    "broker {id}: term went back from {} to {term}",
                    b.term
                ));
            }
            b.term = term;
            if leader {
                match self.leaders.insert(term, id) {
                    Some(other) if other != id => {
                        return Err(format!("two leaders in term {term}: {other} and {id}"))
                    }
                    None => self.stats.elections += 1,
                    _ => {}
                }
            }
            self.check_committed(id, &r).await?;
        }
        Ok(())
    }

    /// The replica's committed batches from where it was last checked agree with the
    /// history (and extend it).
    pub(super) async fn check_committed(&mut self, id: u64, r: &Replica) -> Result<(), String> {
        let log = r.log();
        let w = log.watermarks();
        let hw = w.high_watermark;
        if w.log_start_offset > self.broker(id).end {
            self.stats.installs += 1;
        }
        self.broker_mut(id).end = w.log_end_offset;
        let mut at = self.broker(id).checked.max(w.log_start_offset).min(hw);
        while at < hw {
            let read = log
                .read(at, 1 << 20)
                .await
                .map_err(|e| format!("broker {id}: reading committed offset {at}: {e}"))?;
            let Some(next) = read.next_offset() else {
                break;
            };
            for (h, bytes) in read.batches() {
                let base = h.base_offset.get() as u64;
                let bytes = Bytes::copy_from_slice(bytes);
                match self.history.get(&base) {
                    Some(known) if *known != bytes => {
                        return Err(format!(
                            "broker {id}: committed batch at {base} differs from the one committed before"
                        ))
                    }
                    Some(_) => {}
                    None => {
                        self.history.insert(base, bytes);
                    }
                }
            }
            at = next.min(hw);
        }
        let b = self.broker_mut(id);
        b.checked = b.checked.max(at);
        self.stats.committed = self.stats.committed.max(hw);
        Ok(())
    }

    /// After the faults: everyone up, the network whole; the replicas must converge and hold
    /// every acknowledged record, and no idempotent batch twice.
    pub(super) async fn settle(&mut self) -> Result<(), String> {
        self.cut.clear();
        for id in BROKERS {
            if self.broker(id).up.is_none() {
                self.start(id).await?;
            }
        }
        for _ in 0..600 {
            self.step(false).await?;
            if self.converged() && self.inflight.is_empty() && self.unacked.is_none() {
                break;
            }
        }
        if let Some((seq, _)) = &self.unacked {
            let at = self.inflight.first().map(|f| f.broker);
            return Err(format!(
                "the producer's batch at sequence {seq} was not acknowledged within 60 s of healing (in flight at {at:?})"
            ));
        }
        if !self.converged() {
            let ends: Vec<_> = self
                .ups()
                .iter()
                .map(|(id, r, _)| (*id, r.log().watermarks()))
                .collect();
            return Err(format!(
                "the replicas did not converge within 60 s of healing: {ends:?}"
            ));
        }
        // Every replica's whole log is the committed history.
        for (id, r, _) in self.ups() {
            self.broker_mut(id).checked = r.log().watermarks().log_start_offset;
            self.check_committed(id, &r).await?;
        }
        let end = self.ups()[0].1.log().watermarks().log_end_offset;
        let mut next = 0;
        for (base, bytes) in &self.history {
            if *base != next {
                return Err(format!(
                    "the committed history has a gap at {next}: next batch at {base}"
                ));
            }
            let h =
                weir_storage::batch::BatchHeader::parse(bytes).ok_or("a batch without a header")?;
            next = base + h.last_offset_delta.get() as u64 + 1;
        }
        if next != end {
            return Err(format!(
                "the committed history ends at {next}, the logs at {end}"
            ));
        }
        // Every record once, in order, and every acknowledged one where it was acknowledged.
        let mut seen: BTreeMap<u64, String> = BTreeMap::new();
        let mut values = std::collections::HashSet::new();
        for (base, bytes) in &self.history {
            let records = weir_storage::batch::decode_records(bytes)
                .ok_or_else(|| format!("a committed batch at {base} does not decode"))?;
            for (i, rec) in records.iter().enumerate() {
                let value =
                    String::from_utf8_lossy(rec.value.as_deref().unwrap_or_default()).to_string();
                if !values.insert(value.clone()) {
                    return Err(format!(
                        "{value:?} is in the log twice (at {} too)",
                        base + i as u64
                    ));
                }
                seen.insert(base + i as u64, value);
            }
        }
        for (offset, value) in &self.acked {
            match seen.get(offset) {
                Some(v) if v == value => {}
                other => {
                    return Err(format!(
                        "acknowledged {value:?} at {offset}, the log has {other:?} there"
                    ))
                }
            }
        }
        Ok(())
    }

    pub(super) fn converged(&self) -> bool {
        let ends: Vec<_> = self
            .ups()
            .iter()
            .map(|(_, r, _)| {
                let w = r.log().watermarks();
                (w.log_end_offset, w.high_watermark)
            })
            .collect();
        ends.len() == BROKERS.len()
            && ends
                .iter()
                .all(|&(end, hw)| end == hw && (end, hw) == ends[0])
    }
}
