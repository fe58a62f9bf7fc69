//! Partition groups' Raft messages between cores and brokers: out through core 0's peer
//! connections (`cluster::net`, frame kind 4), from another core over the request mesh
//! (`Req::RaftOut`); in on core 0, handed to the replica's core (`Req::RaftIn`). The
//! messages one task queues for a core before it yields cross the mesh in one call.

use std::rc::Rc;

use raft::prelude::Message;
use tracing::debug;

use super::replication::Group;
use super::*;
use crate::broker::replica::frame::PartitionMessage;

impl Shard {
    /// Sends a group's messages to the replicas on other brokers, through core 0. From
    /// another core, the messages of every group driven before the driver yields cross the
    /// mesh in one call (one per group cost most of an idle broker's CPU with many groups).
    pub(super) fn send_raft(self: &Rc<Self>, g: &Group, msgs: Vec<Message>) {
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
            return;
        }
        let first = {
            let mut q = self.raft_out_queue.borrow_mut();
            let first = q.is_empty();
            q.extend(out);
            first
        };
        if first {
            let shard = self.clone();
            glommio::spawn_local(async move {
                let out = std::mem::take(&mut *shard.raft_out_queue.borrow_mut());
                shard.call(0, Req::RaftOut(out)).await;
            })
            .detach();
        }
    }

    /// Core 0: queues partition messages on the peer connections.
    pub(super) fn raft_out(&self, out: Vec<(u64, PartitionMessage)>) {
        let Some(node) = self.cluster_node() else {
            return;
        };
        for (to, m) in out {
            node.send_partition(to, m);
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
            return;
        }
        let first = {
            let mut queues = self.raft_in_queues.borrow_mut();
            let Some(q) = queues.get_mut(core) else {
                return;
            };
            q.push(m);
            q.len() == 1
        };
        if first {
            let shard = self.clone();
            glommio::spawn_local(async move {
                let msgs = std::mem::take(&mut shard.raft_in_queues.borrow_mut()[core]);
                shard.call(core, Req::RaftIn(msgs)).await;
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
            if let Some(g) = self.replica_group(&name, m.partition as i32) {
                g.inbox.borrow_mut().push(m.msg);
            }
        }
        self.replica_work.notify();
    }
}
