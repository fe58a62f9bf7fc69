//! Partition groups' Raft messages between cores and brokers (frame kind 4). A message goes
//! from the core of the sending replica straight to the core of the receiving one, found in
//! the placement (`peer::links`); core 0's own messages for a peer's core 0 go on its control
//! connection (`peer::net`). To a peer that declined the link (an older weir), or to a
//! replica the metadata does not place yet, it goes out through core 0 (`Req::RaftOut`), and
//! arrives on core 0, which hands it to the replica's core (`Req::RaftIn`). The messages one
//! task queues for a core before it yields cross the mesh in one call. Each hop through
//! another core is counted (`peer_messages_relayed`), each message sent from its replica's
//! own core on a connection of that core (`peer_messages_linked`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;

use raft::prelude::Message;
use tracing::debug;
use weir::metadata::Metadata;
use weir::protocol::peer::PartitionMessage;

use super::ReplicaHost;
use crate::broker::metrics::CoreMetrics;
use crate::broker::peer::links::Links;
use crate::broker::replica::Replica;
use crate::broker::shard::{
    CoreCall, PeerLinkCall, RaftInCall, RaftOutCall, Shard, WakeReplicasOfCall,
};

impl ReplicaHost {
    /// This core's links to the peers' cores (a broker in a cluster).
    pub fn links(&self) -> Option<Rc<Links>> {
        self.links.borrow().clone()
    }

    pub fn set_links(&self, links: Rc<Links>) {
        *self.links.borrow_mut() = Some(links);
    }

    /// A core link for core `core` of this broker, handed on by core 0 (`PeerHooks::link`):
    /// served by that core.
    pub fn take_link(self: &Rc<Self>, fd: OwnedFd, core: u16, addr: Option<SocketAddr>) {
        let core = usize::from(core);
        if core == self.core {
            match self.links() {
                Some(links) => {
                    glommio::spawn_local(links.serve(fd, addr)).detach();
                }
                None => debug!(peer = ?addr, "a core link before this core has links: closed"),
            }
        } else if self.core == 0 && core < self.cores {
            let Some(shard) = self.shard() else {
                return;
            };
            glommio::spawn_local(async move {
                shard.ask(core, PeerLinkCall { fd, addr }).await;
            })
            .detach();
        } else {
            debug!(peer = ?addr, core, cores = self.cores, "a core link for a core this broker does not have: closed");
        }
    }

    /// Sends a group's messages to the replicas on other brokers: each on this core's link
    /// to the core of its replica, or through core 0 (see the module's comment). From
    /// another core, the messages for core 0 of every group driven before the driver yields
    /// cross the mesh in one call (one per group cost most of an idle broker's CPU with many
    /// groups).
    pub(super) fn send_raft(self: &Rc<Self>, g: &Replica, msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        let Some(shard) = self.shard() else {
            return;
        };
        let meta = shard.metadata();
        let replicas = placement(&meta, g);
        let links = self.links();
        let metrics = &shard.metrics;
        let mut through_0 = Vec::new();
        for msg in msgs {
            let to = msg.to;
            let m = PartitionMessage {
                topic_id: g.topic_id.clone(),
                partition: g.partition as u32,
                msg,
            };
            let core = replicas.iter().find(|(b, _)| *b == to);
            match (&links, core.and_then(|&(_, c)| u16::try_from(c).ok())) {
                // Core 0's messages for a peer's core 0: its control connection.
                (_, Some(0)) if self.core == 0 => {
                    CoreMetrics::bump(&metrics.peer_messages_linked);
                    through_0.push((to, m));
                }
                (Some(links), Some(core)) => match links.send(to, core, m) {
                    None => CoreMetrics::bump(&metrics.peer_messages_linked),
                    Some(m) => through_0.push((to, m)),
                },
                _ => through_0.push((to, m)),
            }
        }
        if through_0.is_empty() {
            return;
        }
        if self.core == 0 {
            self.raft_out(through_0);
        } else {
            let relayed = &metrics.peer_messages_relayed;
            relayed.set(relayed.get() + through_0.len() as u64);
            self.call_batched(&shard, 0, |h, _| &h.out_queue, through_0, RaftOutCall);
        }
    }

    /// Core 0: queues partition messages on the peer connections.
    pub(in crate::broker::shard) fn raft_out(&self, out: Vec<(u64, PartitionMessage)>) {
        let Some(peers) = self.shard().and_then(|s| s.peers()) else {
            return;
        };
        for (to, m) in out {
            peers.send_partition(to, m);
        }
    }

    /// A partition message from a peer (on core 0, or on the core a core link is for), to
    /// the core holding this broker's replica; the messages for another core read before
    /// this task yields cross the mesh in one call.
    pub fn raft_in(self: &Rc<Self>, m: PartitionMessage) {
        let Some(shard) = self.shard() else {
            return;
        };
        let Some(name) = topic_of(&shard, &m) else {
            debug!(topic_id = %m.topic_id, "a Raft message for an unknown topic");
            return;
        };
        let Some(core) = shard.metadata().local_replica(&name, m.partition as i32) else {
            return;
        };
        if core == self.core {
            self.deliver_raft(vec![m]);
        } else if core < self.cores {
            CoreMetrics::bump(&shard.metrics.peer_messages_relayed);
            self.call_batched(&shard, core, |h, c| &h.in_queues[c], [m], RaftInCall);
        }
    }

    /// Queues `items` for one call to `core` (`req` makes it): the first items queued since
    /// the last call spawn the task that makes it, which runs once the queuing task yields,
    /// so everything queued meanwhile goes in the same call.
    fn call_batched<T: 'static, C: CoreCall + 'static>(
        self: &Rc<Self>,
        shard: &Rc<Shard>,
        core: usize,
        queue: fn(&ReplicaHost, usize) -> &RefCell<Vec<T>>,
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
            let (host, shard) = (self.clone(), shard.clone());
            glommio::spawn_local(async move {
                let items = std::mem::take(&mut *queue(&host, core).borrow_mut());
                shard.ask(core, req(items)).await;
            })
            .detach();
        }
    }

    /// On the replica's core: queues messages for the driver.
    pub(in crate::broker::shard) fn deliver_raft(&self, msgs: Vec<PartitionMessage>) {
        let Some(shard) = self.shard() else {
            return;
        };
        for m in msgs {
            let Some(name) = topic_of(&shard, &m) else {
                continue;
            };
            if let Some(g) = shard.replica(&name, m.partition as i32) {
                g.inbox.borrow_mut().push(m.msg);
            }
        }
        self.work.notify();
    }

    /// Core 0: a peer broker was taken to be down or up again (`peer::liveness`): every
    /// core wakes its sleeping groups with a replica on it.
    pub fn peer_changed(&self, peer: u64, up: bool) {
        self.wake_replicas_of(peer, up);
        let Some(shard) = self.shard() else {
            return;
        };
        for core in (0..self.cores).filter(|&c| c != self.core) {
            let shard = shard.clone();
            glommio::spawn_local(async move {
                shard.ask(core, WakeReplicasOfCall { peer, up }).await;
            })
            .detach();
        }
    }

    /// Wakes this core's sleeping groups with a replica on broker `peer`; one that went down
    /// (`up` false) has this core's links to it made again: one that carried frames into a
    /// cut link would stay mute behind TCP's retransmission backoff after the link heals
    /// (`Peer::reconnect`).
    pub(in crate::broker::shard) fn wake_replicas_of(&self, peer: u64, up: bool) {
        if let (false, Some(links)) = (up, self.links()) {
            links.reconnect(peer);
        }
        let Some(shard) = self.shard() else {
            return;
        };
        let mut woken = 0usize;
        for g in shard.replicas_now() {
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
            self.work.notify();
        }
    }
}

/// The name of a partition message's topic (by id, through the snapshot's index).
fn topic_of(shard: &Shard, m: &PartitionMessage) -> Option<String> {
    shard.topic_name(&uuid::Uuid::try_parse(&m.topic_id).ok()?)
}

/// Where the metadata places `g`'s partition: (broker, core) of each replica.
fn placement<'m>(meta: &'m Metadata, g: &Replica) -> &'m [(u64, usize)] {
    let p = usize::try_from(g.partition).unwrap_or(usize::MAX);
    meta.topics
        .get(&g.topic)
        .and_then(|t| t.replicas.get(p))
        .map_or(&[], Vec::as_slice)
}
