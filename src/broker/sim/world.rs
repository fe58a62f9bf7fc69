//! The simulated world: brokers started, killed and powered off; the network's delays, drops,
//! duplicates, reordering and cut links; each step's ticks and every replica's round.

use std::cell::RefCell;
use std::rc::Rc;

use weir_storage::io::CrashFate;
use weir_storage::{BatchCache, Log, LogConfig};

use super::*;
use crate::broker::raft::rejoin::Shared;
use crate::broker::replica::Opening;

impl World {
    pub(super) fn log(&self, what: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("[step {}] {}", self.step, what());
        }
    }

    pub(super) fn broker(&self, id: u64) -> &Broker {
        &self.brokers[(id - 1) as usize]
    }

    pub(super) fn broker_mut(&mut self, id: u64) -> &mut Broker {
        &mut self.brokers[(id - 1) as usize]
    }

    pub(super) async fn start(&mut self, id: u64) -> Result<(), String> {
        let clock = self.clock.clone();
        let b = self.broker_mut(id);
        // Small segments and retention by size: replicas compact their Raft logs on their
        // own, and a follower that was down behind its leader's log start installs a snapshot.
        let config = LogConfig {
            committed_reads: true,
            segment_bytes: 512,
            retention_bytes: Some(1 << 10),
            ..LogConfig::default()
        };
        let log = Log::open_in(b.disk.vfs(), &b.dir, config, BatchCache::new(1 << 20))
            .await
            .map_err(|e| format!("broker {id}: opening the log: {e}"))?;
        let part: Rc<dyn OwnsLog> = Rc::new(Part { log });
        let opening = Opening {
            topic: "sim",
            partition: 0,
            topic_id: "00000000000000000000000000000001",
            voters: BROKERS.to_vec(),
            here: id,
            rejoin: &Shared::new(None),
            now: clock.get(),
            random_timeouts: false,
        };
        let replica = Replica::open(part, opening)
            .await
            .map_err(|e| format!("broker {id}: opening the replica: {e}"))?;
        b.up = Some(Up {
            replica: Rc::new(replica),
            host: Rc::new(SimHost {
                clock,
                outbox: RefCell::new(Vec::new()),
            }),
        });
        Ok(())
    }

    /// Kills broker `id` (-9), or powers it off (`power`): its unflushed segment writes are
    /// then lost, torn or damaged as the seed decides.
    pub(super) fn crash(&mut self, id: u64, power: bool) {
        let seed = self.rng.next();
        self.inflight.retain(|f| f.broker != id);
        let b = self.broker_mut(id);
        if b.up.take().is_none() {
            return;
        }
        let mut r = Rng(seed);
        b.disk = if power {
            b.disk.crash(|_, _, len| match r.below(4) {
                0 => CrashFate::Kept,
                1 => CrashFate::Lost,
                2 => CrashFate::Torn(r.below(len as u64 + 1) as usize),
                _ => CrashFate::Flipped(r.below(1 << 20) as usize),
            })
        } else {
            b.disk.process_crash()
        };
        self.stats.crashes += 1;
        self.log(|| {
            format!(
                "broker {id} {}",
                if power { "powered off" } else { "killed" }
            )
        });
    }

    pub(super) fn ups(&self) -> Vec<(u64, Rc<Replica>, Rc<SimHost>)> {
        self.brokers
            .iter()
            .filter_map(|b| {
                let up = b.up.as_ref()?;
                Some((b.id, up.replica.clone(), up.host.clone()))
            })
            .collect()
    }

    /// One step: faults, a produce, ticks, deliveries, every replica driven, the produces
    /// polled until nothing moves, the invariants checked.
    pub(super) async fn step(&mut self, faults: bool) -> Result<(), String> {
        self.step += 1;
        self.clock.set(self.clock.get() + TICK);
        if faults {
            self.faults().await?;
        }
        if self.rng.chance(self.knobs.produce) {
            self.produce();
        }
        let now_ms = (self.step * TICK.as_millis() as u64) as i64;
        for (_, r, _) in self.ups() {
            // Clocks drift: a broker now and then misses a tick.
            if self.rng.chance(900) {
                r.raw.borrow_mut().tick();
            }
            // The retention task's clock, on each broker its own.
            if self.rng.chance(self.knobs.retention) {
                r.retention_due.set(Some(now_ms));
            }
        }
        self.deliver(faults);
        self.drive(faults).await?;
        self.poll_produces()?;
        self.check_step().await
    }

    pub(super) async fn faults(&mut self) -> Result<(), String> {
        let down: Vec<u64> = self
            .brokers
            .iter()
            .filter(|b| b.up.is_none())
            .map(|b| b.id)
            .collect();
        if self.rng.chance(self.knobs.crash) && down.len() < 2 {
            let id = 1 + self.rng.below(3);
            let power = self.rng.chance(500);
            self.crash(id, power);
        }
        if let Some(&id) = down.first() {
            if self.rng.chance(60) {
                self.log(|| format!("broker {id} restarts"));
                self.start(id).await?;
            }
        }
        if self.rng.chance(self.knobs.cut) {
            let from = 1 + self.rng.below(3);
            let to = 1 + (from + self.rng.below(2)) % 3;
            self.cut.push((from, to));
            if self.rng.chance(500) {
                self.cut.push((to, from));
            }
            self.log(|| format!("links cut: {:?}", self.cut));
        }
        if !self.cut.is_empty() && self.rng.chance(40) {
            self.cut.clear();
            self.log(|| "network healed".into());
        }
        // A leadership handed over, as the preferred-leader check and a controlled shutdown
        // do: raft-rs sends the new leader what it lacks, which then campaigns at once.
        if self.rng.chance(self.knobs.transfer) {
            let to = 1 + self.rng.below(3);
            if let Some((id, r, _)) = self.ups().into_iter().find(|(_, r, _)| r.is_leader()) {
                if id != to {
                    self.log(|| format!("broker {id} hands its leadership to {to}"));
                    r.wake();
                    r.raw.borrow_mut().transfer_leader(to);
                }
            }
        }
        Ok(())
    }

    /// Hands out the messages sent since the last step, and delivers those due: late ones
    /// in a random order, some dropped, some twice; none over a cut link or to a broker down.
    pub(super) fn deliver(&mut self, faults: bool) {
        for (from, _, host) in self.ups() {
            for msg in host.outbox.borrow_mut().drain(..) {
                let at = self.step
                    + if faults {
                        self.rng.below(self.knobs.delay + 1)
                    } else {
                        0
                    };
                self.net.push((msg.to, Envelope { at, from, msg }));
            }
        }
        let step = self.step;
        let (mut due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.net)
            .into_iter()
            .partition(|(_, e)| e.at <= step);
        self.net = later;
        if faults {
            for i in (1..due.len()).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                due.swap(i, j);
            }
        }
        for (to, e) in due {
            if self.cut.contains(&(e.from, to)) || (faults && self.rng.chance(self.knobs.drop)) {
                continue;
            }
            let twice = faults && self.rng.chance(self.knobs.dup);
            let Some(up) = self.broker(to).up.as_ref() else {
                continue;
            };
            let mut inbox = up.replica.inbox.borrow_mut();
            if twice {
                inbox.push(e.msg.clone());
            }
            inbox.push(e.msg);
        }
    }

    /// Every replica up does its round, as the broker's driver does (`ReplicaHost::drive_one`). Now and
    /// then a broker loses power in the middle of it: its disk takes a few more changes, then
    /// refuses the rest, and the broker is powered off where its round failed.
    pub(super) async fn drive(&mut self, faults: bool) -> Result<(), String> {
        for (id, r, host) in self.ups() {
            let disk = self.broker(id).disk.clone();
            let cut_short = faults && self.rng.chance(self.knobs.power_in_round);
            if cut_short {
                disk.stop_after(self.rng.below(6));
            }
            let res = r
                .round(&*host)
                .await
                .map_err(|e| format!("broker {id}: its round: {e}"));
            if cut_short {
                if res.is_err() && disk.changes_left() == Some(0) {
                    self.log(|| format!("broker {id} loses power in its round: {res:?}"));
                    drop(r);
                    self.crash(id, true);
                    continue;
                }
                disk.stop_after(u64::MAX);
            }
            res?;
        }
        Ok(())
    }
}
