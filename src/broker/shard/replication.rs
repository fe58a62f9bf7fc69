//! This core's replicas of replicated partitions (docs/replication.md §3-§6, step 3), and
//! the shard as their [`Host`]: each replica of a partition of replication factor above 1 is a
//! [`Replica`] (`broker::replica`: a raft-rs `RawNode` over the partition's log) on the core
//! that owns the partition, on every replica broker. This file opens them
//! (`Shard::open_replica`) and runs the one driver task per core that ticks them all and
//! drives each that has work (`drive_replica`: step, propose, read back, handle the `Ready`,
//! list uploads, apply retention and cuts); the replica calls back through [`Host`] to send its
//! messages (`raft_route`), report its leadership (`leader_report`) and learn whether the
//! broker is stopping. Produce on the leader is the replica's (`Replica::produce`).
//!
//! The log is opened with `committed_reads`: consumers read up to the Raft commit only
//! (`Log::set_committed`, moved on every `Ready` that commits).

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use raft::prelude::Message;

use super::*;
use crate::broker::errors;
use crate::broker::replica::{Host, Opening, Replica};

/// The partition groups' clock: like the metadata group's (docs/replication.md §6).
const TICK: Duration = Duration::from_millis(100);
/// How often (in ticks) a sleeping leader (`hibernate`) reports its in-sync replicas and
/// checks its preferred leader.
pub(super) const HOUSEKEEPING_TICKS: u64 = 10;

impl Shard {
    /// The replica of a replicated partition on this core.
    pub(super) fn replica(&self, topic: &str, partition: i32) -> Option<Rc<Replica>> {
        self.partition(topic, partition)?.replica()
    }

    /// Starts this core's replica of `topic`-`partition` (its log is open) in a group of
    /// `voters` (`Replica::open`), and the core's driver if it is the first.
    pub(super) async fn open_replica(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        voters: Vec<u64>,
    ) -> Result<(), String> {
        let here = self
            .metadata()
            .local_broker
            .ok_or("a replicated partition on a standalone broker")?;
        let part = self
            .partition(topic, partition)
            .ok_or("the replica's log is not open")?;
        let topic_id = part.topic_id.clone();
        let rejoin = self.rejoin.borrow().clone();
        let opening = Opening {
            topic,
            partition,
            topic_id: &topic_id,
            voters,
            here,
            rejoin: &rejoin,
            now: Instant::now(),
            random_timeouts: true,
        };
        let replica = Rc::new(Replica::open(part.clone(), opening).await?);
        // The partition may have been retired while its replica opened: the replica is then
        // closed at once (left on the retired partition, it would never be driven or closed).
        if !self
            .partition(topic, partition)
            .is_some_and(|now| Rc::ptr_eq(&now, &part))
        {
            replica.failed.set(true);
            replica.fail_waiters(crate::broker::errors::NOT_LEADER_OR_FOLLOWER);
            self.rejoin.borrow().done(&replica.rejoin);
            tracing::debug!(
                topic,
                partition,
                "partition retired while its replica opened; replica closed"
            );
            return Ok(());
        }
        part.set_replica(replica);
        if !self.replica_driver.replace(true) {
            glommio::spawn_local(self.clone().drive_replicas()).detach();
        }
        self.replica_work.notify();
        Ok(())
    }

    /// The driver of this core's groups: every `TICK` drives each group once (`drive_replica`),
    /// one group at a time; a round woken by work arriving drives the groups that have some
    /// (`Replica::has_work`).
    async fn drive_replicas(self: Rc<Self>) {
        let mut next_tick = Instant::now() + TICK;
        let mut ticks = 0u64;
        loop {
            let now = Instant::now();
            if now < next_tick {
                or(
                    self.replica_work.notified(),
                    glommio::timer::sleep(next_tick - now),
                )
                .await;
            }
            if self.shutdown.is_fired() {
                self.fail_all_waiters();
                return;
            }
            let tick = Instant::now() >= next_tick;
            if tick {
                next_tick = Instant::now() + TICK;
            }
            // One group after another. Driving them concurrently was measured (docs/bench.md,
            // "Groups driven concurrently"): full-speed throughput did not move, so the simpler
            // order stays until a mixed load shows a need.
            let groups = self.replicas_now();
            if tick {
                ticks += 1;
            }
            let housekeeping = tick && ticks.is_multiple_of(HOUSEKEEPING_TICKS);
            for g in groups.iter().filter(|g| !g.failed.get()) {
                // A sleeping group is not ticked (`hibernate`); its leader still reports its
                // in-sync replicas and checks its preferred leader now and then.
                let asleep = tick && g.still_asleep();
                if asleep && housekeeping {
                    self.report_leadership(g);
                    self.restore_preferred_leader(g);
                }
                let tick = tick && !asleep;
                if tick || g.has_work() {
                    self.drive_replica(g, tick).await;
                }
            }
        }
    }

    /// One round of a replica's work: its tick (when due), then `Replica::round`; a replica
    /// whose round fails stops.
    async fn drive_replica(self: &Rc<Self>, g: &Rc<Replica>, tick: bool) {
        if tick {
            g.rejoin.hold_election(&mut g.raw.borrow_mut().raft);
            g.raw.borrow_mut().tick();
            if self.config.replica_hibernate {
                g.maybe_sleep();
            }
            self.report_leadership(g);
            super::leadership::campaign_if_preferred(g);
            self.restore_preferred_leader(g);
        }
        let res = g.round(self).await;
        if let Err(e) = res {
            // The replica's files cannot be written or disagree with what it was sent: it
            // must not go on voting or acknowledging.
            tracing::error!(topic = %g.topic, partition = g.partition, error = %e,
                "partition Raft group stopped on this broker");
            g.failed.set(true);
            g.fail_waiters(errors::KAFKA_STORAGE_ERROR);
        }
        glommio::yield_if_needed().await;
    }
}

impl Host for Rc<Shard> {
    fn send(&self, r: &Replica, msgs: Vec<Message>) {
        self.send_raft(r, msgs);
    }

    fn report(&self, r: &Rc<Replica>) {
        self.report_leadership(r);
    }

    fn became_leader(&self, r: &Replica) {
        self.new_leader_waits_to_rebalance(r);
    }

    fn stopping(&self) -> bool {
        self.stopping.is_fired()
    }

    fn shut_down(&self) -> bool {
        self.shutdown.is_fired()
    }

    fn hibernate(&self) -> bool {
        self.config.replica_hibernate
    }

    fn rejoined(&self, r: &Replica) {
        self.rejoin.borrow().done(&r.rejoin);
    }

    fn wake_driver(&self) {
        self.replica_work.notify();
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}
