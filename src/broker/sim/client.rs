//! The simulated client: one idempotent producer (acks=all) that resends its pending batch
//! until it is acknowledged, and its produces polled in step with the world.

use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use weir_storage::batch::{Origin, RecordBatchBuilder};

use super::*;
use crate::broker::errors;

impl World {
    /// The client: sends the idempotent producer's pending batch (again, if unacknowledged)
    /// to the broker whose replica says it leads, or to any.
    pub(super) fn produce(&mut self) {
        if !self.inflight.is_empty() {
            return;
        }
        let (seq, values) = match &self.unacked {
            Some(u) => u.clone(),
            None => {
                let n = 1 + self.rng.below(3) as i32;
                let seq = self.next_seq;
                let values = (0..n)
                    .map(|i| format!("record {} {:.<100}", seq + i, ""))
                    .collect();
                self.unacked = Some((seq, values));
                self.unacked.clone().expect("just set")
            }
        };
        let ups = self.ups();
        let Some((id, replica, host)) = ups
            .iter()
            .find(|(_, r, _)| r.is_leader())
            .or_else(|| ups.first())
            .cloned()
        else {
            return;
        };
        let mut b = RecordBatchBuilder::new(1_000).producer(PRODUCER_ID, 0, seq);
        for v in &values {
            b = b.record(None, Some(v.as_bytes()), &[]);
        }
        let batch = b.build();
        let fut: Produce = Box::pin(async move {
            replica
                .produce_checked(&*host, -1, batch, Origin::Client)
                .await
        });
        self.log(|| {
            format!(
                "produce seq {seq} ({} records) to broker {id}",
                values.len()
            )
        });
        self.inflight.push(InFlight {
            broker: id,
            seq,
            fut,
            woken: Arc::new(Flag(AtomicBool::new(true))),
        });
    }

    /// Polls the produces in flight that were woken (or never polled) until none is: a
    /// produce waits only on what a step does, never on the wall clock, so the run does not
    /// depend on how fast it runs; and one whose wake-up was lost stays pending, which the
    /// end of the run reports.
    pub(super) fn poll_produces(&mut self) -> Result<(), String> {
        loop {
            let mut moved = false;
            let mut i = 0;
            while i < self.inflight.len() {
                let f = &mut self.inflight[i];
                if !f.woken.0.swap(false, Ordering::SeqCst) {
                    i += 1;
                    continue;
                }
                moved = true;
                let waker = Waker::from(f.woken.clone());
                match f.fut.as_mut().poll(&mut Context::from_waker(&waker)) {
                    Poll::Ready(r) => {
                        let f = self.inflight.remove(i);
                        self.answered(f.seq, r)?;
                    }
                    Poll::Pending => i += 1,
                }
            }
            if !moved {
                return Ok(());
            }
        }
    }

    /// A produce's answer: acknowledged records are noted; the client retries the same
    /// batch after a retriable error, and any other error is a failure — this producer only
    /// ever resends its pending batch, so it never deserves OUT_OF_ORDER_SEQUENCE_NUMBER.
    pub(super) fn answered(&mut self, seq: i32, r: Result<(u64, u64), i16>) -> Result<(), String> {
        self.log(|| format!("produce seq {seq} answered {r:?}"));
        let (base, last) = match r {
            Ok(offsets) => offsets,
            Err(errors::NOT_LEADER_OR_FOLLOWER | errors::REQUEST_TIMED_OUT) => return Ok(()),
            Err(code) => return Err(format!("produce of sequence {seq} answered error {code}")),
        };
        let Some((s, values)) = self.unacked.take() else {
            return Err(format!("sequence {seq} acknowledged twice"));
        };
        assert_eq!(s, seq, "answered a batch not in flight");
        assert_eq!(last - base + 1, values.len() as u64);
        for (i, v) in values.into_iter().enumerate() {
            self.acked.insert(base + i as u64, v);
        }
        self.next_seq = seq + (last - base + 1) as i32;
        self.stats.acked = self.acked.len();
        Ok(())
    }
}
