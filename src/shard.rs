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

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::channels::channel_mesh::{Receivers, Senders};
use glommio::sync::Semaphore;
use tracing::{debug, info, warn};
use weir_storage::{BatchCache, FifoLock, Log};

use crate::config::{apply_topic_config, BrokerConfig};
use crate::errors::{self, storage_error_code};
use crate::group::wire::{GroupReq, GroupResp};
use crate::group::{Coordinator, GroupConfig};
use crate::metadata::{new_topic_id, partition_dir, valid_topic_name, Metadata, TopicMeta};
use crate::sync::{Event, Notify, Slot};
use crate::wheel::{Wheel, WheelKey};

/// State shared by all cores (startup and shutdown coordination only; never on the data
/// path).
pub struct Global {
    pub shutdown: AtomicBool,
    /// Cores that have finished serving their connections.
    pub drained: AtomicUsize,
    /// Cores whose listener is bound (the "listening on" line is printed when all are).
    pub bound: AtomicUsize,
    /// The port every core binds (set by core 0).
    pub port: std::sync::atomic::AtomicU16,
    /// `listeners.per.core`: the port of each core's own listener (set by that core).
    pub core_ports: Vec<std::sync::atomic::AtomicU16>,
    pub exited: AtomicUsize,
}

impl Global {
    pub fn new(cores: usize) -> Global {
        Global {
            shutdown: AtomicBool::new(false),
            drained: AtomicUsize::new(0),
            bound: AtomicUsize::new(0),
            port: std::sync::atomic::AtomicU16::new(0),
            core_ports: (0..cores)
                .map(|_| std::sync::atomic::AtomicU16::new(0))
                .collect(),
            exited: AtomicUsize::new(0),
        }
    }
}

// ---- Messages between cores -------------------------------------------------------------

#[derive(Debug)]
pub struct ProducePart {
    pub topic: String,
    pub partition: i32,
    pub records: Bytes,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ProduceResult {
    pub error: i16,
    pub base_offset: i64,
    pub log_start_offset: i64,
}

#[derive(Debug, Clone)]
pub struct FetchPart {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

#[derive(Debug, Clone, Default)]
pub struct FetchResult {
    pub error: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub chunks: Vec<Bytes>,
}

impl FetchResult {
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

#[derive(Debug, Clone)]
pub struct ListPart {
    pub topic: String,
    pub partition: i32,
    pub timestamp: i64,
}

/// DeleteRecords for one partition: delete everything below `offset` (-1: the high
/// watermark).
#[derive(Debug, Clone)]
pub struct DeletePart {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

#[derive(Debug, Clone, Copy)]
pub struct ListResult {
    pub error: i16,
    pub offset: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, Option<String>)>,
}

/// CreatePartitions for one topic: the new total count, and optionally the broker (node id)
/// of each new partition.
#[derive(Debug, Clone)]
pub struct NewPartitions {
    pub name: String,
    pub count: i32,
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// A change to one topic's config overrides (AlterConfigs / IncrementalAlterConfigs).
#[derive(Debug, Clone)]
pub struct ConfigChange {
    pub topic: String,
    /// AlterConfigs replaces the whole override set with the SETs given; incremental
    /// changes only the keys named.
    pub replace_all: bool,
    /// (key, `Some(value)` to set, `None` to delete the override).
    pub ops: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone)]
pub struct TopicResult {
    pub name: String,
    pub error: i16,
    pub message: Option<String>,
    pub partitions: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FetchKey {
    pub from: usize,
    pub id: u64,
}

#[derive(Debug)]
pub enum Req {
    Produce {
        acks: i16,
        parts: Vec<ProducePart>,
    },
    Fetch {
        key: FetchKey,
        min_bytes: i32,
        max_wait_ms: i32,
        max_bytes: i32,
        parts: Vec<FetchPart>,
    },
    /// The requesting core has enough data from other cores: answer the parked fetch now.
    FetchWake(FetchKey),
    ListOffsets(Vec<ListPart>),
    /// → the owner: DeleteRecords; answered with (error, new low watermark) per partition.
    DeleteRecords(Vec<DeletePart>),
    /// Core 0 → others: a new metadata snapshot; reply once local logs match it.
    Apply(Arc<Metadata>),
    /// → core 0.
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    /// → core 0.
    DeleteTopics(Vec<String>),
    /// → core 0.
    CreatePartitions {
        topics: Vec<NewPartitions>,
        validate_only: bool,
    },
    /// → core 0: per-topic config overrides.
    AlterConfigs {
        changes: Vec<ConfigChange>,
        validate_only: bool,
    },
    /// → the core owning the group (`Coordinator::core_of`).
    Group(GroupReq),
    /// This core's figures for the metrics endpoint.
    Metrics,
    /// This core's partitions and their sizes (DescribeLogDirs).
    PartitionSizes,
}

#[derive(Debug)]
pub enum Resp {
    Produce(Vec<ProduceResult>),
    Fetch(Vec<FetchResult>),
    ListOffsets(Vec<ListResult>),
    /// (error, low watermark) per partition of a `Req::DeleteRecords`.
    LowWatermarks(Vec<(i16, i64)>),
    Topics(Vec<TopicResult>),
    Group(GroupResp),
    /// Reply to `Req::Apply`: the partitions this core could not open.
    Applied(Vec<OpenFailure>),
    Metrics(Box<crate::metrics::CoreSnapshot>),
    PartitionSizes(Vec<(String, i32, u64)>),
    Done,
}

/// A partition log that a core could not open when applying metadata.
#[derive(Debug, Clone)]
pub struct OpenFailure {
    pub topic: String,
    pub partition: i32,
    pub core: usize,
    pub error: String,
}

/// Envelope on the request mesh: (from core, call id, request).
pub type ReqMsg = (usize, u64, Req);
/// Envelope on the reply mesh: (call id, reply).
pub type RespMsg = (u64, Resp);

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

pub struct Partition {
    pub topic_id: String,
    pub log: Log,
    waiters: Waiters,
    /// Disk errors seen on this partition: the first is logged as a warning, the rest at
    /// debug level (a dead disk under a busy partition must not flood the log).
    io_errors: Cell<u64>,
    /// For the metrics: batch bytes and records appended, batch bytes fetched.
    bytes_in: Cell<u64>,
    records_in: Cell<u64>,
    bytes_out: Cell<u64>,
}

impl Partition {
    /// Logs a disk error of this partition: once at warn level, then at debug level.
    fn log_io_error(&self, topic: &str, partition: i32, op: &str, e: &weir_storage::Error) {
        let n = self.io_errors.get() + 1;
        self.io_errors.set(n);
        if n == 1 {
            warn!(topic, partition, op, error = %e,
                "disk error on this partition; its requests get KAFKA_STORAGE_ERROR (further errors at debug level)");
        } else {
            debug!(topic, partition, op, error = %e, errors = n, "disk error");
        }
    }
}

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
    /// host and port put in Metadata responses.
    pub advertised: RefCell<(String, i32)>,
    /// `listeners.per.core`: every core's advertised (host, port), indexed by core = broker
    /// id in Metadata. Empty: the broker is advertised as one node, id 0.
    pub core_endpoints: RefCell<Vec<(String, i32)>>,
    meta: RefCell<Arc<Metadata>>,
    partitions: RefCell<HashMap<(String, i32), Rc<Partition>>>,
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
    /// The group coordinator of the offset buckets this core owns.
    groups: RefCell<Option<Rc<Coordinator>>>,
    pub shutdown: Event,
    pub connections: Cell<usize>,
    /// This core's counters for the metrics endpoint.
    pub metrics: crate::metrics::CoreMetrics,
    next_producer: Cell<u64>,
    started_ms: i64,
}

/// The metadata change of an admin request could not be saved: every topic it would have
/// changed is reported as KAFKA_STORAGE_ERROR, with the cause.
fn fail_unsaved(results: &mut [TopicResult], e: &str) {
    for r in results.iter_mut().filter(|r| r.error == errors::NONE) {
        r.error = errors::KAFKA_STORAGE_ERROR;
        r.message = Some(e.to_string());
    }
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
        Rc::new(Shard {
            id,
            cores,
            cache: BatchCache::with_read_budget(
                config.cache_bytes_per_core,
                config.read_cache_bytes_per_core,
            ),
            advertised: RefCell::new((String::new(), 0)),
            core_endpoints: RefCell::new(Vec::new()),
            config,
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
            groups: RefCell::new(None),
            shutdown: Event::default(),
            connections: Cell::new(0),
            next_producer: Cell::new(0),
            started_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
        })
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

    /// A fresh id for a fetch that may park on other cores (see `Req::FetchWake`).
    pub fn next_fetch_id(&self) -> u64 {
        let id = self.next_call.get();
        self.next_call.set(id + 1);
        id
    }

    /// A producer id unique across cores and restarts: start time in ms, then a counter,
    /// then the core.
    pub fn new_producer_id(&self) -> i64 {
        let n = self.next_producer.get();
        self.next_producer.set(n + 1);
        let base = self.started_ms & ((1 << 41) - 1);
        (base << 20) | ((n & 0x3ff) << 10) as i64 | (self.id as i64 & 0x3ff)
    }

    // ---- Cross-core calls ----

    /// Runs `req` on core `owner`: in place if that is this core, else over the mesh.
    pub async fn call(self: &Rc<Self>, owner: usize, req: Req) -> Resp {
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
        let turn = self.call_order[owner].lock();
        let Some(turn) = turn.await else {
            return Resp::Done;
        };
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
    fn note_queue_full(&self, owner: usize) {
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
    async fn handle(self: &Rc<Self>, from: usize, req: Req) -> Resp {
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
            Req::DeleteRecords(parts) => {
                Resp::LowWatermarks(self.delete_records_local(parts).await)
            }
            Req::Metrics => Resp::Metrics(Box::new(self.metrics_snapshot())),
            Req::PartitionSizes => Resp::PartitionSizes(self.partition_sizes()),
            Req::Apply(meta) => Resp::Applied(self.apply_metadata(meta).await),
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
            Req::Group(g) => {
                let coordinator = self.groups.borrow().clone();
                match coordinator {
                    Some(c) => Resp::Group(crate::group::wire::serve(&c, g).await),
                    None => Resp::Group(GroupResp::Code(
                        crate::group::coordinator::codes::COORDINATOR_NOT_AVAILABLE,
                    )),
                }
            }
        }
    }

    // ---- Produce ----

    pub async fn produce_local(
        self: &Rc<Self>,
        acks: i16,
        parts: Vec<ProducePart>,
    ) -> Vec<ProduceResult> {
        // Every append starts (validates and queues on its log's append lock) in this
        // function's first poll, in request order, whatever the number of partitions: a
        // connection's pipelined requests then append in the order they arrived. (Spawning
        // a task per partition here let a later single-partition request overtake them.)
        // The appends of different partitions still run, and flush, concurrently.
        crate::sync::join_all(
            parts
                .into_iter()
                .map(|p| self.produce_one(acks, p))
                .collect(),
        )
        .await
    }

    async fn produce_one(&self, acks: i16, p: ProducePart) -> ProduceResult {
        let fail = |error| {
            self.metrics
                .error(kafka_protocol::messages::ApiKey::Produce, error);
            ProduceResult {
                error,
                base_offset: -1,
                log_start_offset: -1,
            }
        };
        let Some(part) = self.partition(&p.topic, p.partition) else {
            return fail(errors::UNKNOWN_TOPIC_OR_PARTITION);
        };
        if p.records.is_empty() {
            return fail(errors::CORRUPT_MESSAGE);
        }
        let bytes = p.records.len() as u64;
        match part.log.append(p.records).await {
            Ok(info) => {
                if info.duplicate {
                    // An idempotent producer's retry: answered with the original offsets.
                    debug!(topic = %p.topic, partition = p.partition, base_offset = info.base_offset, "duplicate batch not written again");
                } else {
                    part.bytes_in.set(part.bytes_in.get() + bytes);
                    part.records_in
                        .set(part.records_in.get() + info.last_offset - info.base_offset + 1);
                }
                if acks == -1 {
                    if let Err(e) = part.log.flush().await {
                        part.log_io_error(&p.topic, p.partition, "flush", &e);
                        return fail(storage_error_code(&e));
                    }
                }
                ProduceResult {
                    error: errors::NONE,
                    base_offset: info.base_offset as i64,
                    log_start_offset: info.log_start_offset as i64,
                }
            }
            Err(e) => {
                if e.is_storage_error() {
                    part.log_io_error(&p.topic, p.partition, "append", &e);
                } else {
                    debug!(topic = %p.topic, partition = p.partition, error = %e, "append refused");
                }
                fail(storage_error_code(&e))
            }
        }
    }

    // ---- Fetch ----

    async fn read_parts(
        &self,
        parts: &[FetchPart],
        min_bytes: i32,
        max_bytes: i32,
    ) -> (Vec<FetchResult>, Vec<u64>) {
        let mut remaining = max_bytes.max(0) as usize;
        // What the fetch still needs before it may answer: reads wait for the disk only
        // until then, and past it take what the read-ahead holds (`Log::read_available`).
        let mut wanted = min_bytes.max(1) as usize;
        let mut out = Vec::with_capacity(parts.len());
        let mut hws = Vec::with_capacity(parts.len());
        for p in parts {
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push(FetchResult {
                    error: errors::UNKNOWN_TOPIC_OR_PARTITION,
                    high_watermark: -1,
                    log_start_offset: -1,
                    chunks: Vec::new(),
                });
                hws.push(0);
                continue;
            };
            let wm = part.log.watermarks();
            let mut r = FetchResult {
                error: errors::NONE,
                high_watermark: wm.high_watermark as i64,
                log_start_offset: wm.log_start_offset as i64,
                chunks: Vec::new(),
            };
            if p.offset < 0 {
                r.error = errors::OFFSET_OUT_OF_RANGE;
            } else if remaining > 0 || out.iter().all(|r: &FetchResult| r.chunks.is_empty()) {
                let limit = (p.max_bytes.max(0) as usize).min(remaining.max(1));
                match part
                    .log
                    .read_available(p.offset as u64, wanted, limit)
                    .await
                {
                    Ok(read) => {
                        r.high_watermark = read.watermarks.high_watermark as i64;
                        r.log_start_offset = read.watermarks.log_start_offset as i64;
                        remaining = remaining.saturating_sub(read.len());
                        wanted = wanted.saturating_sub(read.len()).max(1);
                        r.chunks = read.chunks;
                    }
                    Err(e) => {
                        if e.is_storage_error() {
                            part.log_io_error(&p.topic, p.partition, "read", &e);
                        }
                        r.error = storage_error_code(&e);
                    }
                }
            }
            hws.push(r.high_watermark.max(0) as u64);
            out.push(r);
        }
        (out, hws)
    }

    /// Serves a fetch for partitions this core owns; parks it in the wheel while it has
    /// less than `min_bytes`, until data arrives (woken by `Log::on_append`), the deadline
    /// passes, or the requesting core says it has enough (`FetchWake`).
    pub async fn fetch_local(
        self: &Rc<Self>,
        key: Option<FetchKey>,
        min_bytes: i32,
        max_wait_ms: i32,
        max_bytes: i32,
        parts: &[FetchPart],
    ) -> Vec<FetchResult> {
        let wait = (max_wait_ms.max(0) as u64).min(self.config.fetch_max_wait_ms);
        let deadline = Instant::now() + Duration::from_millis(wait);
        let mut external = false;
        loop {
            let (results, hws) = self.read_parts(parts, min_bytes, max_bytes).await;
            let total: usize = results.iter().map(FetchResult::bytes).sum();
            let any_error = results.iter().any(|r| r.error != errors::NONE);
            if total as i64 >= i64::from(min_bytes)
                || any_error
                || external
                || Instant::now() >= deadline
                || self.shutdown.is_fired()
            {
                return self.count_fetched(parts, results);
            }
            if let Some(k) = key {
                if self.early_wakes.borrow_mut().remove(&k) {
                    return self.count_fetched(parts, results);
                }
            }
            // Data may have landed while we were reading: read again instead of parking.
            let moved = parts.iter().zip(&hws).any(|(p, hw)| {
                self.partition(&p.topic, p.partition)
                    .is_some_and(|part| part.log.watermarks().high_watermark != *hw)
            });
            if moved {
                continue;
            }
            if self.wheel.borrow().len() >= self.config.max_parked_fetches {
                if !self.warned_parked_limit.replace(true) {
                    warn!(
                        core = self.id,
                        limit = self.config.max_parked_fetches,
                        "parked fetch limit reached: fetches are answered at once (fetch.max.parked)"
                    );
                }
                return self.count_fetched(parts, results);
            }
            let parked = Rc::new(Parked {
                fired: Cell::new(false),
                external: Cell::new(false),
                signal: Event::default(),
            });
            for p in parts {
                if let Some(part) = self.partition(&p.topic, p.partition) {
                    let mut ws = part.waiters.borrow_mut();
                    // Amortised cleanup of entries left by fetches that timed out.
                    if ws.len() >= 32 && ws.len().is_power_of_two() {
                        ws.retain(|w| w.upgrade().is_some_and(|p| !p.fired.get()));
                    }
                    ws.push(Rc::downgrade(&parked));
                }
            }
            let wheel_key: WheelKey = {
                let mut wheel = self.wheel.borrow_mut();
                let k = wheel.insert(deadline, parked.clone());
                // Wake the driver if it sleeps past this deadline (or not at all).
                let sleeps_until = self.wheel_sleep_until.get();
                if sleeps_until.is_none_or(|t| deadline < t) {
                    self.wheel_work.notify();
                }
                k
            };
            if let Some(k) = key {
                self.remote_parked
                    .borrow_mut()
                    .insert(k, Rc::downgrade(&parked));
            }
            parked.signal.wait().await;
            if Instant::now() >= deadline {
                crate::metrics::CoreMetrics::bump(&self.metrics.wheel_expired);
            } else {
                crate::metrics::CoreMetrics::bump(&self.metrics.wheel_woken);
            }
            self.wheel.borrow_mut().remove(wheel_key);
            if let Some(k) = key {
                self.remote_parked.borrow_mut().remove(&k);
            }
            external = parked.external.get();
        }
    }

    /// Counts what a fetch returns (bytes out per partition, errors) before it goes.
    fn count_fetched(&self, parts: &[FetchPart], results: Vec<FetchResult>) -> Vec<FetchResult> {
        for (p, r) in parts.iter().zip(&results) {
            self.metrics
                .error(kafka_protocol::messages::ApiKey::Fetch, r.error);
            if let Some(part) = self.partition(&p.topic, p.partition) {
                part.bytes_out.set(part.bytes_out.get() + r.bytes() as u64);
            }
        }
        results
    }

    /// This core's figures (`Req::Metrics`).
    /// (topic, partition, bytes on disk) of this core's partitions (DescribeLogDirs).
    pub fn partition_sizes(&self) -> Vec<(String, i32, u64)> {
        self.partitions
            .borrow()
            .iter()
            .map(|((t, p), part)| (t.clone(), *p, part.log.size().1))
            .collect()
    }

    fn metrics_snapshot(&self) -> crate::metrics::CoreSnapshot {
        let mut snap = crate::metrics::CoreSnapshot {
            core: self.id,
            parked: self.wheel.borrow().len(),
            connections: self.connections.get(),
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
                crate::metrics::PartitionSnapshot {
                    topic,
                    partition,
                    bytes_in: part.bytes_in.get(),
                    records_in: part.records_in.get(),
                    bytes_out: part.bytes_out.get(),
                    segments,
                    segment_bytes,
                    log_end_offset: part.log.watermarks().log_end_offset,
                    flush: part.log.flush_stats(),
                }
            })
            .collect();
        snap
    }

    fn wake_remote(&self, key: FetchKey) {
        let parked = self.remote_parked.borrow_mut().remove(&key);
        match parked.and_then(|w| w.upgrade()) {
            Some(p) => {
                p.external.set(true);
                p.fire();
            }
            None => {
                let mut early = self.early_wakes.borrow_mut();
                if early.len() > 10_000 {
                    early.clear();
                }
                early.insert(key);
            }
        }
    }

    /// Drives the wheel with one timer: sleeps until the first non-empty bucket is due (or
    /// a fetch with an earlier deadline is parked), then expires what is due.
    pub async fn run_wheel(self: Rc<Self>) {
        let mut expired = Vec::new();
        loop {
            let next = self.wheel.borrow().next_wake_at();
            self.wheel_sleep_until.set(next);
            let woken = async {
                futures_lite::future::or(self.wheel_work.notified(), self.shutdown.wait()).await
            };
            match next {
                None => woken.await,
                Some(at) => {
                    let now = Instant::now();
                    if at > now {
                        futures_lite::future::or(glommio::timer::sleep(at - now), woken).await;
                    }
                }
            }
            self.wheel_sleep_until.set(None);
            if self.shutdown.is_fired() {
                // Answer everything parked now; later fetches return at once.
                let all: Vec<Rc<Parked>> = {
                    let mut w = self.wheel.borrow_mut();
                    let mut out = Vec::new();
                    w.advance(Instant::now() + Duration::from_secs(3600), &mut out);
                    out
                };
                all.iter().for_each(|p| p.fire());
                if self.wheel.borrow().is_empty() {
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
                continue;
            }
            self.wheel
                .borrow_mut()
                .advance(Instant::now(), &mut expired);
            for p in expired.drain(..) {
                p.fire();
            }
        }
    }

    // ---- ListOffsets ----

    /// DeleteRecords on this core's partitions: moves each log start (durably) and deletes
    /// the segments wholly below it. Kafka's errors: an unknown partition, an offset past the
    /// high watermark (OFFSET_OUT_OF_RANGE).
    async fn delete_records_local(&self, parts: Vec<DeletePart>) -> Vec<(i16, i64)> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push((errors::UNKNOWN_TOPIC_OR_PARTITION, -1));
                continue;
            };
            let wm = part.log.watermarks();
            let target = match p.offset {
                -1 => wm.high_watermark,
                o if o < 0 => {
                    out.push((errors::OFFSET_OUT_OF_RANGE, wm.log_start_offset as i64));
                    continue;
                }
                o => o as u64,
            };
            out.push(match part.log.set_log_start_offset(target).await {
                Ok(()) => {
                    info!(topic = %p.topic, partition = p.partition, offset = target, "records deleted");
                    (
                        errors::NONE,
                        part.log.watermarks().log_start_offset as i64,
                    )
                }
                Err(e) => (storage_error_code(&e), wm.log_start_offset as i64),
            });
        }
        out
    }

    async fn list_offsets_local(&self, parts: Vec<ListPart>) -> Vec<ListResult> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push(ListResult {
                    error: errors::UNKNOWN_TOPIC_OR_PARTITION,
                    offset: -1,
                    timestamp: -1,
                });
                continue;
            };
            let wm = part.log.watermarks();
            let r = match p.timestamp {
                -1 => Ok((wm.high_watermark as i64, -1)),
                -2 => Ok((wm.log_start_offset as i64, -1)),
                // MAX_TIMESTAMP (ListOffsets v7, KIP-734): the record with the largest
                // timestamp; -1/-1 when the log holds none.
                -3 => match part.log.max_timestamp_offset().await {
                    Ok(Some((off, t))) => Ok((off as i64, t)),
                    Ok(None) => Ok((-1, -1)),
                    Err(e) => Err(e),
                },
                ts if ts < 0 => Ok((wm.high_watermark as i64, -1)),
                ts => match part.log.offset_for_timestamp(ts).await {
                    Ok(Some((off, t))) => Ok((off as i64, t)),
                    Ok(None) => Ok((-1, -1)),
                    Err(e) => Err(e),
                },
            };
            out.push(match r {
                Ok((offset, timestamp)) => ListResult {
                    error: errors::NONE,
                    offset,
                    timestamp,
                },
                Err(e) => ListResult {
                    error: storage_error_code(&e),
                    offset: -1,
                    timestamp: -1,
                },
            });
        }
        out
    }

    // ---- Metadata changes (core 0) ----

    async fn admin_create(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let mut results = Vec::new();
        let mut changed = false;
        for t in topics {
            let mut r = TopicResult {
                name: t.name.clone(),
                error: errors::NONE,
                message: None,
                partitions: t.partitions,
            };
            let count = if t.partitions == -1 {
                self.config.num_partitions as i32
            } else {
                t.partitions
            };
            r.partitions = count;
            let mut configs = std::collections::BTreeMap::new();
            let mut probe = self.config.log_config(&configs);
            let mut bad_config = None;
            for (k, v) in &t.configs {
                let Some(v) = v else { continue };
                match apply_topic_config(&mut probe, k, v) {
                    Ok(()) => {
                        configs.insert(k.clone(), v.clone());
                    }
                    Err(e) => bad_config = Some(e),
                }
            }
            if !valid_topic_name(&t.name) {
                r.error = errors::INVALID_TOPIC_EXCEPTION;
                r.message = Some(format!("invalid topic name '{}'", t.name));
            } else if meta.topics.contains_key(&t.name) {
                r.error = errors::TOPIC_ALREADY_EXISTS;
                r.message = Some(format!("topic '{}' already exists", t.name));
            } else if count <= 0 || count > 100_000 {
                r.error = errors::INVALID_PARTITIONS;
                r.message = Some(format!("invalid partition count {count}"));
            } else if t.replication_factor > 1
                || t.replication_factor == 0
                || t.replication_factor < -1
            {
                r.error = errors::INVALID_REPLICATION_FACTOR;
                r.message = Some(format!(
                    "replication factor {} is not available: this is a single broker",
                    t.replication_factor
                ));
            } else if let Some(e) = bad_config {
                r.error = errors::INVALID_CONFIG;
                r.message = Some(e);
            } else if !validate_only {
                // A crash between a DeleteTopics (metadata saved) and the owner deleting the
                // log can leave a directory behind: a new topic of that name starts empty.
                self.remove_stale_dirs(&t.name).await;
                let owners = meta.place_new(count as usize);
                meta.topics.insert(
                    t.name.clone(),
                    TopicMeta {
                        id: new_topic_id(),
                        owners,
                        configs,
                    },
                );
                changed = true;
                info!(topic = %t.name, partitions = count, "topic created");
            }
            results.push(r);
        }
        if changed {
            match self.commit_metadata_reporting(meta).await {
                Err(e) => fail_unsaved(&mut results, &e),
                Ok(failures) => self.undo_failed_creates(&mut results, failures).await,
            }
        }
        results
    }

    /// A created topic some of whose logs could not be opened (a file in the way, EIO, out of
    /// file descriptors) is not half-created: the creation is reported failed, with the cause,
    /// and the topic is removed again, so that a retry starts from nothing.
    async fn undo_failed_creates(
        self: &Rc<Self>,
        results: &mut [TopicResult],
        failures: Vec<OpenFailure>,
    ) {
        let mut meta = (*self.metadata()).clone();
        let mut undo = false;
        for r in results.iter_mut().filter(|r| r.error == errors::NONE) {
            let Some(f) = failures.iter().find(|f| f.topic == r.name) else {
                continue;
            };
            warn!(topic = %r.name, partition = f.partition, core = f.core, error = %f.error,
                "topic creation failed: a partition log cannot be opened; removing the topic");
            r.error = errors::KAFKA_STORAGE_ERROR;
            r.message = Some(format!(
                "cannot create the log of partition {}: {}",
                f.partition, f.error
            ));
            undo |= meta.topics.remove(&r.name).is_some();
        }
        if undo {
            if let Err(e) = self.commit_metadata(meta).await {
                warn!(error = %e, "removing a topic whose creation failed");
            }
        }
    }

    /// CreatePartitions: grows topics to `count` partitions. The new partitions are placed on
    /// the least loaded cores (or, with `listeners.per.core`, on the node an assignment names),
    /// saved in the metadata, and opened by their owners before the answer. Kafka's errors:
    /// an unknown topic, a count that does not grow, a bad assignment.
    async fn admin_create_partitions(
        self: &Rc<Self>,
        topics: Vec<NewPartitions>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let per_core = !self.core_endpoints.borrow().is_empty();
        let mut results = Vec::new();
        let mut grown: Vec<(String, usize, usize)> = Vec::new(); // (topic, old, new)
        for (i, t) in topics.iter().enumerate() {
            let mut r = TopicResult {
                name: t.name.clone(),
                error: errors::NONE,
                message: None,
                partitions: t.count,
            };
            let current = meta.topics.get(&t.name).map(|m| m.owners.len());
            let fail = |r: &mut TopicResult, code: i16, msg: String| {
                r.error = code;
                r.message = Some(msg);
            };
            if topics[..i].iter().any(|o| o.name == t.name) {
                fail(
                    &mut r,
                    errors::INVALID_REQUEST,
                    format!("topic '{}' is named twice", t.name),
                );
            } else if let Some(current) = current {
                let new = t.count.max(0) as usize;
                if t.count <= 0 || new <= current {
                    fail(
                        &mut r,
                        errors::INVALID_PARTITIONS,
                        format!(
                            "topic '{}' has {current} partitions; the new count {} must be higher",
                            t.name, t.count
                        ),
                    );
                } else if new > 100_000 {
                    fail(
                        &mut r,
                        errors::INVALID_PARTITIONS,
                        format!("invalid partition count {new}"),
                    );
                } else {
                    let mut owners = meta.place_new(new - current);
                    if let Some(a) = &t.assignments {
                        if a.len() != new - current {
                            fail(
                                &mut r,
                                errors::INVALID_REPLICA_ASSIGNMENT,
                                format!(
                                    "{} assignments for {} new partitions",
                                    a.len(),
                                    new - current
                                ),
                            );
                        }
                        for (j, brokers) in a.iter().enumerate().take(owners.len()) {
                            let node = match brokers.as_slice() {
                                [n] => *n,
                                _ => {
                                    fail(
                                        &mut r,
                                        errors::INVALID_REPLICA_ASSIGNMENT,
                                        format!(
                                            "partition {}: {} replicas; a single broker has 1",
                                            current + j,
                                            brokers.len()
                                        ),
                                    );
                                    break;
                                }
                            };
                            let nodes = if per_core { self.cores } else { 1 };
                            if node < 0 || node as usize >= nodes {
                                fail(
                                    &mut r,
                                    errors::INVALID_REPLICA_ASSIGNMENT,
                                    format!("partition {}: unknown broker {node}", current + j),
                                );
                                break;
                            }
                            if per_core {
                                owners[j] = node as usize;
                            }
                        }
                    }
                    if r.error == errors::NONE && !validate_only {
                        if let Some(m) = meta.topics.get_mut(&t.name) {
                            m.owners.extend(owners);
                        }
                        grown.push((t.name.clone(), current, new));
                        info!(topic = %t.name, from = current, to = new, "partitions added");
                    }
                }
            } else {
                fail(
                    &mut r,
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("unknown topic '{}'", t.name),
                );
            }
            results.push(r);
        }
        if grown.is_empty() {
            return results;
        }
        // A directory left at a new partition's name (a crash in an earlier life of the
        // topic) must not become the new partition's data.
        let (dir, stale) = (
            self.config.data_dir.clone(),
            grown
                .iter()
                .flat_map(|(t, old, new)| (*old..*new).map(move |p| format!("{t}-{p}")))
                .collect::<Vec<_>>(),
        );
        weir_storage::io::off_reactor(move || {
            for name in stale {
                let path = dir.join(name);
                if path.is_dir() {
                    warn!(dir = %path.display(), "removing a stale log in the way of a new partition");
                    let _ = std::fs::remove_dir_all(&path);
                }
            }
        })
        .await;
        match self.commit_metadata_reporting(meta).await {
            Err(e) => fail_unsaved(&mut results, &e),
            Ok(failures) if !failures.is_empty() => {
                // Not half-grown: the topic goes back to its old partitions.
                let mut meta = (*self.metadata()).clone();
                for r in results.iter_mut().filter(|r| r.error == errors::NONE) {
                    let Some(f) = failures.iter().find(|f| f.topic == r.name) else {
                        continue;
                    };
                    warn!(topic = %r.name, partition = f.partition, error = %f.error,
                        "adding partitions failed: a log cannot be opened; undoing");
                    r.error = errors::KAFKA_STORAGE_ERROR;
                    r.message = Some(format!(
                        "cannot create the log of partition {}: {}",
                        f.partition, f.error
                    ));
                    if let (Some(m), Some((_, old, _))) = (
                        meta.topics.get_mut(&r.name),
                        grown.iter().find(|g| g.0 == r.name),
                    ) {
                        m.owners.truncate(*old);
                    }
                }
                if let Err(e) = self.commit_metadata(meta).await {
                    warn!(error = %e, "undoing partitions whose creation failed");
                }
            }
            Ok(_) => {}
        }
        results
    }

    async fn admin_delete(self: &Rc<Self>, names: Vec<String>) -> Vec<TopicResult> {
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let mut results = Vec::new();
        let mut changed = false;
        for name in names {
            let mut r = TopicResult {
                name: name.clone(),
                error: errors::NONE,
                message: None,
                partitions: 0,
            };
            if meta.topics.remove(&name).is_some() {
                changed = true;
                info!(topic = %name, "topic deleted");
            } else {
                r.error = errors::UNKNOWN_TOPIC_OR_PARTITION;
            }
            results.push(r);
        }
        if changed {
            if let Err(e) = self.commit_metadata(meta).await {
                fail_unsaved(&mut results, &e);
            }
        }
        results
    }

    /// Changes topics' config overrides: validated like CreateTopics' configs, saved in the
    /// metadata, and applied to the open logs by every core (`apply_metadata`).
    async fn admin_alter_configs(
        self: &Rc<Self>,
        changes: Vec<ConfigChange>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let mut results = Vec::new();
        let mut changed = false;
        for c in changes {
            let mut r = TopicResult {
                name: c.topic.clone(),
                error: errors::NONE,
                message: None,
                partitions: 0,
            };
            let Some(t) = meta.topics.get_mut(&c.topic) else {
                r.error = errors::UNKNOWN_TOPIC_OR_PARTITION;
                r.message = Some(format!("unknown topic '{}'", c.topic));
                results.push(r);
                continue;
            };
            let mut configs = if c.replace_all {
                std::collections::BTreeMap::new()
            } else {
                t.configs.clone()
            };
            for (k, v) in &c.ops {
                match v {
                    Some(v) => configs.insert(k.clone(), v.trim().to_string()),
                    None => configs.remove(k),
                };
            }
            let mut probe = self.config.log_config(&std::collections::BTreeMap::new());
            let bad = configs
                .iter()
                .find_map(|(k, v)| apply_topic_config(&mut probe, k, v).err());
            if let Some(e) = bad {
                r.error = errors::INVALID_CONFIG;
                r.message = Some(e);
            } else if !validate_only && configs != t.configs {
                info!(topic = %c.topic, ?configs, "topic configs changed");
                t.configs = configs;
                changed = true;
            }
            results.push(r);
        }
        if changed {
            if let Err(e) = self.commit_metadata(meta).await {
                fail_unsaved(&mut results, &e);
            }
        }
        results
    }

    /// The broker id that leads a partition owned by `core` (and coordinates a group living
    /// there): the core itself with `listeners.per.core`, else the one node 0.
    pub fn node_of(&self, core: usize) -> i32 {
        if self.core_endpoints.borrow().is_empty() {
            0
        } else {
            core as i32
        }
    }

    /// Removes `topic-N` directories of a topic that is not in the metadata (on the blocking
    /// pool: a deleted topic's logs can be large).
    async fn remove_stale_dirs(&self, topic: &str) {
        let (prefix, dir) = (format!("{topic}-"), self.config.data_dir.clone());
        weir_storage::io::off_reactor(move || remove_stale_dirs(&dir, &prefix)).await
    }

    /// Writes the new metadata durably, then makes every core apply it (this one first).
    async fn commit_metadata(self: &Rc<Self>, meta: Metadata) -> Result<(), String> {
        self.commit_metadata_reporting(meta).await.map(|_| ())
    }

    /// `commit_metadata`, returning the partition logs that could not be opened.
    async fn commit_metadata_reporting(
        self: &Rc<Self>,
        mut meta: Metadata,
    ) -> Result<Vec<OpenFailure>, String> {
        meta.epoch += 1;
        // Buffered write + two fsyncs: on the blocking pool, so that core 0's partitions keep
        // being served meanwhile.
        let meta = Arc::new(meta);
        let (saved, dir) = (meta.clone(), self.config.data_dir.clone());
        weir_storage::io::off_reactor(move || saved.save(&dir)).await?;
        let mut failures = self.apply_metadata(meta.clone()).await;
        for core in 0..self.cores {
            if core != self.id {
                // Boxed: `call` → `handle` → `admin_*` → here is a recursive async cycle.
                if let Resp::Applied(f) = Box::pin(self.call(core, Req::Apply(meta.clone()))).await
                {
                    failures.extend(f);
                }
            }
        }
        Ok(failures)
    }

    /// Opens the logs this core now owns, closes and deletes the ones of deleted topics,
    /// updates configs, and installs the snapshot. Returns the logs that failed to open.
    pub async fn apply_metadata(self: &Rc<Self>, meta: Arc<Metadata>) -> Vec<OpenFailure> {
        let mut failures = Vec::new();
        // Deleted (or recreated) topics first, so a recreated topic gets a fresh directory.
        let stale: Vec<(String, i32)> = self
            .partitions
            .borrow()
            .iter()
            .filter(|((topic, p), part)| {
                meta.owner(topic, *p) != Some(self.id)
                    || meta.topics.get(topic).is_none_or(|t| t.id != part.topic_id)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            let part = self.partitions.borrow_mut().remove(&key);
            if let Some(part) = part {
                let gone = meta
                    .topics
                    .get(&key.0)
                    .is_none_or(|t| t.id != part.topic_id);
                wake_waiters(&part.waiters);
                self.retire(part, gone).await;
            }
        }
        for (name, t) in &meta.topics {
            let config = self.config.log_config(&t.configs);
            for (p, &owner) in t.owners.iter().enumerate() {
                if owner != self.id {
                    continue;
                }
                let p = p as i32;
                if let Some(existing) = self.partition(name, p) {
                    existing.log.set_config(config.clone());
                    continue;
                }
                match self.open_partition(name, p, &t.id, config.clone()).await {
                    Ok(()) => {}
                    Err(e) => {
                        warn!(topic = %name, partition = p, error = %e, "cannot open partition log");
                        failures.push(OpenFailure {
                            topic: name.clone(),
                            partition: p,
                            core: self.id,
                            error: e.to_string(),
                        });
                    }
                }
            }
        }
        *self.meta.borrow_mut() = meta;
        failures
    }

    pub async fn open_partition(
        &self,
        topic: &str,
        partition: i32,
        topic_id: &str,
        config: weir_storage::LogConfig,
    ) -> Result<(), weir_storage::Error> {
        let dir = partition_dir(&self.config.data_dir, topic, partition);
        let log = Log::open_with_cache(&dir, config, self.cache.clone()).await?;
        let waiters: Waiters = Rc::new(RefCell::new(Vec::new()));
        let w = waiters.clone();
        log.on_append(move |_| wake_waiters(&w));
        debug!(core = self.id, topic, partition, "partition opened");
        self.partitions.borrow_mut().insert(
            (topic.to_string(), partition),
            Rc::new(Partition {
                topic_id: topic_id.to_string(),
                log,
                waiters,
                io_errors: Cell::new(0),
                bytes_in: Cell::new(0),
                records_in: Cell::new(0),
                bytes_out: Cell::new(0),
            }),
        );
        Ok(())
    }

    /// Closes (or deletes, for a deleted topic) a log once no request holds it.
    async fn retire(&self, mut part: Rc<Partition>, delete: bool) {
        for _ in 0..600 {
            match Rc::try_unwrap(part) {
                Ok(p) => {
                    let dir = p.log.dir().to_path_buf();
                    let res = if delete {
                        p.log.delete().await
                    } else {
                        p.log.close().await
                    };
                    if let Err(e) = res {
                        warn!(dir = %dir.display(), error = %e, "closing a retired log failed");
                    }
                    return;
                }
                Err(still_shared) => {
                    part = still_shared;
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        warn!(dir = %part.log.dir().display(), "log still in use after 30 s; left open");
    }

    // ---- Retention and shutdown ----

    pub async fn run_retention(self: Rc<Self>) {
        let every = Duration::from_millis(self.config.retention_check_interval_ms);
        loop {
            futures_lite::future::or(glommio::timer::sleep(every), self.shutdown.wait()).await;
            if self.shutdown.is_fired() {
                return;
            }
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            let parts: Vec<((String, i32), Rc<Partition>)> = self
                .partitions
                .borrow()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for ((topic, p), part) in parts {
                match part.log.enforce_retention(now_ms).await {
                    Ok(0) => {}
                    Ok(n) => {
                        info!(topic = %topic, partition = p, segments = n, "retention deleted segments")
                    }
                    Err(e) => warn!(topic = %topic, partition = p, error = %e, "retention failed"),
                }
                glommio::yield_if_needed().await;
            }
        }
    }

    /// Opens this core's group coordinator (its offsets logs) and drives its session and
    /// rebalance timers.
    pub async fn open_groups(self: &Rc<Self>) -> Result<(), String> {
        let c = Coordinator::open(
            &self.config.data_dir,
            self.id,
            self.cores,
            self.cache.clone(),
            GroupConfig::default(),
        )
        .await
        .map_err(|e| format!("opening the group offsets: {e}"))?;
        let c = Rc::new(c);
        *self.groups.borrow_mut() = Some(c.clone());
        let weak = Rc::downgrade(&c);
        glommio::spawn_local(async move {
            while let Some(c) = weak.upgrade() {
                c.tick();
                drop(c);
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
        })
        .detach();
        Ok(())
    }

    /// Flushes and closes every log of this core (writes the clean-shutdown markers).
    pub async fn close_all(&self) {
        let groups = self.groups.borrow_mut().take();
        if let Some(c) = groups {
            match Rc::try_unwrap(c) {
                Ok(c) => c.close().await,
                Err(_) => warn!(core = self.id, "group coordinator still in use at shutdown"),
            }
        }
        let parts: Vec<Rc<Partition>> = self
            .partitions
            .borrow_mut()
            .drain()
            .map(|(_, v)| v)
            .collect();
        let mut closed = 0;
        for part in parts {
            wake_waiters(&part.waiters);
            let dir = part.log.dir().to_path_buf();
            match Rc::try_unwrap(part) {
                Ok(p) => match p.log.close().await {
                    Ok(()) => closed += 1,
                    Err(e) => warn!(dir = %dir.display(), error = %e, "close failed"),
                },
                Err(p) => {
                    if let Err(e) = p.log.flush().await {
                        warn!(dir = %dir.display(), error = %e, "flush at shutdown failed");
                    }
                    warn!(dir = %dir.display(), "log still in use at shutdown: flushed, not closed");
                }
            }
        }
        info!(core = self.id, logs = closed, "logs closed");
    }

    /// Opens the logs this core owns at start.
    pub async fn open_owned(self: &Rc<Self>) {
        let meta = self.metadata();
        // Failures are logged; those partitions answer with an error until the next start.
        self.apply_metadata(meta).await;
    }
}

pub fn data_dir_ok(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// `Shard::remove_stale_dirs`' blocking part: `DATA_DIR/<prefix><digits>` directories.
fn remove_stale_dirs(data_dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_partition_of_topic = name
            .strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if is_partition_of_topic && e.path().is_dir() {
            warn!(dir = %e.path().display(), "removing a stale log of a deleted topic");
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                warn!(dir = %e.path().display(), error = %err, "cannot remove stale log");
            }
        }
    }
}
