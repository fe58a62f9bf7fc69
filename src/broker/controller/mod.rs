//! The cluster's metadata Raft group on this broker (docs/replication.md §4, step 2): one
//! raft-rs `RawNode` on core 0, its log on disk (`store`), and the way admin requests reach
//! the group. It talks to the other brokers through `broker::peer::Peers`, for which it is
//! the `Controller`: the metadata group's messages and forwarded requests come to it there.
//!
//! One driver task owns the `RawNode` (`Node::run`): every `TICK` it ticks it; frames from
//! peers and local proposals are queued and stepped/proposed by the driver, so nothing else
//! touches the node between a `ready()` and its `advance()`. For each `Ready`: messages go
//! to the peers' queues, committed entries are applied (the `Hooks::apply` the broker
//! installs: `Shard::apply_cluster` saves the new metadata and applies it on every core),
//! new entries and the hard state are appended to the log file and fdatasync'ed before the
//! persisted messages (votes, append acknowledgements) leave.
//!
//! An admin request (`Node::submit`) on any broker: on the leader its records are planned
//! (topic id, placement) and proposed; elsewhere they are forwarded to the leader, which
//! plans, proposes and answers with the entry's index. Either way the broker that was asked
//! answers once it has applied that index itself, with the outcomes its own apply gave.

mod catch_up;
mod step_down;
pub mod store;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use raft::prelude::{ConfState, Entry, EntryType, HardState, Message};
use raft::storage::MemStorage;
use raft::{RawNode, StateRole};
use tracing::{debug, error, info, warn};
use weir::cluster::{Batch, Outcome, Record};
use weir::metadata::Metadata;

pub use self::catch_up::CATCH_UP_WAIT;
use crate::broker::peer::net::{Forward, Frame};
use crate::broker::peer::{self, call, Local, Peers};
use crate::broker::raft::rejoin;
use crate::broker::sync::{Event, Notify, Slot};

/// The Raft clock: heartbeats every tick, elections after 10-20 ticks without a leader.
const TICK: Duration = Duration::from_millis(100);
const ELECTION_TICKS: usize = 10;
const HEARTBEAT_TICKS: usize = 2;
/// Outcomes of applied entries kept for the requests waiting on them.
const OUTCOMES_KEPT: usize = 1024;
/// How long a forwarded request waits for the leader's reply before trying again.
const FORWARD_WAIT: Duration = Duration::from_secs(3);

/// Where a proposal landed (its Raft index), or why it did not.
type Placed = Rc<Slot<Result<u64, String>>>;

/// What the broker gives the node: how to apply committed batches (returns one outcome per
/// record), and its current applied metadata (for planning on the leader).
pub struct Hooks {
    #[allow(clippy::type_complexity)]
    pub apply: Box<dyn Fn(Vec<(u64, Batch)>, u64) -> Local<Vec<Vec<Outcome>>>>,
    pub current: Box<dyn Fn() -> Arc<Metadata>>,
}

/// What the main thread prepares for core 0 (all `Send`): this broker's id, its peers'
/// resolved addresses, its own inter-broker address, and the log read back from disk.
pub struct Boot {
    pub id: u64,
    pub peers: Vec<(u64, SocketAddr)>,
    pub listen: SocketAddr,
    pub log: store::Loaded,
    /// The index the applied metadata (`weir-metadata.json`) is at.
    pub applied: u64,
    /// Set once this broker's metadata caught up with the leader's (`Node::catch_up`).
    pub caught_up: Arc<std::sync::atomic::AtomicBool>,
    /// Mutual TLS with the peers (`security.inter.broker.protocol=SSL`); `None`: PLAINTEXT.
    pub tls: Option<crate::broker::peer::peer_tls::PeerTls>,
    /// Whether this broker's data directory rejoins (`rejoin`), shared with the other cores.
    pub rejoin: Arc<rejoin::Shared>,
}

pub struct Node {
    pub id: u64,
    raw: RefCell<RawNode<MemStorage>>,
    mem: MemStorage,
    file: RefCell<Option<std::fs::File>>,
    inbox: RefCell<Vec<Message>>,
    proposals: RefCell<Vec<(Vec<u8>, Placed)>>,
    work: Notify,
    leader: Cell<u64>,
    /// Start-up catch-up (`catch_up`): a read index to ask the leader for, and the index it
    /// answered.
    read_wanted: Cell<bool>,
    read_target: Cell<Option<u64>>,
    applied: Cell<u64>,
    applied_changed: RefCell<Rc<Event>>,
    /// index → (request id, outcome per record), for the last `OUTCOMES_KEPT` entries.
    outcomes: RefCell<BTreeMap<u64, (u64, Vec<Outcome>)>>,
    /// The other brokers (every other voter).
    peers: Rc<Peers>,
    /// Forwarded requests waiting for the leader's reply, by request id.
    forwards: RefCell<HashMap<u64, Placed>>,
    next_req: Cell<u64>,
    /// The broker is stopping (`step_down`): it hands the leadership over and takes none.
    stopping: Cell<bool>,
    /// This replica's standing in the metadata group while the broker rejoins (`rejoin`).
    rejoin: rejoin::Rejoin,
    rejoin_shared: Arc<rejoin::Shared>,
    hooks: Hooks,
}

impl Node {
    /// Builds the node from what was read back, makes it the controller of `peers` and starts
    /// them (the inter-broker listener and senders), then its driver (on this executor: core
    /// 0).
    pub fn start(boot: Boot, hooks: Hooks, peers: Rc<Peers>) -> Result<Rc<Node>, String> {
        let Boot {
            id,
            peers: addrs,
            listen,
            log,
            applied,
            caught_up,
            tls: _, // `peers` holds it
            rejoin: rejoin_shared,
        } = boot;
        let voters: Vec<u64> = addrs.iter().map(|p| p.0).chain([id]).collect();
        let mem = MemStorage::new_with_conf_state(ConfState::from((voters, vec![])));
        let mut hs: HardState = log.hard_state;
        let last = log.entries.last().map_or(0, |e| e.index);
        if applied > last {
            return Err(format!(
                "the metadata file is at Raft index {applied} but the metadata Raft log ends at \
                 {last}: the log ({}) was lost or replaced",
                store::LOG_FILE
            ));
        }
        // Applied entries were committed, even if the commit index saved with them lagged.
        hs.commit = hs.commit.max(applied);
        mem.wl().append(&log.entries).map_err(|e| e.to_string())?;
        mem.wl().set_hardstate(hs);
        let config = raft::Config {
            id,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            applied,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        config.validate().map_err(|e| e.to_string())?;
        let raw = RawNode::new(&config, mem.clone(), &crate::broker::raft::raft_logger())
            .map_err(|e| e.to_string())?;
        let node = Rc::new(Node {
            id,
            raw: RefCell::new(raw),
            mem,
            file: RefCell::new(Some(log.file)),
            inbox: RefCell::new(Vec::new()),
            proposals: RefCell::new(Vec::new()),
            work: Notify::default(),
            leader: Cell::new(0),
            read_wanted: Cell::new(false),
            read_target: Cell::new(None),
            applied: Cell::new(applied),
            applied_changed: RefCell::new(Rc::new(Event::default())),
            outcomes: RefCell::new(BTreeMap::new()),
            peers: peers.clone(),
            forwards: RefCell::new(HashMap::new()),
            next_req: Cell::new(peer::first_request_id(id)),
            stopping: Cell::new(false),
            rejoin: rejoin_shared.open(rejoin_shared.metadata_sure_file()),
            rejoin_shared,
            hooks,
        });
        let controller: Rc<dyn peer::Controller> = node.clone();
        peers.set_controller(Rc::downgrade(&controller));
        peers.start()?;
        info!(node = id, %listen, peers = addrs.len(), applied, last_index = last,
            "metadata Raft group starting");
        glommio::spawn_local(node.clone().catch_up(caught_up)).detach();
        glommio::spawn_local(node.clone().watch_rejoin()).detach();
        let q = glommio::executor().create_task_queue(
            glommio::Shares::default(),
            glommio::Latency::Matters(Duration::from_millis(5)),
            "metadata-raft",
        );
        glommio::spawn_local_into(node.clone().run(), q)
            .map_err(|e| e.to_string())?
            .detach();
        Ok(node)
    }

    /// The metadata group's leader as this broker knows it (0: none known).
    pub fn leader(&self) -> u64 {
        self.leader.get()
    }

    /// On the leader: its quorum as DescribeQuorum reports it (`None` elsewhere: only the
    /// leader tracks how far each voter got).
    pub fn quorum_status(&self) -> Option<call::QuorumStatus> {
        let raw = self.raw.borrow();
        let status = raw.status();
        if status.ss.raft_state != StateRole::Leader {
            return None;
        }
        let last = raw.raft.raft_log.last_index();
        let mut voters: Vec<(u64, u64)> = status
            .progress?
            .iter()
            .map(|(&id, p)| (id, if id == self.id { last } else { p.matched }))
            .collect();
        voters.sort_unstable();
        Some(call::QuorumStatus {
            leader: self.id,
            term: status.hs.term,
            high_watermark: status.hs.commit,
            voters,
        })
    }

    fn send(&self, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to;
            if !self.peers.send(to, &Frame::Raft(m)) {
                debug!(to, "a Raft message for an unknown node");
            }
        }
    }

    /// The driver: ticks, steps queued messages, proposes queued proposals, handles readies.
    async fn run(self: Rc<Self>) {
        let mut next_tick = Instant::now() + TICK;
        loop {
            let now = Instant::now();
            if now < next_tick {
                or(self.work.notified(), glommio::timer::sleep(next_tick - now)).await;
            }
            if Instant::now() >= next_tick {
                self.rejoin.hold_election(&mut self.raw.borrow_mut().raft);
                self.raw.borrow_mut().tick();
                next_tick = Instant::now() + TICK;
            }
            let msgs = std::mem::take(&mut *self.inbox.borrow_mut());
            for mut m in msgs {
                if !self
                    .rejoin
                    .before_step(&mut self.raw.borrow_mut().raft, &mut m, &"metadata")
                {
                    continue;
                }
                if self.stopping.get()
                    && m.get_msg_type() == raft::prelude::MessageType::MsgTimeoutNow
                {
                    debug!(
                        from = m.from,
                        "stopping: the metadata leadership offered declined"
                    );
                    continue;
                }
                if let Err(e) = self.raw.borrow_mut().step(m) {
                    debug!(error = %e, "stepping a Raft message");
                }
            }
            self.check_rejoined();
            let props = std::mem::take(&mut *self.proposals.borrow_mut());
            for (data, slot) in props {
                let mut raw = self.raw.borrow_mut();
                if raw.raft.state != StateRole::Leader {
                    slot.set(Err("not the metadata leader".into()));
                    continue;
                }
                match raw.propose(Vec::new(), data) {
                    Ok(()) => slot.set(Ok(raw.raft.raft_log.last_index())),
                    Err(e) => slot.set(Err(e.to_string())),
                }
            }
            if self.read_wanted.take() {
                self.raw
                    .borrow_mut()
                    .read_index(catch_up::READ_CONTEXT.to_vec());
            }
            if !self.raw.borrow().has_ready() {
                continue;
            }
            if let Err(e) = self.handle_ready().await {
                // The log cannot be written: going on could forget a vote or an entry.
                error!(error = %e, "metadata Raft log write failed: stopping the broker");
                eprintln!("weir: metadata Raft log write failed: {e}");
                std::process::exit(1);
            }
        }
    }

    async fn handle_ready(self: &Rc<Self>) -> Result<(), String> {
        let mut rd = self.raw.borrow_mut().ready();
        if let Some(ss) = rd.ss() {
            if ss.leader_id != self.leader.get() {
                info!(
                    leader = ss.leader_id,
                    term = self.raw.borrow().raft.term,
                    "metadata leader changed"
                );
                // Requests forwarded to the old leader may never be answered: they try the
                // new one now rather than at their timeout.
                let waiting: Vec<Placed> =
                    self.forwards.borrow_mut().drain().map(|(_, s)| s).collect();
                for slot in waiting {
                    slot.set(Err("the metadata leader changed".into()));
                }
            }
            self.leader.set(ss.leader_id);
        }
        self.send(rd.take_messages());
        self.note_read_states(rd.take_read_states());
        if !rd.snapshot().is_empty() {
            // The log is never compacted, so no peer ever needs a snapshot.
            return Err("unexpected Raft snapshot (the metadata log is never compacted)".into());
        }
        self.apply(rd.take_committed_entries()).await;
        let entries = rd.take_entries();
        let hs = rd.hs().cloned();
        self.persist(&entries, hs.as_ref()).await?;
        self.send(rd.take_persisted_messages());
        let mut light = self.raw.borrow_mut().advance(rd);
        if let Some(commit) = light.commit_index() {
            let mut hs = self.mem.rl().hard_state().clone();
            hs.commit = commit;
            self.persist(&[], Some(&hs)).await?;
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries()).await;
        self.raw.borrow_mut().advance_apply();
        Ok(())
    }

    /// Appends to the log file and fdatasyncs (blocking pool), then to the in-memory log
    /// raft-rs reads.
    async fn persist(&self, entries: &[Entry], hs: Option<&HardState>) -> Result<(), String> {
        if entries.is_empty() && hs.is_none() {
            return Ok(());
        }
        let bytes = store::encode(entries, hs);
        let mut file = self.file.borrow_mut().take().ok_or("log file in use")?;
        let (file, res) = weir_storage::io::off_reactor(move || {
            let res = store::append_sync(&mut file, &bytes);
            (file, res)
        })
        .await;
        *self.file.borrow_mut() = Some(file);
        res.map_err(|e| format!("{}: {e}", store::LOG_FILE))?;
        if !entries.is_empty() {
            self.mem.wl().append(entries).map_err(|e| e.to_string())?;
        }
        if let Some(hs) = hs {
            self.mem.wl().set_hardstate(hs.clone());
        }
        Ok(())
    }

    /// Applies committed entries through the broker's hook and wakes the requests waiting.
    async fn apply(&self, entries: Vec<Entry>) {
        let Some(last) = entries.last().map(|e| e.index) else {
            return;
        };
        if last <= self.applied.get() {
            return;
        }
        let mut batches = Vec::new();
        for e in entries {
            if e.index <= self.applied.get()
                || e.get_entry_type() != EntryType::EntryNormal
                || e.data.is_empty()
            {
                continue;
            }
            match Batch::decode(&e.data) {
                Ok(b) => batches.push((e.index, b)),
                // Written by a newer weir: skipped the same way on every broker.
                Err(err) => warn!(index = e.index, error = %err, "skipping a metadata entry"),
            }
        }
        if !batches.is_empty() {
            let reqs: Vec<(u64, u64)> = batches.iter().map(|(i, b)| (*i, b.req)).collect();
            let outcomes = (self.hooks.apply)(batches, last).await;
            let mut kept = self.outcomes.borrow_mut();
            for ((index, req), o) in reqs.into_iter().zip(outcomes) {
                kept.insert(index, (req, o));
            }
            while kept.len() > OUTCOMES_KEPT {
                kept.pop_first();
            }
        }
        self.applied.set(last);
        let fired = std::mem::take(&mut *self.applied_changed.borrow_mut());
        fired.fire();
    }

    /// On the leader: plans the records and proposes them as one entry; the entry's index.
    async fn propose(&self, req: u64, mut records: Vec<Record>) -> Result<u64, String> {
        if self.leader.get() != self.id {
            return Err("not the metadata leader".into());
        }
        let meta = (self.hooks.current)();
        for r in &mut records {
            r.plan(&meta)?;
        }
        let slot = Rc::new(Slot::default());
        self.proposals
            .borrow_mut()
            .push((Batch { req, records }.encode(), slot.clone()));
        self.work.notify();
        slot.take().await
    }

    /// Waits until this broker applied `index`; the outcomes if the entry there is `req`'s.
    async fn wait_applied(
        &self,
        index: u64,
        req: u64,
        deadline: Instant,
    ) -> Result<Vec<Outcome>, String> {
        while self.applied.get() < index {
            let now = Instant::now();
            if now >= deadline {
                return Err("timed out waiting for the metadata change to apply".into());
            }
            let changed = self.applied_changed.borrow().clone();
            or(changed.wait(), glommio::timer::sleep(deadline - now)).await;
        }
        match self.outcomes.borrow().get(&index) {
            Some((r, o)) if *r == req => Ok(o.clone()),
            _ => Err("the proposal was replaced by a new leader's entry".into()),
        }
    }

    /// Outcomes of `req` if one of its attempts was applied already.
    fn applied_req(&self, req: u64) -> Option<Vec<Outcome>> {
        self.outcomes
            .borrow()
            .values()
            .find(|(r, _)| *r == req)
            .map(|(_, o)| o.clone())
    }

    /// Makes `records` one committed metadata entry and waits until this broker applied it:
    /// the outcome of each record. Retries across leader changes until `timeout`.
    pub async fn submit(
        self: &Rc<Self>,
        records: Vec<Record>,
        timeout: Duration,
    ) -> Result<Vec<Outcome>, String> {
        let deadline = Instant::now() + timeout;
        let req = self.next_req.get();
        self.next_req.set(req + 1);
        let mut last_error = String::from("no metadata leader");
        while Instant::now() < deadline {
            if let Some(o) = self.applied_req(req) {
                return Ok(o);
            }
            let leader = self.leader.get();
            let placed = if leader == self.id {
                self.propose(req, records.clone()).await
            } else if self.peers.contains(leader) {
                let slot = Rc::new(Slot::default());
                self.forwards.borrow_mut().insert(req, slot.clone());
                self.peers.send(
                    leader,
                    &Frame::Forward(Forward {
                        from: self.id,
                        req,
                        records: records.clone(),
                    }),
                );
                let wait = FORWARD_WAIT.min(deadline.saturating_duration_since(Instant::now()));
                let res = or(slot.take(), async {
                    glommio::timer::sleep(wait).await;
                    Err(format!(
                        "no answer from the metadata leader (broker {leader})"
                    ))
                })
                .await;
                self.forwards.borrow_mut().remove(&req);
                res
            } else {
                Err("no metadata leader elected yet".into())
            };
            match placed {
                Ok(index) => match self.wait_applied(index, req, deadline).await {
                    Ok(o) => return Ok(o),
                    Err(e) => last_error = e,
                },
                Err(e) => last_error = e,
            }
            debug!(req, error = %last_error, "metadata change not placed yet; retrying");
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("metadata change timed out: {last_error}"))
    }
}

/// The metadata group's side of the transport: its Raft messages go to the driver's inbox,
/// a forwarded request is planned and proposed here (on the leader), a reply goes to the
/// request that forwarded it.
impl peer::Controller for Node {
    fn raft(&self, m: Message) {
        self.inbox.borrow_mut().push(m);
        self.work.notify();
    }

    fn forward(self: Rc<Self>, f: Forward) -> Local<Result<u64, String>> {
        Box::pin(async move { self.propose(f.req, f.records).await })
    }

    fn forwarded(&self, req: u64, result: Result<u64, String>) {
        if let Some(slot) = self.forwards.borrow_mut().remove(&req) {
            slot.set(result);
        }
    }
}
