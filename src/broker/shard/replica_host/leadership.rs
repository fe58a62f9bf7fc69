//! Where the leaders of replicated partitions are (docs/replication.md, "Preferred leaders"
//! and "Controlled shutdown"): a new group's preferred replica campaigns first; a leader that
//! is not the preferred replica hands its leadership back to it once that one has caught up
//! (Kafka's automatic preferred-leader election); a broker told to stop hands every
//! leadership it holds to an in-sync replica before it stops (Kafka's controlled shutdown);
//! ElectLeaders moves a leadership to the preferred replica on request.

use std::time::{Duration, Instant};

use raft::StateRole;
use tracing::{debug, info, warn};

use super::ReplicaHost;
use crate::broker::errors;
use crate::broker::raft::Handover;
use crate::broker::replica::Replica;

/// How often a stopping core looks whether its leaderships have moved.
const STEP_DOWN_POLL: Duration = Duration::from_millis(20);
/// How long a stopping core keeps trying to hand over a group whose caught-up followers are
/// not active just now: raft-rs's quorum check clears every follower's `recent_active` once
/// per election timeout (and a transfer that failed is given up at the same moment), so
/// "not active" right after it means only "not heard from since". Two election timeouts.
const INACTIVE_GRACE: Duration = Duration::from_secs(2);

impl ReplicaHost {
    /// Controlled shutdown (`controlled.shutdown.enable`), on each core when the broker is
    /// told to stop: every partition group this core leads hands its leadership to an in-sync
    /// follower (`successor`), and core 0 hands over the metadata group's; the core goes on
    /// serving meanwhile (produces to a moved partition get NOT_LEADER_OR_FOLLOWER, which
    /// clients answer with a metadata refresh). Returns once this core leads nothing, or after
    /// `controlled.shutdown.timeout.ms`; leaderships offered to this broker meanwhile are
    /// declined (`step_and_propose`). Without it, the partitions this broker led would stay
    /// silent until the others' election timeout (1-2 s), and produces waiting on them until
    /// the connections were cut.
    pub async fn step_down(&self) {
        let Some(shard) = self.shard() else {
            return;
        };
        let node = shard.controller();
        if self.config.voters.is_empty() || !self.config.controlled_shutdown {
            return;
        }
        let started = Instant::now();
        let deadline = started + Duration::from_millis(self.config.controlled_shutdown_timeout_ms);
        let mut led = None;
        let (moving, kept) = loop {
            let groups = shard.replicas_now();
            // Groups whose leadership is on its way, and groups without a follower in sync
            // (those keep their leader until the broker stops, as Kafka's controller leaves a
            // partition whose replicas are all out of sync).
            let (mut moving, mut kept) = (0usize, 0usize);
            for g in groups.iter().filter(|g| !g.failed.get() && g.is_leader()) {
                if g.transferring() {
                    moving += 1;
                    continue;
                }
                match successor(g) {
                    Some(to) => {
                        debug!(topic = %g.topic, partition = g.partition, to, "stopping: handing the leadership over");
                        g.wake();
                        g.raw.borrow_mut().transfer_leader(to);
                        moving += 1;
                    }
                    None if caught_up(g) && started.elapsed() < INACTIVE_GRACE => {
                        g.wake();
                        moving += 1;
                    }
                    None => kept += 1,
                }
            }
            let metadata = node.as_ref().map_or(Handover::NotLeader, |n| n.step_down());
            match metadata {
                Handover::Moving => moving += 1,
                Handover::NoSuccessor => kept += 1,
                Handover::NotLeader => {}
            }
            led.get_or_insert(moving + kept);
            if moving == 0 || Instant::now() >= deadline {
                break (moving, kept);
            }
            self.work.notify();
            glommio::timer::sleep(STEP_DOWN_POLL).await;
        };
        let led = led.unwrap_or(0);
        let elapsed_ms = started.elapsed().as_millis() as u64;
        if moving == 0 {
            info!(
                core = self.core,
                handed_over = led - kept,
                kept,
                elapsed_ms,
                "controlled shutdown: leaderships handed over (kept: no follower in sync)"
            );
        } else {
            warn!(core = self.core, handed_over = led - kept - moving, still_moving = moving, kept, elapsed_ms,
                "controlled shutdown: stopping while still leading (the handover did not finish in controlled.shutdown.timeout.ms)");
        }
    }

    /// ElectLeaders (PREFERRED; Kafka's `kafka-leader-election.sh`) for partitions whose
    /// replica is on this core. A partition this replica leads is handed to its preferred
    /// replica if that one holds every committed entry (raft-rs sends it the rest, then it
    /// campaigns at once), and the answer waits up to `ELECT_WAIT` for it to take over. One
    /// code per partition: NONE (moved), ELECTION_NOT_NEEDED (the preferred replica leads),
    /// PREFERRED_LEADER_NOT_AVAILABLE (it is behind, or did not take over in time),
    /// NOT_LEADER_OR_FOLLOWER (this replica does not lead: ask the leader).
    pub(in crate::broker::shard) async fn elect(&self, parts: Vec<(String, i32)>) -> Vec<i16> {
        const ELECT_WAIT: Duration = Duration::from_secs(5);
        let mut codes = Vec::with_capacity(parts.len());
        let Some(shard) = self.shard() else {
            return vec![errors::NOT_LEADER_OR_FOLLOWER; parts.len()];
        };
        let mut moving = Vec::new();
        for (topic, partition) in &parts {
            let Some(g) = shard.replica(topic, *partition) else {
                codes.push(errors::NOT_LEADER_OR_FOLLOWER);
                continue;
            };
            let ready = {
                let raw = g.raw.borrow();
                let committed = raw.raft.raft_log.committed;
                if raw.raft.state != StateRole::Leader {
                    Err(errors::NOT_LEADER_OR_FOLLOWER)
                } else if raw.raft.id == g.preferred {
                    Err(errors::ELECTION_NOT_NEEDED)
                } else if raw
                    .raft
                    .prs()
                    .get(g.preferred)
                    .is_some_and(|pr| pr.matched >= committed)
                {
                    Ok(())
                } else {
                    Err(errors::PREFERRED_LEADER_NOT_AVAILABLE)
                }
            };
            match ready {
                Ok(()) => {
                    info!(topic = %g.topic, partition = g.partition, to = g.preferred,
                        "ElectLeaders: handing the leadership to the preferred replica");
                    g.wake();
                    g.raw.borrow_mut().transfer_leader(g.preferred);
                    moving.push((codes.len(), g));
                    codes.push(errors::NONE);
                }
                Err(code) => codes.push(code),
            }
        }
        drop(shard);
        self.work.notify();
        let deadline = Instant::now() + ELECT_WAIT;
        while Instant::now() < deadline && moving.iter().any(|(_, g)| g.leader.get() != g.preferred)
        {
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        for (i, g) in moving {
            if g.leader.get() != g.preferred {
                codes[i] = errors::PREFERRED_LEADER_NOT_AVAILABLE;
            }
        }
        codes
    }

    /// A replica that became leader checks its preferred replica one interval from now, as
    /// Kafka's periodic check would: not at once, when the preferred one may be the broker
    /// that just handed its leadership over to stop.
    pub(super) fn new_leader_waits_to_rebalance(&self, g: &Replica) {
        let interval = Duration::from_secs(self.config.leader_imbalance_check_interval_s);
        g.balance_at.set(Instant::now() + interval);
    }

    /// Kafka's automatic preferred-leader election (`auto.leader.rebalance.enable`): a leader
    /// that is not its partition's preferred replica hands the leadership to it, once every
    /// `leader.imbalance.check.interval.seconds`, if that replica is in sync (active, holding
    /// every committed entry). raft-rs's leadership transfer sends it what it lacks, then lets
    /// it campaign at once; proposals are refused meanwhile, which producers retry. Leaders moved by a broker's failure thus
    /// go back once it has caught up, so a restarted broker leads its share again.
    pub(super) fn restore_preferred_leader(&self, g: &Replica) {
        let now = Instant::now();
        if !self.config.auto_leader_rebalance || now < g.balance_at.get() {
            return;
        }
        g.balance_at
            .set(now + Duration::from_secs(self.config.leader_imbalance_check_interval_s));
        let raw = g.raw.borrow();
        if raw.raft.state != StateRole::Leader
            || raw.raft.id == g.preferred
            || raw.raft.lead_transferee.is_some()
        {
            return;
        }
        // In sync (as the in-sync replicas count it: active, holding every committed entry);
        // raft-rs sends it the rest before it hands over. (Requiring every *written* entry
        // never held under load: the entries in flight are always ahead of it.)
        let committed = raw.raft.raft_log.committed;
        let ready = raw
            .raft
            .prs()
            .get(g.preferred)
            .is_some_and(|pr| pr.recent_active && pr.matched >= committed);
        if ready {
            info!(topic = %g.topic, partition = g.partition, to = g.preferred, term = raw.raft.term,
                "handing the leadership back to the preferred replica");
            drop(raw);
            g.wake();
            g.raw.borrow_mut().transfer_leader(g.preferred);
        }
    }
}

/// A new group's preferred leader — its first replica, which placement spreads evenly over
/// the brokers (`cluster::place`), as Kafka's preferred replica — campaigns at once and on
/// each of its first ticks while no leader is known, so that it is elected before the others'
/// election timeouts: leaders land where placement put them, not where raft-rs's random
/// timeouts would (which put every leader of a topic on one broker now and then). Only from
/// follower or pre-candidate (a pre-vote costs no term); never once a leader is known.
pub(super) fn campaign_if_preferred(g: &Replica) {
    let left = g.eager_ticks.get();
    if left == 0 {
        return;
    }
    let mut raw = g.raw.borrow_mut();
    let idle = matches!(
        raw.raft.state,
        StateRole::Follower | StateRole::PreCandidate
    );
    if raw.raft.leader_id != 0 || !idle || !g.rejoin.may_campaign(&raw.raft) {
        g.eager_ticks.set(0);
        return;
    }
    g.eager_ticks.set(left - 1);
    if let Err(e) = raw.campaign() {
        debug!(topic = %g.topic, partition = g.partition, error = %e, "campaigning");
    }
}

/// Whether a follower holds every committed entry, active lately or not.
fn caught_up(g: &Replica) -> bool {
    let raw = g.raw.borrow();
    let (me, committed) = (raw.raft.id, raw.raft.raft_log.committed);
    let any = raw
        .raft
        .prs()
        .iter()
        .any(|(id, pr)| *id != me && pr.matched >= committed);
    any
}

/// Whom a stopping leader hands its group to (`raft::successor`), its
/// preferred replica first.
fn successor(g: &Replica) -> Option<u64> {
    crate::broker::raft::successor(&g.raw.borrow().raft, Some(g.preferred))
}
