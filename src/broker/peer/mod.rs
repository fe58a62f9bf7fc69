//! The transport between brokers (docs/replication.md §5.2): on core 0, one outbound
//! connection per peer written by its sender task (`net`), the connections peers open to us
//! read by a task each (`inbound`), whether each peer is up (`liveness`), mutual TLS
//! (`peer_tls`), and the calls one broker makes of another (`call`); on every core, its links
//! to and from the peers' cores, which carry partition groups' messages (`links`).
//!
//! `Peers` knows nothing of Raft: what arrives is handed on — the metadata group's messages,
//! forwarded admin requests and their replies to the [`Controller`] (the metadata node,
//! `broker::controller::Node`), partition messages, calls and a peer going down or up to the
//! broker ([`PeerHooks`]).

pub mod call;
mod dial;
mod inbound;
pub mod links;
mod liveness;
pub mod net;
pub mod peer_tls;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::time::Duration;

use futures_lite::future::or;
use raft::prelude::Message;
use tracing::debug;
use weir::protocol::peer::PartitionMessage;

use self::call::{CallFrame, PeerAnswer, PeerCall};
use self::net::{Forward, Frame, Peer};
use crate::broker::sync::Slot;

/// A future on this core, not `Send`.
pub type Local<T> = Pin<Box<dyn Future<Output = T>>>;

/// What peers send the metadata group: implemented by the metadata node.
pub trait Controller {
    /// A metadata Raft message from peer `m.from` to this broker.
    fn raft(&self, m: Message);
    /// A peer forwards an admin request to this broker (it takes us for the metadata leader):
    /// where the proposal landed (its Raft index), or why it did not.
    fn forward(self: Rc<Self>, f: Forward) -> Local<Result<u64, String>>;
    /// The answer to an admin request this broker forwarded (`req`).
    fn forwarded(&self, req: u64, result: Result<u64, String>);
}

/// What peers send the rest of the broker.
pub struct PeerHooks {
    /// A partition group's message from a peer (`ReplicaHost::raft_in`).
    pub partition: Box<dyn Fn(PartitionMessage)>,
    /// A peer broker was taken to be down, or up again (`liveness`): the hibernating
    /// partition groups with a replica on it wake (`ReplicaHost::peer_changed`); `true`: up.
    pub peer_changed: Box<dyn Fn(u64, bool)>,
    /// Serves a peer's call (`Shard::serve_peer_call`).
    pub call: Box<dyn Fn(PeerCall) -> Local<PeerAnswer>>,
    /// A core link arrived for this broker's core `core` (its hello read): the core answers
    /// and serves it (`ReplicaHost::take_link`, `links::Links::serve`).
    pub link: Box<dyn Fn(OwnedFd, u16, Option<SocketAddr>)>,
}

/// Request ids unique per broker and per start (a restart's ids never meet the ones its
/// previous life used): the broker id, then the start time in microseconds.
pub fn first_request_id(id: u64) -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    (id << 48) | ((micros << 8) & ((1 << 48) - 1))
}

/// This broker's peers (every other voter of `controller.quorum.voters`) on core 0.
pub struct Peers {
    /// This broker's id.
    pub id: u64,
    peers: BTreeMap<u64, Rc<Peer>>,
    /// Our calls to peers waiting for their answers, by request id.
    calls: RefCell<HashMap<u64, Rc<Slot<PeerAnswer>>>>,
    next_call: Cell<u64>,
    hooks: PeerHooks,
    controller: RefCell<Option<Weak<dyn Controller>>>,
    /// This broker's inter-broker address (`start` listens there) and its mutual TLS.
    listen: SocketAddr,
    tls: Option<peer_tls::PeerTls>,
}

impl Peers {
    /// The peers at `addrs`, reached from this broker's inter-broker address `listen`, over
    /// mutual TLS if `tls`. Nothing runs until `start`.
    pub fn new(
        id: u64,
        addrs: &[(u64, SocketAddr)],
        listen: SocketAddr,
        tls: Option<peer_tls::PeerTls>,
        hooks: PeerHooks,
    ) -> Rc<Peers> {
        let peers = addrs
            .iter()
            .map(|&(p, addr)| {
                let tls = tls
                    .as_ref()
                    .and_then(|t| Some((t.connector.clone(), t.server_name(p)?)));
                (p, Peer::new(p, addr, listen, id, tls, None))
            })
            .collect();
        Rc::new(Peers {
            id,
            peers,
            calls: RefCell::new(HashMap::new()),
            next_call: Cell::new(first_request_id(id)),
            hooks,
            controller: RefCell::new(None),
            listen,
            tls,
        })
    }

    /// Who handles the metadata group's frames. Set before `start`; frames for it that find
    /// none (or a node dropped) are dropped with a debug line — a forwarded request's sender
    /// then retries after its wait.
    pub fn set_controller(&self, controller: Weak<dyn Controller>) {
        *self.controller.borrow_mut() = Some(controller);
    }

    /// Binds the inter-broker listener and starts the peers' sender tasks, the accepting
    /// task and the liveness watch (on this executor: core 0).
    pub fn start(self: &Rc<Self>) -> Result<(), String> {
        let listen = self.listen;
        let listener = glommio::net::TcpListener::bind(listen)
            .map_err(|e| format!("binding the inter-broker address {listen}: {e}"))?;
        for p in self.peers.values() {
            glommio::spawn_local(p.clone().run()).detach();
        }
        glommio::spawn_local(self.clone().accept(listener)).detach();
        glommio::spawn_local(self.clone().watch_peers()).detach();
        Ok(())
    }

    /// Whether `id` is one of this broker's peers.
    pub fn contains(&self, id: u64) -> bool {
        self.peers.contains_key(&id)
    }

    /// Queues `frame` for broker `to`; false if `to` is no peer.
    pub fn send(&self, to: u64, frame: &Frame) -> bool {
        match self.peers.get(&to) {
            Some(p) => {
                p.send(frame);
                true
            }
            None => false,
        }
    }

    /// Queues a partition group's message for broker `to` (dropped if `to` is no peer).
    pub fn send_partition(&self, to: u64, m: PartitionMessage) {
        if !self.send(to, &Frame::Partition(m)) {
            debug!(to, "a partition message for an unknown broker");
        }
    }

    /// Sends `call` to broker `to` and waits up to `timeout` for its answer (`None`: no
    /// answer in time, `to` cannot be reached — a failed connection attempt drops the call —
    /// or is no peer). Nothing is retried here: the callers' own retries are idempotent (a
    /// marker written twice, a check asked twice).
    pub async fn call(&self, to: u64, call: PeerCall, timeout: Duration) -> Option<PeerAnswer> {
        let peer = self.peers.get(&to)?;
        let req = self.next_call.get();
        self.next_call.set(req + 1);
        let slot = Rc::new(Slot::default());
        self.calls.borrow_mut().insert(req, slot.clone());
        let unreachable = peer.unreachable();
        peer.send(&Frame::Call(CallFrame {
            from: self.id,
            req,
            call,
        }));
        let answer = or(async { Some(slot.take().await) }, async {
            or(unreachable, glommio::timer::sleep(timeout)).await;
            None
        })
        .await;
        self.calls.borrow_mut().remove(&req);
        answer
    }

    fn controller(&self) -> Option<Rc<dyn Controller>> {
        self.controller.borrow().as_ref()?.upgrade()
    }
}
