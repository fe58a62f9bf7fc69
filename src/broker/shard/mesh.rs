//! Cross-core calls: [`Shard::call`] runs a request on the core that owns its partitions
//! (in place, or over the request mesh with bounded permits and in call order), and the
//! receiver tasks that serve the meshes and dispatch each request (`Shard::handle`).

use std::rc::Rc;

use glommio::channels::channel_mesh::Receivers;
use tracing::{debug, warn};

use super::*;
use crate::broker::group::service::GroupResp;
use crate::broker::sync::Slot;

impl Shard {
    // ---- Cross-core calls ----

    /// Runs a typed call on core `owner` (`call`): its answer, or `None` if the core answered
    /// something else (a core that is stopping answers `Resp::Done`).
    pub async fn ask<C: CoreCall>(self: &Rc<Self>, owner: usize, c: C) -> Option<C::Reply> {
        C::reply(self.call(owner, c.into_req()).await)
    }

    /// Runs `req` on core `owner`: in place if that is this core, else over the mesh.
    pub(super) async fn call(self: &Rc<Self>, owner: usize, req: Req) -> Resp {
        if owner == self.id {
            return self.handle(self.id, req).await;
        }
        let (Some(tx), Some(permits), Some(fetch_permits)) = (
            self.req_tx.as_ref(),
            self.permits.get(owner),
            self.fetch_permits.get(owner),
        ) else {
            panic!("call to core {owner} from core {} without a mesh", self.id);
        };
        // Bounded: at most `mesh_queue_depth` calls in flight to one core (backpressure),
        // plus parked fetches from their own pool, so that waiting consumers never hold
        // up produce requests. A fetch that finds its pool empty is sent without waiting.
        let mut req = req;
        let fetch_permit = match &mut req {
            Req::Fetch { max_wait_ms, .. } if *max_wait_ms > 0 => {
                match fetch_permits.try_acquire_permit(1) {
                    Ok(p) => Some(p),
                    Err(_) => {
                        *max_wait_ms = 0;
                        None
                    }
                }
            }
            _ => None,
        };
        // Calls to one core leave in the order they were made (pipelined produce requests to
        // a partition must be appended in arrival order): the place in line is taken now,
        // and only the head of the line waits for a permit (glommio's Semaphore is not FIFO).
        let turn = self.call_order[owner].lock().await;
        let _permit = match fetch_permit {
            Some(p) => p,
            None => {
                if permits.available() == 0 {
                    self.note_queue_full(owner);
                }
                match permits.acquire_permit(1).await {
                    Ok(p) => p,
                    Err(_) => return Resp::Done,
                }
            }
        };
        let id = self.next_call.get();
        self.next_call.set(id + 1);
        let slot = Rc::new(Slot::default());
        self.pending.borrow_mut().insert(id, slot.clone());
        if tx.send_to(owner, (self.id, id, req)).await.is_err() {
            self.pending.borrow_mut().remove(&id);
            warn!(core = self.id, to = owner, "cross-core channel closed");
            return Resp::Done;
        }
        drop(turn);
        slot.take().await
    }

    /// A call to `owner` found `cross.core.queue.depth` calls in flight: back-pressure, not
    /// an error (it waits for one to finish), logged at warn level the first time.
    pub(super) fn note_queue_full(&self, owner: usize) {
        if self.warned_queue_full.replace(true) {
            debug!(core = self.id, to = owner, "cross-core queue full: waiting");
        } else {
            warn!(core = self.id, to = owner, depth = self.config.mesh_queue_depth,
                "cross-core queue full (cross.core.queue.depth): calls wait their turn; logged once");
        }
    }

    /// Starts the tasks that serve the meshes: one receiver task per peer and direction.
    pub fn start_mesh(self: &Rc<Self>, mut reqs: Receivers<ReqMsg>, mut resps: Receivers<RespMsg>) {
        for (_, rx) in reqs.streams() {
            let me = self.clone();
            glommio::spawn_local(async move {
                while let Some((from, id, req)) = rx.recv().await {
                    let me2 = me.clone();
                    glommio::spawn_local(async move {
                        let resp = me2.handle(from, req).await;
                        if let Some(tx) = me2.resp_tx.as_ref() {
                            let _ = tx.send_to(from, (id, resp)).await;
                        }
                    })
                    .detach();
                }
            })
            .detach();
        }
        for (_, rx) in resps.streams() {
            let me = self.clone();
            glommio::spawn_local(async move {
                while let Some((id, resp)) = rx.recv().await {
                    let slot = me.pending.borrow_mut().remove(&id);
                    match slot {
                        Some(s) => s.set(resp),
                        None => warn!(core = me.id, id, "reply for an unknown call"),
                    }
                }
            })
            .detach();
        }
    }

    /// Runs a request on this core (the owner of its partitions).
    pub(super) async fn handle(self: &Rc<Self>, from: usize, req: Req) -> Resp {
        match req {
            Req::Produce { acks, parts } => Resp::Produce(self.produce_local(acks, parts).await),
            Req::Fetch {
                key,
                min_bytes,
                max_wait_ms,
                max_bytes,
                parts,
            } => Resp::Fetch(
                self.fetch_local(Some(key), min_bytes, max_wait_ms, max_bytes, &parts)
                    .await,
            ),
            Req::FetchWake(key) => {
                self.wake_remote(key);
                Resp::Done
            }
            Req::ListOffsets(parts) => Resp::ListOffsets(self.list_offsets_local(parts).await),
            Req::EpochEnds(parts) => Resp::EpochEnds(self.epoch_ends_local(parts)),
            Req::DeleteRecords(parts) => {
                Resp::LowWatermarks(self.delete_records_local(parts).await)
            }
            Req::Metrics => Resp::Metrics(Box::new(self.metrics_snapshot())),
            Req::ReplicaLeader { topic, partition } => Resp::Leader(
                self.replica(&topic, partition)
                    .map_or(0, |g| g.leader.get()),
            ),
            Req::Quorum => Resp::Quorum(Box::pin(self.quorum_status()).await),
            Req::PeerCall { to, call } => {
                Resp::PeerAnswer(Box::pin(self.peer_call(to, call)).await)
            }
            Req::PartitionSizes => Resp::PartitionSizes(self.partition_sizes()),
            Req::DescribeProducers(parts) => {
                Resp::Producers(self.describe_producers_local(parts).await)
            }
            Req::Apply(meta) => Resp::Applied(self.apply_metadata(meta).await),
            Req::RaftOut(out) => {
                self.replica_host.raft_out(out);
                Resp::Done
            }
            Req::RaftIn(msgs) => {
                self.replica_host.deliver_raft(msgs);
                Resp::Done
            }
            Req::WakeReplicasOf { peer, up } => {
                self.replica_host.wake_replicas_of(peer, up);
                Resp::Done
            }
            Req::PeerLink { fd, addr } => {
                self.replica_host.take_link(fd, self.id as u16, addr);
                Resp::Done
            }
            Req::Submit(records) => Resp::Stored(self.submit_for_core(records).await),
            Req::CreateTopics {
                topics,
                validate_only,
            } => {
                debug_assert_eq!(
                    self.id, 0,
                    "admin request from core {from} sent to core {}",
                    self.id
                );
                Resp::Topics(self.admin_create(topics, validate_only).await)
            }
            Req::DeleteTopics(names) => Resp::Topics(self.admin_delete(names).await),
            Req::CreatePartitions {
                topics,
                validate_only,
            } => Resp::Topics(self.admin_create_partitions(topics, validate_only).await),
            Req::AlterConfigs {
                changes,
                validate_only,
            } => Resp::Topics(self.admin_alter_configs(changes, validate_only).await),
            Req::AlterUsers(changes) => Resp::Users(self.admin_alter_users(changes).await),
            Req::CreateAcls(acls) => Resp::Stored(self.admin_create_acls(acls).await),
            Req::DeleteAcls(filters) => Resp::AclsDeleted(self.admin_delete_acls(filters).await),
            Req::Markers {
                producer_id,
                epoch,
                commit,
                parts,
            } => Resp::Codes(self.markers_local(producer_id, epoch, commit, parts).await),
            Req::Elect(parts) => Resp::Codes(self.replica_host.elect(parts).await),
            Req::Txn(t) => {
                let coordinator = self.txns.borrow().clone();
                match coordinator {
                    Some(c) => {
                        // Boxed: ending a transaction calls other cores (`Shard::call` → here).
                        let serve: std::pin::Pin<Box<dyn std::future::Future<Output = _> + '_>> =
                            Box::pin(c.serve(t));
                        Resp::Txn(serve.await)
                    }
                    None => Resp::Txn(txn::refused(
                        t,
                        crate::broker::errors::COORDINATOR_NOT_AVAILABLE,
                    )),
                }
            }
            Req::Group(g) => {
                let coordinator = self.groups.borrow().clone();
                match coordinator {
                    Some(c) => Resp::Group(crate::broker::group::service::serve(&c, g).await),
                    None => Resp::Group(GroupResp::Code(
                        crate::broker::group::coordinator::codes::COORDINATOR_NOT_AVAILABLE,
                    )),
                }
            }
        }
    }
}
