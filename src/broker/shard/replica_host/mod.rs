//! This core's replicas of replicated partitions (docs/replication.md §3-§6) and what they
//! need of the broker: [`ReplicaHost`], one per core, owns the driver task that ticks them
//! and drives each that has work, the queues and links their Raft messages travel on
//! (`route`), their leadership reports to the metadata group (`report`), and where their
//! leaderships go (`leadership`: preferred leaders, controlled shutdown, ElectLeaders). It is
//! the replicas' [`Host`]: a [`Replica`] (`broker::replica`: a raft-rs `RawNode` over the
//! partition's log) calls back through it to send its messages, report its leadership and
//! learn whether the broker is stopping. Produce on the leader is the replica's
//! (`Replica::produce`).
//!
//! The host reaches the rest of its core (the metadata snapshot, the partitions, the other
//! cores) through the [`Shard`] it belongs to, by a weak reference: the shard owns it.
//!
//! The log is opened with `committed_reads`: consumers read up to the Raft commit only
//! (`Log::set_committed`, moved on every `Ready` that commits).

mod leadership;
mod report;
mod route;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use raft::prelude::Message;
use weir::config::BrokerConfig;
use weir::protocol::peer::PartitionMessage;

use super::Shard;
use crate::broker::errors;
use crate::broker::peer::links::Links;
use crate::broker::raft::rejoin;
use crate::broker::replica::{Host, Opening, Replica};
use crate::broker::sync::Notify;

/// The partition groups' clock: like the metadata group's (docs/replication.md §6).
const TICK: Duration = Duration::from_millis(100);
/// How often (in ticks) a sleeping leader (`hibernate`) reports its in-sync replicas and
/// checks its preferred leader.
pub(in crate::broker::shard) const HOUSEKEEPING_TICKS: u64 = 10;

/// One core's replicas' host: their driver, their messages' way in and out, their reports.
pub struct ReplicaHost {
    shard: Weak<Shard>,
    core: usize,
    cores: usize,
    config: Arc<BrokerConfig>,
    /// Whether the driver task runs, and its wake-up.
    driver: Cell<bool>,
    work: Notify,
    /// Partition messages on their way through the mesh, sent together once the task
    /// queuing them yields (`route`): on a core other than 0, those for core 0 to send to
    /// peers; on core 0, per core, those from peers.
    out_queue: RefCell<Vec<(u64, PartitionMessage)>>,
    in_queues: Vec<RefCell<Vec<PartitionMessage>>>,
    /// A broker in a cluster: this core's links to and from the peers' cores.
    links: RefCell<Option<Rc<Links>>>,
    /// `Global::rejoin`: whether this broker's data directory rejoins its groups (set at
    /// start-up).
    rejoin: RefCell<Arc<rejoin::Shared>>,
}

impl ReplicaHost {
    pub(super) fn new(
        shard: Weak<Shard>,
        core: usize,
        cores: usize,
        config: Arc<BrokerConfig>,
    ) -> Rc<ReplicaHost> {
        Rc::new(ReplicaHost {
            shard,
            core,
            cores,
            config,
            driver: Cell::new(false),
            work: Notify::default(),
            out_queue: RefCell::new(Vec::new()),
            in_queues: (0..cores).map(|_| RefCell::new(Vec::new())).collect(),
            links: RefCell::new(None),
            rejoin: Default::default(),
        })
    }

    /// The shard this host belongs to (gone only while the core shuts down).
    fn shard(&self) -> Option<Rc<Shard>> {
        self.shard.upgrade()
    }

    pub fn set_rejoin(&self, rejoin: Arc<rejoin::Shared>) {
        *self.rejoin.borrow_mut() = rejoin;
    }

    /// Starts this core's replica of `topic`-`partition` (its log is open) in a group of
    /// `voters` (`Replica::open`), and the core's driver if it is the first.
    pub(in crate::broker::shard) async fn open(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        voters: Vec<u64>,
    ) -> Result<(), String> {
        let shard = self.shard().ok_or("the core is shutting down")?;
        let here = shard
            .metadata()
            .local_broker
            .ok_or("a replicated partition on a standalone broker")?;
        let part = shard
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
        if !shard
            .partition(topic, partition)
            .is_some_and(|now| Rc::ptr_eq(&now, &part))
        {
            self.close(&replica);
            tracing::debug!(
                topic,
                partition,
                "partition retired while its replica opened; replica closed"
            );
            return Ok(());
        }
        part.set_replica(replica);
        if !self.driver.replace(true) {
            glommio::spawn_local(self.clone().drive()).detach();
        }
        self.work.notify();
        Ok(())
    }

    /// Stops a replica (taken off its partition: retired, or the broker shuts down): its
    /// waiting produces get NOT_LEADER_OR_FOLLOWER.
    pub(in crate::broker::shard) fn close(&self, g: &Replica) {
        g.failed.set(true);
        g.fail_waiters(errors::NOT_LEADER_OR_FOLLOWER);
        self.rejoin.borrow().done(&g.rejoin);
    }

    /// The driver of this core's groups: every `TICK` drives each group once (`drive_one`),
    /// one group at a time; a round woken by work arriving drives the groups that have some
    /// (`Replica::has_work`).
    async fn drive(self: Rc<Self>) {
        let mut next_tick = Instant::now() + TICK;
        let mut ticks = 0u64;
        loop {
            let now = Instant::now();
            if now < next_tick {
                or(self.work.notified(), glommio::timer::sleep(next_tick - now)).await;
            }
            let Some(shard) = self.shard().filter(|s| !s.shutdown.is_fired()) else {
                self.fail_all_waiters();
                return;
            };
            let tick = Instant::now() >= next_tick;
            if tick {
                next_tick = Instant::now() + TICK;
            }
            // One group after another. Driving them concurrently was measured (docs/bench.md,
            // "Groups driven concurrently"): full-speed throughput did not move, so the simpler
            // order stays until a mixed load shows a need.
            let groups = shard.replicas_now();
            drop(shard);
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
                    self.drive_one(g, tick).await;
                }
            }
        }
    }

    /// One round of a replica's work: its tick (when due), then `Replica::round`; a replica
    /// whose round fails stops.
    async fn drive_one(self: &Rc<Self>, g: &Rc<Replica>, tick: bool) {
        if tick {
            g.rejoin.hold_election(&mut g.raw.borrow_mut().raft);
            g.raw.borrow_mut().tick();
            if self.config.replica_hibernate {
                g.maybe_sleep();
            }
            self.report_leadership(g);
            leadership::campaign_if_preferred(g);
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

    /// At shutdown the driver stops: the produces still waiting on a group are answered
    /// (NOT_LEADER_OR_FOLLOWER, retriable) now, not when the connections are cut.
    fn fail_all_waiters(&self) {
        let Some(shard) = self.shard() else {
            return;
        };
        for g in shard.replicas_now() {
            g.fail_waiters(errors::NOT_LEADER_OR_FOLLOWER);
        }
    }
}

impl Host for Rc<ReplicaHost> {
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
        self.shard().is_none_or(|s| s.stopping.is_fired())
    }

    fn shut_down(&self) -> bool {
        self.shard().is_none_or(|s| s.shutdown.is_fired())
    }

    fn hibernate(&self) -> bool {
        self.config.replica_hibernate
    }

    fn rejoined(&self, r: &Replica) {
        self.rejoin.borrow().done(&r.rejoin);
    }

    fn wake_driver(&self) {
        self.work.notify();
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}
