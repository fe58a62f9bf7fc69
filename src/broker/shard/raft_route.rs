//! Partition groups' Raft messages between cores and brokers: out through core 0's peer
//! connections (`peer::net`, frame kind 4), from another core over the request mesh
//! (`Req::RaftOut`); in on core 0, handed to the replica's core (`Req::RaftIn`). The
//! messages one task queues for a core before it yields cross the mesh in one call.

use std::cell::RefCell;
use std::rc::Rc;

use raft::prelude::Message;
use tracing::debug;

use super::*;
use crate::broker::replica::Replica;
use weir::protocol::peer::PartitionMessage;

impl Shard {
    /// Sends a group's messages to the replicas on other brokers, through core 0. From
    /// another core, the messages of every group driven before the driver yields cross the
    /// mesh in one call (one per group cost most of an idle broker's CPU with many groups).
    pub(super) fn send_raft(self: &Rc<Self>, g: &Replica, msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        let out = msgs.into_iter().map(|msg| {
            (
                msg.to,
                PartitionMessage {
                    topic_id: g.topic_id.clone(),
                    partition: g.partition as u32,
                    msg,
                },
            )
        });
        if self.id == 0 {
            self.raft_out(out.collect());
        } else {
            self.call_batched(0, |s, _| &s.raft_out_queue, out, RaftOutCall);
        }
    }

    /// Core 0: queues partition messages on the peer connections.
    pub(super) fn raft_out(&self, out: Vec<(u64, PartitionMessage)>) {
        let Some(peers) = self.peers() else {
            return;
        };
        for (to, m) in out {
            peers.send_partition(to, m);
        }
    }

    /// The name of a partition message's topic (by id, through the snapshot's index).
    fn topic_of(&self, m: &PartitionMessage) -> Option<String> {
        self.topic_name(&uuid::Uuid::try_parse(&m.topic_id).ok()?)
    }

    /// Core 0: a partition message from a peer, to the core holding this broker's replica;
    /// the messages for another core read before this task yields cross the mesh in one call.
    pub fn raft_in(self: &Rc<Self>, m: PartitionMessage) {
        let Some(name) = self.topic_of(&m) else {
            debug!(topic_id = %m.topic_id, "a Raft message for an unknown topic");
            return;
        };
        let Some(core) = self.metadata().local_replica(&name, m.partition as i32) else {
            return;
        };
        if core == self.id {
            self.deliver_raft(vec![m]);
        } else if core < self.cores {
            self.call_batched(core, |s, c| &s.raft_in_queues[c], [m], RaftInCall);
        }
    }

    /// Queues `items` for one call to `core` (`req` makes it): the first items queued since
    /// the last call spawn the task that makes it, which runs once the queuing task yields,
    /// so everything queued meanwhile goes in the same call.
    fn call_batched<T: 'static, C: CoreCall + 'static>(
        self: &Rc<Self>,
        core: usize,
        queue: fn(&Shard, usize) -> &RefCell<Vec<T>>,
        items: impl IntoIterator<Item = T>,
        req: fn(Vec<T>) -> C,
    ) {
        let first = {
            let mut q = queue(self, core).borrow_mut();
            let first = q.is_empty();
            q.extend(items);
            first
        };
        if first {
            let shard = self.clone();
            glommio::spawn_local(async move {
                let items = std::mem::take(&mut *queue(&shard, core).borrow_mut());
                shard.ask(core, req(items)).await;
            })
            .detach();
        }
    }

    /// On the replica's core: queues messages for the driver.
    pub(super) fn deliver_raft(&self, msgs: Vec<PartitionMessage>) {
        for m in msgs {
            let Some(name) = self.topic_of(&m) else {
                continue;
            };
            if let Some(g) = self.replica(&name, m.partition as i32) {
                g.inbox.borrow_mut().push(m.msg);
            }
        }
        self.replica_work.notify();
    }

    /// Core 0: a peer broker was taken to be down or up again (`peer::liveness`): every
    /// core wakes its sleeping groups with a replica on it.
    pub fn peer_changed(self: &Rc<Self>, peer: u64) {
        self.wake_replicas_of(peer);
        for core in (0..self.cores).filter(|&c| c != self.id) {
            let shard = self.clone();
            glommio::spawn_local(async move {
                shard.ask(core, WakeReplicasOfCall(peer)).await;
            })
            .detach();
        }
    }

    /// Wakes this core's sleeping groups with a replica on broker `peer`.
    pub(super) fn wake_replicas_of(&self, peer: u64) {
        let mut woken = 0usize;
        for g in self.replicas_now() {
            if g.asleep() && g.raw.borrow().raft.prs().iter().any(|(id, _)| *id == peer) {
                g.wake();
                woken += 1;
            }
        }
        if woken > 0 {
            debug!(
                peer,
                woken, "woke the sleeping groups with a replica on a peer"
            );
            self.replica_work.notify();
        }
    }
}
