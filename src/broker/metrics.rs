//! Prometheus metrics: each core counts its own requests, partitions, wheel, connections and
//! cache in plain `Cell`s (nothing shared between cores on the data path); `render` turns
//! every core's `CoreSnapshot` into the Prometheus text format, labelled by core. The HTTP
//! endpoint that gathers the snapshots over the mesh is `metrics_endpoint`.
//!
//! Long because it is one table: every family's name, kind and help text sit beside the
//! field that feeds it, so a new metric is added in one place.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use weir_storage::{FlushStats, FLUSH_BUCKETS};

/// Upper bounds (seconds) of the request latency buckets.
pub const REQUEST_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0, 30.0,
];

/// One API's requests on one core.
#[derive(Debug, Clone, Default)]
pub struct ApiStats {
    pub count: u64,
    pub seconds: f64,
    /// Requests that took at most `REQUEST_BUCKETS[i]` (not cumulative).
    pub buckets: [u64; REQUEST_BUCKETS.len()],
}

/// A core's own counters. Touched only by that core.
#[derive(Default)]
pub struct CoreMetrics {
    apis: RefCell<BTreeMap<i16, ApiStats>>,
    /// (api key, error code) → responses (or partitions of a response) with that error.
    errors: RefCell<BTreeMap<(i16, i16), u64>>,
    pub wheel_expired: Cell<u64>,
    pub wheel_woken: Cell<u64>,
    pub connections_accepted: Cell<u64>,
    pub connections_refused: Cell<u64>,
    pub connections_closed_bad_input: Cell<u64>,
    pub tls_handshake_failures: Cell<u64>,
    pub sasl_authentications: Cell<u64>,
    pub sasl_reauthentications: Cell<u64>,
    pub sasl_authentication_failures: Cell<u64>,
    /// Transactions this core's coordinator ended: committed, aborted (by the producer, a
    /// fencing InitProducerId or a timeout), and of those aborted, by a timeout.
    pub txn_commits: Cell<u64>,
    pub txn_aborts: Cell<u64>,
    pub txn_timeouts: Cell<u64>,
    /// Partition Raft messages this core queued for a peer's core on a connection of its own
    /// (`peer::links`, or core 0's control connection), and those that went through another
    /// core of this broker on their way out or in (`shard::replica_host::route`).
    pub peer_messages_linked: Cell<u64>,
    pub peer_messages_relayed: Cell<u64>,
}

impl CoreMetrics {
    pub fn request(&self, api: i16, took: Duration) {
        let s = took.as_secs_f64();
        let mut apis = self.apis.borrow_mut();
        let a = apis.entry(api).or_default();
        a.count += 1;
        a.seconds += s;
        if let Some(i) = REQUEST_BUCKETS.iter().position(|&b| s <= b) {
            a.buckets[i] += 1;
        }
    }

    pub fn error(&self, api: ApiKey, code: i16) {
        if code != 0 {
            *self
                .errors
                .borrow_mut()
                .entry((api as i16, code))
                .or_insert(0) += 1;
        }
    }

    pub fn bump(c: &Cell<u64>) {
        c.set(c.get() + 1);
    }
}

/// One partition's figures.
#[derive(Debug, Clone, Default)]
pub struct PartitionSnapshot {
    pub topic: String,
    pub partition: i32,
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub segments: usize,
    pub segment_bytes: u64,
    pub log_end_offset: u64,
    pub flush: FlushStats,
    /// The remote tier's figures (a tiered partition with its store attached).
    pub remote: Option<weir_storage::tier::TierStats>,
}

/// Everything one core reports; `Send`, to cross the mesh.
#[derive(Debug, Clone, Default)]
pub struct CoreSnapshot {
    pub core: usize,
    pub apis: Vec<(i16, ApiStats)>,
    pub errors: Vec<((i16, i16), u64)>,
    pub parked: usize,
    pub wheel_expired: u64,
    pub wheel_woken: u64,
    pub connections: usize,
    /// Bytes of requests being read or processed (`queued.max.request.bytes`), and how many
    /// times a connection waited for room.
    pub request_memory_used: usize,
    pub request_memory_waits: u64,
    pub connections_accepted: u64,
    pub connections_refused: u64,
    pub connections_closed_bad_input: u64,
    pub tls_handshake_failures: u64,
    pub sasl_authentications: u64,
    pub sasl_reauthentications: u64,
    pub sasl_authentication_failures: u64,
    pub txn_commits: u64,
    pub txn_aborts: u64,
    pub txn_timeouts: u64,
    pub peer_messages_linked: u64,
    pub peer_messages_relayed: u64,
    /// (destination core, cross-core calls in flight to it).
    pub queue_in_use: Vec<(usize, usize)>,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_used_bytes: usize,
    pub read_cache_used_bytes: usize,
    /// Segment files open on the core (`log.open.segment.files.max`), and how many were
    /// opened again after that limit closed them.
    pub open_segment_files: usize,
    pub segment_file_reopens: u64,
    /// This core's replicas of replicated partitions (Raft groups), and how many of them
    /// hibernate.
    pub raft_groups: usize,
    pub raft_groups_asleep: usize,
    /// This core's open links to the peers' cores (`peer::links`).
    pub peer_links: usize,
    pub partitions: Vec<PartitionSnapshot>,
}

impl CoreMetrics {
    pub fn fill(&self, snap: &mut CoreSnapshot) {
        snap.apis = self
            .apis
            .borrow()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        snap.errors = self.errors.borrow().iter().map(|(k, v)| (*k, *v)).collect();
        snap.wheel_expired = self.wheel_expired.get();
        snap.wheel_woken = self.wheel_woken.get();
        snap.connections_accepted = self.connections_accepted.get();
        snap.connections_refused = self.connections_refused.get();
        snap.connections_closed_bad_input = self.connections_closed_bad_input.get();
        snap.tls_handshake_failures = self.tls_handshake_failures.get();
        snap.sasl_authentications = self.sasl_authentications.get();
        snap.sasl_reauthentications = self.sasl_reauthentications.get();
        snap.sasl_authentication_failures = self.sasl_authentication_failures.get();
        snap.txn_commits = self.txn_commits.get();
        snap.txn_aborts = self.txn_aborts.get();
        snap.txn_timeouts = self.txn_timeouts.get();
        snap.peer_messages_linked = self.peer_messages_linked.get();
        snap.peer_messages_relayed = self.peer_messages_relayed.get();
    }
}

fn api_name(key: i16) -> String {
    if key == weir::protocol::stream_fetch::API_KEY {
        return "StreamFetch".to_string();
    }
    ApiKey::try_from(key).map_or_else(|_| key.to_string(), |k| format!("{k:?}"))
}

/// Escapes a label value (backslash, double quote, newline).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric family read off each snapshot: (name, type, help, value).
type Family<T> = (&'static str, &'static str, &'static str, fn(&T) -> u64);

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }
    fn line(&mut self, name: &str, labels: &str, v: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {v}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {v}");
        }
    }
    /// A histogram from non-cumulative bucket counts.
    fn histogram(&mut self, name: &str, labels: &str, bounds: &[f64], counts: &[u64], sum: f64) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut acc = 0;
        for (b, c) in bounds.iter().zip(counts) {
            acc += c;
            self.line(
                &format!("{name}_bucket"),
                &format!("{labels}{sep}le=\"{b}\""),
                acc,
            );
        }
        let total: u64 = counts.iter().sum::<u64>().max(acc);
        self.line(
            &format!("{name}_bucket"),
            &format!("{labels}{sep}le=\"+Inf\""),
            total,
        );
        self.line(&format!("{name}_sum"), labels, sum);
        self.line(&format!("{name}_count"), labels, total);
    }
}

/// Renders every core's snapshot as Prometheus text (exposition format 0.0.4).
pub fn render(cores: &[CoreSnapshot]) -> String {
    let mut o = Out(String::with_capacity(16 << 10));
    let part_labels = |c: &CoreSnapshot, p: &PartitionSnapshot| {
        format!(
            "core=\"{}\",topic=\"{}\",partition=\"{}\"",
            c.core,
            esc(&p.topic),
            p.partition
        )
    };

    o.head(
        "weir_requests_total",
        "counter",
        "Requests handled, by API.",
    );
    for c in cores {
        for (k, a) in &c.apis {
            o.line(
                "weir_requests_total",
                &format!("core=\"{}\",api=\"{}\"", c.core, api_name(*k)),
                a.count,
            );
        }
    }
    o.head(
        "weir_request_errors_total",
        "counter",
        "Responses (or partitions of a response) with a Kafka error code, by API and code.",
    );
    for c in cores {
        for ((k, code), n) in &c.errors {
            o.line(
                "weir_request_errors_total",
                &format!(
                    "core=\"{}\",api=\"{}\",code=\"{code}\"",
                    c.core,
                    api_name(*k)
                ),
                n,
            );
        }
    }
    o.head(
        "weir_request_duration_seconds",
        "histogram",
        "Time from a request decoded to its response ready, by API.",
    );
    for c in cores {
        for (k, a) in &c.apis {
            let l = format!("core=\"{}\",api=\"{}\"", c.core, api_name(*k));
            o.histogram(
                "weir_request_duration_seconds",
                &l,
                &REQUEST_BUCKETS,
                &a.buckets,
                a.seconds,
            );
        }
    }
    let per_part: [Family<PartitionSnapshot>; 6] = [
        (
            "weir_partition_bytes_in_total",
            "counter",
            "Record batch bytes appended.",
            |p| p.bytes_in,
        ),
        (
            "weir_partition_records_in_total",
            "counter",
            "Records appended.",
            |p| p.records_in,
        ),
        (
            "weir_partition_bytes_out_total",
            "counter",
            "Record batch bytes returned to fetches.",
            |p| p.bytes_out,
        ),
        (
            "weir_partition_segments",
            "gauge",
            "Segment files of the partition.",
            |p| p.segments as u64,
        ),
        (
            "weir_partition_segment_bytes",
            "gauge",
            "Bytes in the partition's segments.",
            |p| p.segment_bytes,
        ),
        (
            "weir_partition_log_end_offset",
            "gauge",
            "Offset the next record will get.",
            |p| p.log_end_offset,
        ),
    ];
    for (name, kind, help, f) in per_part {
        o.head(name, kind, help);
        for c in cores {
            for p in &c.partitions {
                o.line(name, &part_labels(c, p), f(p));
            }
        }
    }
    let per_tiered: [Family<weir_storage::tier::TierStats>; 7] = [
        (
            "weir_remote_segments",
            "gauge",
            "Segments of the partition in the object store (tiered storage).",
            |t| t.remote_segments as u64,
        ),
        (
            "weir_remote_bytes",
            "gauge",
            "Bytes of those segments.",
            |t| t.remote_bytes,
        ),
        (
            "weir_remote_upload_lag_bytes",
            "gauge",
            "Bytes of closed local segments not uploaded yet.",
            |t| t.lag_bytes,
        ),
        (
            "weir_remote_uploaded_bytes_total",
            "counter",
            "Segment bytes uploaded.",
            |t| t.uploaded_bytes,
        ),
        (
            "weir_remote_read_bytes_total",
            "counter",
            "Record batch bytes read from the object store for fetches.",
            |t| t.read_bytes,
        ),
        (
            "weir_remote_deleted_segments_total",
            "counter",
            "Remote segments deleted (retention, DeleteRecords, orphans not counted).",
            |t| t.deleted_segments,
        ),
        (
            "weir_remote_errors_total",
            "counter",
            "Tiering passes that failed (the store unreachable or refusing).",
            |t| t.errors,
        ),
    ];
    for (name, kind, help, f) in per_tiered {
        o.head(name, kind, help);
        for c in cores {
            for p in &c.partitions {
                if let Some(t) = &p.remote {
                    o.line(name, &part_labels(c, p), f(t));
                }
            }
        }
    }
    o.head(
        "weir_flush_duration_seconds",
        "histogram",
        "fdatasync of a partition's active segment (acks=all produce, shutdown).",
    );
    for c in cores {
        for p in &c.partitions {
            o.histogram(
                "weir_flush_duration_seconds",
                &part_labels(c, p),
                &FLUSH_BUCKETS,
                &p.flush.buckets,
                p.flush.seconds,
            );
        }
    }
    let per_core: [Family<CoreSnapshot>; 20] = [
        (
            "weir_parked_fetches",
            "gauge",
            "Fetches parked in the core's wheel waiting for data.",
            |c| c.parked as u64,
        ),
        (
            "weir_wheel_expired_total",
            "counter",
            "Parked fetches answered because their max wait passed.",
            |c| c.wheel_expired,
        ),
        (
            "weir_wheel_woken_total",
            "counter",
            "Parked fetches answered because data arrived.",
            |c| c.wheel_woken,
        ),
        (
            "weir_connections",
            "gauge",
            "Open client connections.",
            |c| c.connections as u64,
        ),
        (
            "weir_request_memory_used_bytes",
            "gauge",
            "Bytes of requests being read or processed, counted against queued.max.request.bytes (Kafka's MemoryPoolUsed).",
            |c| c.request_memory_used as u64,
        ),
        (
            "weir_request_memory_waits_total",
            "counter",
            "Times a connection waited to read a request because queued.max.request.bytes was spent.",
            |c| c.request_memory_waits,
        ),
        (
            "weir_connections_accepted_total",
            "counter",
            "Client connections accepted.",
            |c| c.connections_accepted,
        ),
        (
            "weir_connections_refused_total",
            "counter",
            "Client connections closed at once (max.connections).",
            |c| c.connections_refused,
        ),
        (
            "weir_connections_closed_bad_input_total",
            "counter",
            "Connections closed for malformed or oversized requests.",
            |c| c.connections_closed_bad_input,
        ),
        (
            "weir_tls_handshake_failures_total",
            "counter",
            "SSL listener connections closed because the TLS handshake failed (a plaintext client, an untrusted or missing client certificate, a timeout).",
            |c| c.tls_handshake_failures,
        ),
        (
            "weir_sasl_authentications_total",
            "counter",
            "Successful SASL logins on SASL_PLAINTEXT and SASL_SSL listeners (first authentications of a connection).",
            |c| c.sasl_authentications,
        ),
        (
            "weir_sasl_reauthentications_total",
            "counter",
            "Successful SASL re-authentications on an open connection (KIP-368, connections.max.reauth.ms).",
            |c| c.sasl_reauthentications,
        ),
        (
            "weir_sasl_authentication_failures_total",
            "counter",
            "Failed SASL logins (unknown user, wrong password, malformed or out-of-order tokens, a disabled mechanism); each closes its connection.",
            |c| c.sasl_authentication_failures,
        ),
        (
            "weir_transactions_committed_total",
            "counter",
            "Transactions committed by this core's transaction coordinator (every marker written).",
            |c| c.txn_commits,
        ),
        (
            "weir_transactions_aborted_total",
            "counter",
            "Transactions aborted by this core's transaction coordinator: by the producer, by a new instance's InitProducerId (fencing), or by a timeout.",
            |c| c.txn_aborts,
        ),
        (
            "weir_transactions_timed_out_total",
            "counter",
            "Transactions the coordinator aborted because they stayed open longer than their transaction.timeout.ms.",
            |c| c.txn_timeouts,
        ),
        (
            "weir_peer_messages_linked_total",
            "counter",
            "Partition Raft messages this core queued, on a connection of its own, for the core of a peer's replica (its link to that core, or core 0's control connection to the peer's core 0).",
            |c| c.peer_messages_linked,
        ),
        (
            "weir_peer_messages_relayed_total",
            "counter",
            "Partition Raft messages that crossed to another core of this broker on their way to or from a peer (a peer that declined core links, or a replica the metadata does not place yet).",
            |c| c.peer_messages_relayed,
        ),
        (
            "weir_cache_hits_total",
            "counter",
            "Reads served from the core's batch cache.",
            |c| c.cache_hits,
        ),
        (
            "weir_cache_misses_total",
            "counter",
            "Reads that went to disk.",
            |c| c.cache_misses,
        ),
    ];
    for (name, kind, help, f) in per_core {
        o.head(name, kind, help);
        for c in cores {
            o.line(name, &format!("core=\"{}\"", c.core), f(c));
        }
    }
    o.head(
        "weir_cache_bytes",
        "gauge",
        "Bytes held in the core's batch cache.",
    );
    for c in cores {
        o.line(
            "weir_cache_bytes",
            &format!("core=\"{}\"", c.core),
            c.cache_used_bytes,
        );
    }
    o.head(
        "weir_read_cache_bytes",
        "gauge",
        "Bytes of chunks read from disk held by the core (bounded by read.cache.bytes.per.core).",
    );
    for c in cores {
        o.line(
            "weir_read_cache_bytes",
            &format!("core=\"{}\"", c.core),
            c.read_cache_used_bytes,
        );
    }
    o.head(
        "weir_segment_file_reopens_total",
        "counter",
        "Segment files opened again after log.open.segment.files.max had closed them.",
    );
    for c in cores {
        o.line(
            "weir_segment_file_reopens_total",
            &format!("core=\"{}\"", c.core),
            c.segment_file_reopens,
        );
    }
    for (name, help, f) in [
        (
            "weir_open_segment_files",
            "Segment files the core holds open (bounded by log.open.segment.files.max, split between cores).",
            (|c| c.open_segment_files) as fn(&CoreSnapshot) -> usize,
        ),
        (
            "weir_raft_groups",
            "Replicas of replicated partitions on the core (one Raft group each).",
            |c| c.raft_groups,
        ),
        (
            "weir_raft_groups_asleep",
            "Of those, the ones hibernating: not ticked, no heartbeats (replica.hibernate.enable).",
            |c| c.raft_groups_asleep,
        ),
        (
            "weir_peer_links",
            "The core's open connections to the cores of peer brokers for partition messages (core links; each closes after 10 s with nothing to carry).",
            |c| c.peer_links,
        ),
    ] {
        o.head(name, "gauge", help);
        for c in cores {
            o.line(name, &format!("core=\"{}\"", c.core), f(c));
        }
    }
    o.head(
        "weir_cross_core_queue_depth",
        "gauge",
        "Cross-core calls in flight from this core to another (bounded by cross.core.queue.depth).",
    );
    for c in cores {
        for (to, n) in &c.queue_in_use {
            o.line(
                "weir_cross_core_queue_depth",
                &format!("core=\"{}\",to=\"{to}\"", c.core),
                n,
            );
        }
    }
    o.0
}
