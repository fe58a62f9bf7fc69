//! One core's share of the broker: the partitions it owns, its pending-fetch wheel, and its
//! end of the cross-core channels.
//!
//! A `Shard` lives on one glommio executor (it is `!Send`). Work for a partition always runs
//! on the partition's owning core: a connection's core calls [`Shard::call`], which runs the
//! request in place when it owns the partitions, or sends it over the `channel_mesh` to the
//! owner and awaits the reply. Requests and replies travel on two separate meshes; the
//! number of requests in flight from one core to another is bounded by a semaphore whose
//! size equals the channel capacity, so a send never waits on a full channel and the two
//! directions can never deadlock each other. Everything crossing cores is `Send` data:
//! topic names, `bytes::Bytes` records, `Arc<Metadata>` snapshots.

mod admin;
mod calls;
mod checks;
mod cleaner;
mod commit;
mod fetch;
mod internal_topics;
mod lifecycle;
mod markers;
mod membership;
mod mesh;
mod msg;
mod offsets;
mod partition;
mod peer_calls;
mod produce;
mod replica_host;
mod txn;
mod txn_stores;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;
use weir_storage::BatchCache;

pub use cleaner::spawn_cleaner;

use crate::broker::group::Coordinator;
use crate::broker::sync::{Event, FifoLock, Notify, Slot};
use crate::broker::wheel::Wheel;
use weir::config::BrokerConfig;
use weir::metadata::Metadata;

pub use lifecycle::data_dir_ok;
pub use partition::Partition;
pub use replica_host::ReplicaHost;

/// State shared by all cores (startup and shutdown coordination only; never on the data
/// path).
pub struct Global {
    pub shutdown: AtomicBool,
    /// Cores that have finished serving their connections.
    pub drained: AtomicUsize,
    /// Cores whose listener is bound (the "listening on" line is printed when all are).
    pub bound: AtomicUsize,
    /// The port every core binds, per listener (set by core 0).
    pub ports: Vec<std::sync::atomic::AtomicU16>,
    /// `listeners.per.core`: the port of each core's own listener, per listener
    /// (`listener * cores + core`; set by that core).
    pub core_ports: Vec<std::sync::atomic::AtomicU16>,
    pub exited: AtomicUsize,
    /// Each core's start-up step (`core::STARTUP_STEPS`): named by a core that gives up
    /// waiting for another's listener, so a hang says where it is.
    pub steps: Vec<AtomicUsize>,
    /// Whether this broker's metadata is current enough to answer Metadata requests: at
    /// once standalone; in a cluster, once the metadata group caught up with its leader
    /// after start-up (`controller::Node::catch_up`; docs/replication.md, "A restarted broker
    /// catches up before answering Metadata").
    pub metadata_current: Arc<AtomicBool>,
    /// Whether this broker's data directory rejoins its Raft groups (`raft::rejoin`).
    pub rejoin: Arc<crate::broker::raft::rejoin::Shared>,
}

impl Global {
    pub fn new(cores: usize, listeners: usize, clustered: bool) -> Global {
        Global {
            shutdown: AtomicBool::new(false),
            drained: AtomicUsize::new(0),
            bound: AtomicUsize::new(0),
            ports: (0..listeners)
                .map(|_| std::sync::atomic::AtomicU16::new(0))
                .collect(),
            core_ports: (0..cores * listeners)
                .map(|_| std::sync::atomic::AtomicU16::new(0))
                .collect(),
            exited: AtomicUsize::new(0),
            steps: (0..cores).map(|_| AtomicUsize::new(0)).collect(),
            metadata_current: Arc::new(AtomicBool::new(!clustered)),
            rejoin: Default::default(),
        }
    }
}

pub use calls::*;
pub use msg::*;

// ---- Partitions and parked fetches --------------------------------------------------------

/// A fetch waiting for data, in the wheel and on its partitions' waiter lists.
struct Parked {
    fired: Cell<bool>,
    /// Fired by the requesting core (enough data from elsewhere): answer, don't re-park.
    external: Cell<bool>,
    signal: Event,
}

impl Parked {
    fn fire(&self) {
        if !self.fired.replace(true) {
            self.signal.fire();
        }
    }
}

type Waiters = Rc<RefCell<Vec<Weak<Parked>>>>;

fn wake_waiters(waiters: &Waiters) {
    let list = std::mem::take(&mut *waiters.borrow_mut());
    for w in list {
        if let Some(p) = w.upgrade() {
            p.fire();
        }
    }
}

// ---- The shard ----------------------------------------------------------------------------

pub struct Shard {
    pub id: usize,
    pub cores: usize,
    pub config: Arc<BrokerConfig>,
    /// host and port put in Metadata responses, per listener (index in `listeners`).
    pub advertised: RefCell<Vec<(String, i32)>>,
    /// `listeners.per.core`: per listener, every core's advertised (host, port), indexed by
    /// core = broker id in Metadata. Empty: the broker is advertised as one node, id 0.
    pub core_endpoints: RefCell<Vec<Vec<(String, i32)>>>,
    meta: RefCell<Arc<Metadata>>,
    /// Topic id → name for the current snapshot (Produce v13+, Fetch v13+, DeleteTopics v6+
    /// name topics by id), rebuilt whenever a snapshot is installed.
    topic_ids: RefCell<HashMap<uuid::Uuid, String>>,
    partitions: RefCell<HashMap<(String, i32), Rc<Partition>>>,
    /// The replicas of this core's replicated partitions: their driver, their messages'
    /// routes, their reports (`replica_host`).
    replica_host: Rc<ReplicaHost>,
    cache: Rc<BatchCache>,

    req_tx: Option<Senders<ReqMsg>>,
    resp_tx: Option<Senders<RespMsg>>,
    permits: Vec<Semaphore>,
    /// Per destination core: the order in which calls were made.
    call_order: Vec<FifoLock>,
    fetch_permits: Vec<Semaphore>,
    pending: RefCell<HashMap<u64, Rc<Slot<Resp>>>>,
    next_call: Cell<u64>,

    wheel: RefCell<Wheel<Rc<Parked>>>,
    wheel_work: Notify,
    /// When the wheel driver will wake next (`None`: it waits for work).
    wheel_sleep_until: Cell<Option<Instant>>,
    remote_parked: RefCell<HashMap<FetchKey, Weak<Parked>>>,
    early_wakes: RefCell<HashSet<FetchKey>>,
    warned_parked_limit: Cell<bool>,
    /// Whether a full cross-core queue (`cross.core.queue.depth`) was logged at warn level.
    warned_queue_full: Cell<bool>,

    admin_lock: Semaphore,
    /// One metadata snapshot applied at a time on this core (`apply_metadata`, and the
    /// retries of partitions that failed to open: `reopening`).
    apply_lock: Semaphore,
    reopening: Cell<bool>,
    /// Core 0 of a broker in a cluster: the metadata Raft group's node (`None` elsewhere
    /// and on a standalone broker).
    controller: RefCell<Option<Rc<crate::broker::controller::Node>>>,
    /// Core 0 of a broker in a cluster: the connections to the other brokers.
    peers: RefCell<Option<Rc<crate::broker::peer::Peers>>>,
    /// The group coordinator of the offset buckets this core owns.
    groups: RefCell<Option<Rc<Coordinator>>>,
    /// The transaction coordinator of the transaction-log buckets this core owns.
    txns: RefCell<Option<Rc<txn::TxnCoordinator>>>,
    /// Fired when the broker is told to stop: in a cluster its leaderships move away first
    /// (`step_down`, docs/replication.md "Controlled shutdown"), then `shutdown` fires.
    pub stopping: Event,
    pub shutdown: Event,
    pub connections: Cell<usize>,
    /// Memory of the requests this core's connections are still reading
    /// (`queued.max.request.bytes`): past it, reads wait (`server::read_frame`).
    pub reading: Rc<crate::broker::sync::ByteBudget>,
    /// Failed SASL logins by client address (`sasl.rs`: throttling).
    pub login_failures: crate::broker::login_failures::LoginFailures,
    /// This core's counters for the metrics endpoint.
    pub metrics: crate::broker::metrics::CoreMetrics,
    /// Transaction endings under way whose markers are written in part (`shard::markers`),
    /// by (producer id, epoch, commit, the transaction's start in ms).
    markers_written: RefCell<HashMap<(i64, i16, bool, i64), markers::MarkersWritten>>,
    /// The clock tick of the last producer id handed out here ([`producer_id`]).
    last_producer_tick: Cell<u64>,
    /// The internal topics (`__consumer_offsets`, `__transaction_state`) whose creation is
    /// under way from this core (`internal_topics`).
    creating_internal_topics: RefCell<HashSet<&'static str>>,
    /// `Global::metadata_current` (set at start-up; a standalone broker's is always true).
    pub metadata_current: RefCell<Arc<AtomicBool>>,
}

/// Topic id → name of every topic of `meta` (ids are stored as hex).
fn index_topic_ids(meta: &Metadata) -> HashMap<uuid::Uuid, String> {
    meta.topics
        .iter()
        .filter_map(|(name, t)| Some((uuid::Uuid::try_parse(&t.id).ok()?, name.clone())))
        .collect()
}

/// Parked fetches one core may have waiting on another. The mesh channels hold
/// `mesh_queue_depth + mesh_fetch_depth` messages, so a send never waits for space.
pub fn mesh_fetch_depth(cores: usize) -> usize {
    (32768 / cores.max(1)).clamp(512, 8192)
}

pub const WHEEL_TICK: Duration = Duration::from_millis(2);
const WHEEL_SLOTS: usize = 4096;

impl Shard {
    pub fn new(
        id: usize,
        cores: usize,
        config: Arc<BrokerConfig>,
        meta: Arc<Metadata>,
        req_tx: Option<Senders<ReqMsg>>,
        resp_tx: Option<Senders<RespMsg>>,
    ) -> Rc<Shard> {
        let depth = config.mesh_queue_depth;
        let reading = crate::broker::sync::ByteBudget::new(config.queued_max_request_bytes());
        Rc::new_cyclic(|shard| Shard {
            id,
            cores,
            replica_host: ReplicaHost::new(shard.clone(), id, cores, config.clone()),
            cache: BatchCache::with_read_budget(
                config.cache_bytes_per_core,
                config.read_cache_bytes_per_core,
            ),
            advertised: RefCell::new(Vec::new()),
            core_endpoints: RefCell::new(Vec::new()),
            config,
            topic_ids: RefCell::new(index_topic_ids(&meta)),
            meta: RefCell::new(meta),
            partitions: RefCell::new(HashMap::new()),
            req_tx,
            resp_tx,
            permits: (0..cores).map(|_| Semaphore::new(depth as u64)).collect(),
            call_order: (0..cores).map(|_| FifoLock::default()).collect(),
            fetch_permits: (0..cores)
                .map(|_| Semaphore::new(mesh_fetch_depth(cores) as u64))
                .collect(),
            pending: RefCell::new(HashMap::new()),
            next_call: Cell::new(1),
            wheel: RefCell::new(Wheel::new(WHEEL_TICK, WHEEL_SLOTS, Instant::now())),
            wheel_work: Notify::default(),
            wheel_sleep_until: Cell::new(None),
            remote_parked: RefCell::new(HashMap::new()),
            early_wakes: RefCell::new(HashSet::new()),
            warned_parked_limit: Cell::new(false),
            warned_queue_full: Cell::new(false),
            metrics: Default::default(),
            admin_lock: Semaphore::new(1),
            apply_lock: Semaphore::new(1),
            reopening: Cell::new(false),
            controller: RefCell::new(None),
            peers: RefCell::new(None),
            groups: RefCell::new(None),
            txns: RefCell::new(None),
            stopping: Event::default(),
            shutdown: Event::default(),
            connections: Cell::new(0),
            reading,
            login_failures: crate::broker::login_failures::LoginFailures::new(),
            markers_written: RefCell::new(HashMap::new()),
            last_producer_tick: Cell::new(0),
            creating_internal_topics: RefCell::new(HashSet::new()),
            metadata_current: RefCell::new(Arc::new(AtomicBool::new(true))),
        })
    }

    /// The name of the topic with id `id` in the current snapshot.
    pub fn topic_name(&self, id: &uuid::Uuid) -> Option<String> {
        let name = self.topic_ids.borrow().get(id).cloned();
        name.or_else(|| {
            let view = self.offsets_view()?;
            (uuid::Uuid::try_parse(&view.id).ok()? == *id)
                .then(|| crate::broker::group::offsets::OFFSETS_TOPIC.to_string())
        })
    }

    /// Installs a metadata snapshot (and its topic-id index).
    fn install_metadata(&self, meta: Arc<Metadata>) {
        *self.topic_ids.borrow_mut() = index_topic_ids(&meta);
        *self.meta.borrow_mut() = meta;
    }

    pub fn metadata(&self) -> Arc<Metadata> {
        self.meta.borrow().clone()
    }

    fn partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// The replica of a replicated partition on this core.
    fn replica(&self, topic: &str, partition: i32) -> Option<Rc<crate::broker::replica::Replica>> {
        self.partition(topic, partition)?.replica()
    }

    /// The host of this core's replicas.
    pub fn replica_host(&self) -> &Rc<ReplicaHost> {
        &self.replica_host
    }

    /// This core's open replicas (of its replicated partitions), now.
    fn replicas_now(&self) -> Vec<Rc<crate::broker::replica::Replica>> {
        self.partitions
            .borrow()
            .values()
            .filter_map(|p| p.replica())
            .collect()
    }

    /// A fresh id for a fetch that may park on other cores (see `Req::FetchWake`).
    pub fn next_fetch_id(&self) -> u64 {
        let id = self.next_call.get();
        self.next_call.set(id + 1);
        id
    }

    /// A producer id unique across cores, brokers and restarts ([`producer_id`]).
    pub fn new_producer_id(&self) -> i64 {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let broker = self.metadata().local_broker.unwrap_or(0);
        let (id, t) = producer_id(
            now_us,
            self.last_producer_tick.get(),
            broker,
            self.id,
            self.cores,
        );
        self.last_producer_tick.set(t);
        id
    }

    pub fn partition_sizes(&self) -> Vec<(String, i32, u64)> {
        self.partitions
            .borrow()
            .iter()
            .map(|((t, p), part)| (t.clone(), *p, part.log.size().1))
            .collect()
    }

    fn metrics_snapshot(&self) -> crate::broker::metrics::CoreSnapshot {
        let mut snap = crate::broker::metrics::CoreSnapshot {
            core: self.id,
            parked: self.wheel.borrow().len(),
            connections: self.connections.get(),
            request_memory_used: self.reading.used(),
            request_memory_waits: self.reading.waits(),
            ..Default::default()
        };
        self.metrics.fill(&mut snap);
        let depth = self.config.mesh_queue_depth;
        snap.queue_in_use = (0..self.cores)
            .filter(|&c| c != self.id)
            .filter_map(|c| {
                self.permits
                    .get(c)
                    .map(|p| (c, depth.saturating_sub(p.available() as usize)))
            })
            .collect();
        let cache = self.cache.stats();
        snap.cache_hits = cache.hits;
        snap.cache_misses = cache.misses;
        snap.cache_used_bytes = cache.used_bytes;
        snap.read_cache_used_bytes = cache.read_used_bytes;
        let files = weir_storage::io::open_file_stats();
        snap.open_segment_files = files.open;
        snap.segment_file_reopens = files.reopened;
        let replicas = self.replicas_now();
        snap.raft_groups = replicas.len();
        snap.raft_groups_asleep = replicas.iter().filter(|g| g.asleep()).count();
        snap.peer_links = self.replica_host.links().map_or(0, |l| l.open());
        let mut parts: Vec<_> = self
            .partitions
            .borrow()
            .iter()
            .map(|((t, p), part)| (t.clone(), *p, part.clone()))
            .collect();
        parts.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        snap.partitions = parts
            .into_iter()
            .map(|(topic, partition, part)| {
                let (segments, segment_bytes) = part.log.size();
                crate::broker::metrics::PartitionSnapshot {
                    topic,
                    partition,
                    bytes_in: part.bytes_in.get(),
                    records_in: part.records_in.get(),
                    bytes_out: part.bytes_out.get(),
                    segments,
                    segment_bytes,
                    log_end_offset: part.log.watermarks().log_end_offset,
                    flush: part.log.flush_stats(),
                    remote: part.log.tier_stats(),
                }
            })
            .collect();
        snap
    }
}

/// Microseconds from the Unix epoch to 2020-01-01: producer-id clocks count from there, so
/// their 51 bits last until 2091.
const PRODUCER_ID_EPOCH_US: u64 = 1_577_836_800_000_000;

/// A producer id: a clock tick (microseconds since 2020), then the broker id (12 bits).
/// `last` is the tick of this core's previous id: the tick is the first after both it and
/// the wall clock that belongs to this core (tick mod `cores` = `core`), so no two cores and no
/// two calls share one, however fast ids are asked for (a burst runs ahead of the wall clock
/// by a tick per id, and a restart takes longer than any burst ran ahead). Brokers are told
/// apart by their id modulo 4096. (Kafka has its controller hand out blocks of ids; this needs
/// no round trip and no state.)
pub(crate) fn producer_id(
    now_us: u64,
    last: u64,
    broker: u64,
    core: usize,
    cores: usize,
) -> (i64, u64) {
    let cores = cores.max(1) as u64;
    let mut tick = now_us.saturating_sub(PRODUCER_ID_EPOCH_US).max(last + 1);
    tick += (core as u64 % cores + cores - tick % cores) % cores;
    let tick = tick & ((1 << 51) - 1);
    (((tick << 12) | (broker & 0xfff)) as i64, tick)
}

#[cfg(test)]
mod producer_id_tests {
    use super::producer_id;
    use std::collections::HashSet;

    #[test]
    fn ids_never_repeat_across_calls_cores_brokers_and_restarts() {
        let now = 1_795_000_000_000_000; // 2026-11-18, in microseconds
        let mut seen = HashSet::new();
        for broker in [0, 1, 2] {
            for core in 0..3 {
                // A burst of 5,000 ids within one microsecond (it runs 15 ms ahead of the
                // wall clock), then a restart a second later.
                for start in [now, now + 1_000_000] {
                    let mut last = 0;
                    for _ in 0..5_000 {
                        let (id, tick) = producer_id(start, last, broker, core, 3);
                        assert!(id > 0);
                        assert!(seen.insert(id), "id {id} handed out twice");
                        last = tick;
                    }
                }
            }
        }
        // The old scheme (start time in ms, a 10-bit counter, the core) repeated its first id
        // after 1,024 ids on one core: a new idempotent producer then inherited another's
        // sequence numbers and got OUT_OF_ORDER_SEQUENCE_NUMBER on its first produce.
        assert_eq!(seen.len(), 3 * 3 * 2 * 5_000);
    }
}
