//! Broker settings: Kafka-named `key=value` pairs from a config file (`--config FILE`), then
//! command-line flags (`--set`, `--data-dir`, `--listen`, ...), then environment variables
//! (`WEIR_` + the name upper-cased with dots as underscores), each overriding the one before;
//! defaults for the rest; and the per-topic overrides that turn them into a `LogConfig`.
//! `SETTINGS` is the one reference table (docs/configuration.md is checked against it); this
//! file is long because that table documents every setting in one place.

use std::collections::BTreeMap;
use std::path::PathBuf;

use weir_storage::LogConfig;

mod listeners;
#[cfg(test)]
mod tests;
mod topic;
mod types;

pub use listeners::{ClientAuth, Listener, SecurityProtocol, SslConfig};
pub use topic::*;
pub use types::*;

/// One broker setting, as documented in docs/configuration.md.
pub struct Setting {
    /// The Kafka-style name (`--set NAME=VALUE`, config file `NAME=VALUE`).
    pub name: &'static str,
    /// As documented; the test `every_setting_is_accepted_and_documented` checks it against
    /// `BrokerConfig::default()`.
    #[allow(dead_code)]
    pub default: &'static str,
    pub unit: &'static str,
    /// The topic-level config that overrides it per topic, if any (checked against
    /// `TOPIC_CONFIGS` by the same test).
    #[allow(dead_code)]
    pub topic: Option<&'static str>,
    pub doc: &'static str,
}

const fn setting(
    name: &'static str,
    default: &'static str,
    unit: &'static str,
    topic: Option<&'static str>,
    doc: &'static str,
) -> Setting {
    Setting {
        name,
        default,
        unit,
        topic,
        doc,
    }
}

/// `node.id`: -1 (standalone) or a broker id.
/// `broker.rack`: a name of at most 255 printable characters; `none` or empty: no rack.
fn parse_rack(key: &str, value: &str) -> Result<Option<String>, String> {
    let r = value.trim();
    if r.is_empty() || r == "none" {
        return Ok(None);
    }
    if r.len() > 255 || r.chars().any(char::is_control) {
        return Err(format!("{key} must be at most 255 printable characters"));
    }
    Ok(Some(r.to_string()))
}

/// `replica.selector.class`: whether it names Kafka's rack-aware selector (true) or its
/// leader selector (false: `none`, empty, `LeaderSelector`).
fn parse_selector(key: &str, value: &str) -> Result<bool, String> {
    const PACKAGE: &str = "org.apache.kafka.common.replica.";
    let v = value.trim();
    match v.strip_prefix(PACKAGE).unwrap_or(v) {
        "" | "none" | "LeaderSelector" => Ok(false),
        "rack" | "RackAwareReplicaSelector" => Ok(true),
        other => Err(format!(
            "{key}: unknown selector {other:?} (RackAwareReplicaSelector, LeaderSelector or none)"
        )),
    }
}

fn parse_node_id(key: &str, value: &str) -> Result<Option<u64>, String> {
    let v = value.trim();
    if v == "-1" {
        return Ok(None);
    }
    let id: u64 = v
        .parse()
        .map_err(|_| format!("{key}: '{v}' is not an id"))?;
    if id == 0 || id > crate::cluster::MAX_BROKER_ID {
        return Err(format!(
            "{key}: {id} is not in 1..={}",
            crate::cluster::MAX_BROKER_ID
        ));
    }
    Ok(Some(id))
}

/// `controller.quorum.voters`: `none` (or empty) or `ID@HOST:PORT,...`.
fn parse_voters_setting(value: &str) -> Result<Vec<crate::cluster::Voter>, String> {
    let v = value.trim();
    if v.is_empty() || v == "none" {
        return Ok(Vec::new());
    }
    crate::cluster::parse_voters(v)
}

/// Every setting `BrokerConfig::set` accepts.
pub const SETTINGS: &[Setting] = &[
    setting("log.dirs", "./data", "path", None,
        "Directory of the partition logs, consumer-group offsets and `weir-metadata.json` (`log.dir` is an alias; flag `--data-dir`)."),
    setting("listeners", "PLAINTEXT://127.0.0.1:9092", "NAME://host:port,...", None,
        "Where the broker listens: comma-separated `PLAINTEXT://host:port`, `SSL://host:port` (TLS), `SASL_PLAINTEXT://host:port` and `SASL_SSL://host:port` (SASL authentication, without or inside TLS; docs/security.md), each at most once; a bare `host:port` is PLAINTEXT; port 0 picks a free one (flag `--listen`). Clients are told the endpoints of the listener they came in on."),
    setting("advertised.listeners", "the bound addresses", "NAME://host:port,...", None,
        "Addresses given to clients in Metadata responses, per listener (`SSL://host:port`); a bare `host:port` is the first listener's (flag `--advertised-listener`)."),
    setting("ssl.certificate.location", "none", "path", None,
        "PEM file of the SSL listeners' certificate chain, the server's certificate first, also the broker's own certificate on the peer port with `security.inter.broker.protocol=SSL` (read at start-up; SIGHUP reloads it for SSL listeners, docs/security.md)."),
    setting("ssl.key.location", "none", "path", None,
        "PEM file of the private key of `ssl.certificate.location` (PKCS#8, PKCS#1 or SEC1; not encrypted)."),
    setting("ssl.truststore.location", "none", "path", None,
        "PEM file of the CA certificates that sign client certificates (for `ssl.client.auth`), and, with `security.inter.broker.protocol=SSL`, the cluster's CA that signs every broker's certificate."),
    setting("security.inter.broker.protocol", "none", "", None,
        "In a cluster: how brokers talk to each other on the peer port (`controller.quorum.voters`). `SSL`: mutual TLS — each broker presents `ssl.certificate.location`, signed by a CA of `ssl.truststore.location`, and valid for its host in `controller.quorum.voters` (extended key usage serverAuth and clientAuth); a connection without such a certificate is refused, and a peer is known by its certificate, never by what its messages say. `PLAINTEXT`: no authentication, no encryption — anyone who reaches the peer port can change the cluster's metadata; for a trusted network or loopback development only. A cluster does not start until one of the two is set (docs/security.md)."),
    setting("ssl.client.auth", "none", "", None,
        "`required`: SSL clients must present a certificate signed by a CA of `ssl.truststore.location`, others are refused in the handshake; `requested`: a certificate is asked for and checked if given; `none`: not asked for."),
    setting("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN", "list", None,
        "SASL mechanisms SASL_PLAINTEXT and SASL_SSL listeners accept (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN). Users and their SCRAM credentials are managed with `weir user` (AlterUserScramCredentials); PLAIN checks the password against them."),
    setting("connections.max.reauth.ms", "0", "ms", None,
        "When above 0, a SASL session lasts this long: clients are told so (SaslAuthenticate v1+) and must re-authenticate on the same connection (KIP-368), or the connection is closed at its next request after that. 0: sessions never expire."),
    setting("authorizer.class.name", "none", "", None,
        "Turns ACL checks on: any of Kafka's authorizer class names (`org.apache.kafka.metadata.authorizer.StandardAuthorizer`, `kafka.security.authorizer.AclAuthorizer`) or `weir`; `none` or empty: every client may do everything. ACLs are stored (CreateAcls, `weir acl`) either way."),
    setting("super.users", "none", "list", None,
        "Principals allowed everything whatever the ACLs say, separated by `;` (`User:admin;User:ops`), as in Kafka."),
    setting("allow.everyone.if.no.acl.found", "false", "bool", None,
        "With the authorizer on: a resource that no ACL names is open to everyone (true) or to super users only (false, Kafka's default)."),
    setting("listeners.per.core", "true", "bool", None,
        "Also listen on one port per core for each listener (that listener's port + 1 + core, so listeners' ports must be more than the core count apart; kernel-picked when the port is 0) and advertise each core as its own broker in Metadata, the leader of the partitions it owns and the coordinator of its groups, so clients send produce and fetch straight to the owning core (no cross-core hop). Each listener's own port stays its bootstrap address."),
    setting("node.id", "-1", "id", None,
        "This broker's id in a cluster (1 to 2097150; flag `--node-id`); -1: a standalone broker. Needs `controller.quorum.voters` (docs/running.md, \"A cluster of brokers\")."),
    setting("broker.rack", "none", "name", None,
        "This broker's rack (or availability zone), as in Kafka: reported in Metadata and DescribeCluster, and used by `replica.selector.class` to send a consumer with the same `client.rack` to this broker's replica. `none`: no rack."),
    setting("replica.selector.class", "none", "", None,
        "Follower fetching (KIP-392): `org.apache.kafka.common.replica.RackAwareReplicaSelector` (or `rack`) makes a partition's leader name, to a consumer that gives its `client.rack` (Fetch v11+), an in-sync replica in that rack to read from (`preferred_read_replica`), as Kafka does. `none` (Kafka's LeaderSelector): consumers read from leaders. Followers answer consumers' Fetch v11+ from their own log either way, up to the high watermark they know."),
    setting("controller.quorum.voters", "none", "ID@HOST:PORT,...", None,
        "The brokers of a cluster and their inter-broker addresses (flag `--peers`), this broker's own included: every one is a voter of the metadata Raft group (docs/replication.md). This broker listens for the others on its own entry's address. `none`: a standalone broker (no Raft, today's single-node path)."),
    setting("offset.metadata.max.bytes", "4096", "bytes", None,
        "Largest metadata string an OffsetCommit may store with an offset; a larger one is refused with OFFSET_METADATA_TOO_LARGE (that partition's commit only)."),
    setting("transaction.max.timeout.ms", "900000", "ms", None,
        "Longest transaction.timeout.ms a transactional producer may ask for in InitProducerId (more: INVALID_TRANSACTION_TIMEOUT). A transaction open longer than its own timeout is aborted by the coordinator."),
    setting("transactional.id.expiration.ms", "604800000", "ms", None,
        "A transactional id with no transaction open and no request for this long is forgotten (its next InitProducerId gets a new producer id)."),
    setting("producer.id.expiration.ms", "86400000", "ms", None,
        "A producer id that has written nothing to a partition for this long (and has no transaction open there) is forgotten by that partition at its next retention pass or segment roll: its next batch is accepted at any sequence."),
    setting("internal.topics.compaction.min.bytes", "4194304", "bytes", None,
        "In a cluster: how much a partition of `__consumer_offsets` or `__transaction_state` grows at least before its leader compacts it (rewrites the live records, and every replica drops what is below them), once it also holds 4x its live data (docs/replication.md, \"Compacting the internal topics\")."),
    setting("num.partitions", "1", "partitions", None,
        "Partitions of an auto-created topic, and of CreateTopics asking for -1."),
    setting("default.replication.factor", "1", "replicas", None,
        "Replicas of each partition of an auto-created topic, and of CreateTopics asking for -1. Above 1 only in a cluster, and at most the number of registered brokers (docs/replication.md §5.1)."),
    setting("auto.leader.rebalance.enable", "true", "bool", None,
        "In a cluster: a replicated partition led by another replica than its preferred one (the first of its placement) hands its leadership back to the preferred replica once that one is in sync, checked every `leader.imbalance.check.interval.seconds` (docs/replication.md, \"Preferred leaders\"). On by default, as in Kafka."),
    setting("leader.imbalance.check.interval.seconds", "300", "s", None,
        "How often each partition leader checks whether to hand its leadership back to the preferred replica (`auto.leader.rebalance.enable`)."),
    setting("controlled.shutdown.enable", "true", "bool", None,
        "In a cluster: a broker told to stop (SIGTERM, SIGINT) first hands the leadership of every partition it leads, and of the metadata group, to an in-sync replica, and keeps serving meanwhile, so its partitions answer again within a leader change instead of after an election timeout (docs/replication.md, \"Controlled shutdown\"). As in Kafka; off, it stops at once and the others elect leaders after their election timeout."),
    setting("controlled.shutdown.timeout.ms", "5000", "ms", None,
        "In a cluster, with `controlled.shutdown.enable`: how long a stopping broker waits at most for its leaderships to move before it stops anyway (a partition without an in-sync follower keeps its leader until then)."),
    setting("replica.hibernate.enable", "true", "bool", None,
        "In a cluster: a replicated partition with nothing to replicate for a second hibernates: its replicas stop ticking and heartbeating until a produce, a message or a peer broker going down or coming back wakes it (docs/replication.md, \"Hibernating partition groups\"). Off, every group heartbeats every 200 ms."),
    setting("auto.create.topics.enable", "true", "bool", None,
        "Create a topic when a client asks for an unknown one in Metadata."),
    setting("log.segment.bytes", "1073741824", "bytes", Some("segment.bytes"),
        "Size at which a segment rolls (at least 4096)."),
    setting("log.roll.ms", "604800000", "ms", Some("segment.ms"),
        "Age at which a non-empty segment rolls; -1: never."),
    setting("log.retention.ms", "604800000", "ms", Some("retention.ms"),
        "Whole segments whose newest record is older are deleted; -1: keep forever."),
    setting("log.retention.hours", "168", "hours", None,
        "`log.retention.ms` in hours (whichever is set last wins)."),
    setting("log.retention.bytes", "-1", "bytes", Some("retention.bytes"),
        "Oldest segments are deleted while a partition holds more; -1: no limit."),
    setting("log.cleanup.policy", "delete", "", Some("cleanup.policy"),
        "`delete` (retention deletes old segments), `compact` (keep the latest record per key), or `compact,delete` (both)."),
    setting("log.cleaner.enable", "true", "bool", None,
        "Run the log cleaner (compaction) on each core, for topics whose `cleanup.policy` has `compact`."),
    setting("log.cleaner.backoff.ms", "15000", "ms", None,
        "How often each core's cleaner looks for a log to clean (at least 10)."),
    setting("log.cleaner.io.max.bytes.per.second", "-1", "bytes/s", None,
        "Caps what one core's cleaner reads and writes per second, leaving the disk to produce and fetch; -1: no cap."),
    setting("log.cleaner.min.cleanable.ratio", "0.5", "ratio", Some("min.cleanable.dirty.ratio"),
        "A compacted log is cleaned once this share of its closed segments' bytes was written since its last cleaning."),
    setting("log.cleaner.min.compaction.lag.ms", "0", "ms", Some("min.compaction.lag.ms"),
        "A segment is cleaned only once its newest record is this old."),
    setting("log.cleaner.max.compaction.lag.ms", "9223372036854775807", "ms", Some("max.compaction.lag.ms"),
        "A log whose oldest uncleaned segment's newest record is older than this is cleaned whatever its dirty ratio."),
    setting("log.cleaner.delete.retention.ms", "86400000", "ms", Some("delete.retention.ms"),
        "How long a tombstone (null value) stays after a cleaning removed the older records of its key."),
    setting("message.max.bytes", "8388608", "bytes", Some("max.message.bytes"),
        "Largest record batch a produce may append."),
    setting("message.max.decompressed.bytes", "-1", "bytes", None,
        "Most bytes one compressed batch from a producer may decompress to (the validator walks it through a bounded streaming decoder; past it: INVALID_RECORD, nothing written); the cleaner keeps a stored batch past it whole. -1: 8 times the topic's `max.message.bytes`, at least 64 MiB."),
    setting("log.message.timestamp.type", "CreateTime", "", Some("message.timestamp.type"),
        "`CreateTime`: records keep their producers' timestamps; `LogAppendTime`: each batch is stamped with the time the broker appended it."),
    setting("log.message.timestamp.before.max.ms", "9223372036854775807", "ms", Some("message.timestamp.before.max.ms"),
        "CreateTime: a record whose timestamp is more than this before the broker's clock is refused (INVALID_TIMESTAMP)."),
    setting("log.message.timestamp.after.max.ms", "3600000", "ms", Some("message.timestamp.after.max.ms"),
        "CreateTime: a record whose timestamp is more than this after the broker's clock is refused (INVALID_TIMESTAMP; Kafka 4's default)."),
    setting("log.retention.check.interval.ms", "30000", "ms", None,
        "How often each core applies retention (at least 10)."),
    setting("remote.log.storage.system.enable", "false", "bool", None,
        "Tiered storage (docs/tiered-storage.md): topics with `remote.storage.enable=true` copy closed segments to the S3 bucket below and serve old offsets from there. Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) in the environment."),
    setting("remote.log.storage.s3.bucket", "none", "name", None,
        "The S3 bucket of the remote tier (it must exist)."),
    setting("remote.log.storage.s3.endpoint", "none", "URL", None,
        "An S3-compatible server's URL (e.g. http://127.0.0.1:7070, path-style requests); `none`: AWS S3 itself (or AWS_ENDPOINT_URL)."),
    setting("remote.log.storage.s3.region", "us-east-1", "name", None,
        "The bucket's region (signing)."),
    setting("remote.log.storage.s3.prefix", "none", "key prefix", None,
        "Prefix of every object key (`<prefix>/<topic>-<partition>/...`); `none`: no prefix."),
    setting("remote.log.manager.task.interval.ms", "30000", "ms", None,
        "How often each core uploads closed segments of its tiered partitions and applies their remote retention (Kafka's setting)."),
    setting("remote.log.upload.backlog.max.bytes", "4294967296", "bytes", None,
        "Per tiered partition: while the object store fails, produce goes on to the local disk until the closed segments waiting for upload hold more than this, then is refused (KAFKA_STORAGE_ERROR, saying why; producers retry) until an upload succeeds. -1: no bound."),
    setting("socket.request.max.bytes", "104857600", "bytes", None,
        "Largest request frame; a larger one closes the connection, with a log line."),
    setting("sasl.server.max.receive.size", "524288", "bytes", None,
        "On a SASL listener, the largest request a client may send before it has logged in (the SASL exchange needs little); a larger one closes the connection (Kafka's setting)."),
    setting("connection.failed.authentication.delay.ms", "100", "ms", None,
        "A failed SASL login is answered (and its connection closed) this long after it failed, as Kafka does; 10 failures from one address within 10 s make its next logins fail unchecked until then."),
    setting("queued.max.request.bytes", "-1", "bytes per core", None,
        "Memory of requests still being read on one core; past it, reading waits until requests complete (a connection's buffer grows only as its bytes arrive). -1: 256 MiB, at least `socket.request.max.bytes`."),
    setting("max.partitions", "20000", "partitions", None,
        "Partition replicas this broker may hold (in a cluster: this many times the registered brokers, all topics together); CreateTopics and CreatePartitions past it are refused with POLICY_VIOLATION. Their segment files share `log.open.segment.files.max` descriptors."),
    setting("log.open.segment.files.max", "-1", "files", None,
        "Segment files the broker keeps open, split evenly between its cores (at least 16 each); past it the least recently used are closed and opened again when next read or written. -1: half the process's open-file limit (weir raises its soft limit to the hard one at start), the rest left for connections."),
    setting("max.connections", "100000", "connections", None,
        "Open client connections per broker; past it new connections are closed at once, with a warning."),
    setting("connections.max.idle.ms", "600000", "ms", None,
        "A connection with nothing in flight and no bytes received for this long is closed."),
    setting("fetch.max.parked", "100000", "fetches per core", None,
        "Long-poll fetches parked per core; past it a fetch is answered at once (empty), with a warning."),
    setting("group.coordinator.rebalance.protocols", "classic,consumer", "list", None,
        "The group protocols the coordinators speak: `classic` (JoinGroup/SyncGroup) and KIP-848's `consumer` protocol (ConsumerGroupHeartbeat, for clients with `group.protocol=consumer`), as Kafka 4 does. `classic` alone turns the consumer protocol off (ApiVersions then does not list it)."),
    setting("group.consumer.session.timeout.ms", "45000", "ms", None,
        "Consumer-protocol groups (KIP-848): a member without a heartbeat for this long is fenced and its partitions go to the others."),
    setting("group.consumer.heartbeat.interval.ms", "5000", "ms", None,
        "Consumer-protocol groups (KIP-848): how often members heartbeat (the broker tells them); a rebalance step waits for the next heartbeat of the member it concerns."),
    setting("fetch.max.wait.ms", "30000", "ms", None,
        "Longest a fetch is parked, whatever the client asks (below clients' request timeouts)."),
    setting("cache.bytes.per.core", "268435456", "bytes", None,
        "Recently appended batches kept in memory per core, so tailing consumers read no disk."),
    setting("read.cache.bytes.per.core", "134217728", "bytes", None,
        "Chunks read from disk and from the remote tier (read-ahead included) kept in memory per core, shared by all its partitions; oldest evicted first."),
    setting("cross.core.queue.depth", "1024", "calls", None,
        "Cross-core calls in flight from one core to another; past it a call waits (back-pressure, logged once)."),
    setting("metrics.listen", "127.0.0.1:9644", "host:port", None,
        "Address of the Prometheus metrics endpoint (`GET /metrics`, docs/metrics.md); port 0 picks a free one; `off` disables it."),
];

/// The environment variable of a setting: `WEIR_` + upper-cased name, dots as underscores.
pub fn env_name(setting: &str) -> String {
    format!("WEIR_{}", setting.to_ascii_uppercase().replace('.', "_"))
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    /// `listeners`: at least one; the first is the one `--listen` sets and the "listening
    /// on" line names.
    pub listeners: Vec<Listener>,
    /// `advertised.listeners`: host:port put in Metadata responses, per listener (`None`:
    /// the first listener's); a listener without one advertises its bound address.
    pub advertised_listeners: Vec<(Option<SecurityProtocol>, String)>,
    /// The `ssl.*` settings of SSL listeners.
    pub ssl: SslConfig,
    /// `security.inter.broker.protocol` (`None`: not set; a cluster then refuses to start).
    pub inter_broker_protocol: Option<SecurityProtocol>,
    /// `sasl.enabled.mechanisms`: what SASL listeners accept.
    pub sasl_mechanisms: Vec<crate::sasl::Mechanism>,
    /// `connections.max.reauth.ms`: SASL session lifetime (0: none).
    pub connections_max_reauth_ms: u64,
    /// `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.
    pub authorizer: crate::acl::AuthorizerConfig,
    pub segment_bytes: u64,
    pub segment_ms: Option<u64>,
    pub retention_ms: Option<u64>,
    pub retention_bytes: Option<u64>,
    pub max_message_bytes: usize,
    /// `message.max.decompressed.bytes` (`None`: derived from a topic's `max.message.bytes`).
    pub max_decompressed_bytes: Option<u64>,
    /// `log.message.timestamp.type`.
    pub timestamp_type: weir_storage::batch::TimestampType,
    /// `log.message.timestamp.before.max.ms`.
    pub timestamp_before_max_ms: i64,
    /// `log.message.timestamp.after.max.ms`.
    pub timestamp_after_max_ms: i64,
    pub num_partitions: u32,
    /// `default.replication.factor`.
    pub default_replication_factor: u16,
    pub auto_create_topics: bool,
    /// `auto.leader.rebalance.enable`.
    pub auto_leader_rebalance: bool,
    /// `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_s: u64,
    /// `replica.hibernate.enable`.
    pub replica_hibernate: bool,
    /// `controlled.shutdown.enable`.
    pub controlled_shutdown: bool,
    /// `controlled.shutdown.timeout.ms`.
    pub controlled_shutdown_timeout_ms: u64,
    /// `transaction.max.timeout.ms`.
    pub transaction_max_timeout_ms: i64,
    /// `transactional.id.expiration.ms`.
    pub transactional_id_expiration_ms: i64,
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: u64,
    /// `listeners.per.core`: each core also listens on its own port and is advertised as
    /// broker `core` (leader of its partitions, coordinator of its groups).
    pub listeners_per_core: bool,
    /// `offset.metadata.max.bytes`: largest committed-offset metadata.
    pub offset_metadata_max_bytes: usize,
    /// `node.id`: this broker's id in a cluster (`None`: standalone).
    pub node_id: Option<u64>,
    /// `broker.rack` (`None`: no rack).
    pub rack: Option<String>,
    /// `replica.selector.class` is the rack-aware selector: leaders name a replica in the
    /// consumer's rack to read from (KIP-392).
    pub rack_aware_reads: bool,
    /// `controller.quorum.voters`: every broker of the cluster (empty: standalone).
    pub voters: Vec<crate::cluster::Voter>,
    pub socket_request_max_bytes: usize,
    /// `sasl.server.max.receive.size`.
    pub sasl_max_receive_bytes: usize,
    /// `max.partitions`.
    pub max_partitions: usize,
    /// `log.open.segment.files.max` (`None`: half the open-file limit).
    pub open_segment_files_max: Option<usize>,
    /// `connection.failed.authentication.delay.ms`.
    pub failed_authentication_delay_ms: u64,
    /// `queued.max.request.bytes` (`None`: the default).
    pub queued_max_request_bytes: Option<usize>,
    /// How often each core applies retention.
    pub retention_check_interval_ms: u64,
    /// `remote.log.storage.system.enable`.
    pub remote_storage_enable: bool,
    /// `remote.log.storage.s3.*`: the remote tier's bucket.
    pub remote_s3: RemoteStorageConfig,
    /// `remote.log.manager.task.interval.ms`.
    pub remote_task_interval_ms: u64,
    /// `remote.log.upload.backlog.max.bytes` (`None`: no bound).
    pub remote_backlog_max_bytes: Option<u64>,
    /// Upper bound on parked fetches per core; past it a fetch is answered at once.
    pub max_parked_fetches: usize,
    /// Longest a fetch is parked, whatever the client asks (must stay below clients'
    /// request timeouts: librdkafka's default socket timeout is 60 s).
    pub fetch_max_wait_ms: u64,
    /// `group.coordinator.rebalance.protocols` includes `consumer` (KIP-848 groups served).
    pub consumer_protocol: bool,
    /// `group.consumer.session.timeout.ms` (KIP-848 groups).
    pub consumer_session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms` (KIP-848 groups).
    pub consumer_heartbeat_interval_ms: u64,
    /// `max.connections`: open client connections per broker (spread over the cores);
    /// connections past it are closed at once, with a warning.
    pub max_connections: usize,
    /// `connections.max.idle.ms`: a connection with no request in flight and no bytes
    /// received for this long is closed (Kafka's default: 10 minutes).
    pub connections_max_idle_ms: u64,
    /// Requests read ahead and in process per connection (pipelining depth).
    pub max_inflight_per_connection: usize,
    /// `cross.core.queue.depth`: cross-core calls (produce, fetch answered at once, admin) in
    /// flight from one core to another; past it a call waits (back-pressure, logged once).
    pub mesh_queue_depth: usize,
    /// Bytes of recently appended batches kept in memory per core.
    /// `internal.topics.compaction.min.bytes`.
    pub internal_topics_compaction_min_bytes: u64,
    pub cache_bytes_per_core: usize,
    /// Bytes of chunks read from disk kept per core, shared by all its logs.
    pub read_cache_bytes_per_core: usize,
    /// `metrics.listen`: address of the Prometheus endpoint; `None` ("off"): no endpoint.
    pub metrics_listen: Option<String>,
    /// `log.cleanup.policy`: the default of topics' `cleanup.policy` (`delete`, `compact`,
    /// `compact,delete`).
    pub cleanup_policy: String,
    /// `log.cleaner.enable`: each core runs a cleaner for its compacted logs.
    pub cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`: how often the cleaner looks for work.
    pub cleaner_backoff_ms: u64,
    /// `log.cleaner.io.max.bytes.per.second`: a cleaning's I/O cap (`None`: no cap).
    pub cleaner_io_max_bytes_per_second: Option<u64>,
    /// Defaults of the topic configs `min.cleanable.dirty.ratio`, `min.compaction.lag.ms`,
    /// `max.compaction.lag.ms` (`None`: no limit) and `delete.retention.ms`.
    pub cleaner_min_cleanable_ratio: f64,
    pub cleaner_min_compaction_lag_ms: u64,
    pub cleaner_max_compaction_lag_ms: Option<u64>,
    pub cleaner_delete_retention_ms: u64,
    /// Everything as given, for DescribeConfigs on the broker.
    pub raw: BTreeMap<String, String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            data_dir: PathBuf::from("./data"),
            listeners: vec![Listener {
                protocol: SecurityProtocol::Plaintext,
                address: "127.0.0.1:9092".into(),
            }],
            advertised_listeners: Vec::new(),
            ssl: SslConfig::default(),
            inter_broker_protocol: None,
            sasl_mechanisms: vec![
                crate::sasl::Mechanism::ScramSha256,
                crate::sasl::Mechanism::ScramSha512,
                crate::sasl::Mechanism::Plain,
            ],
            connections_max_reauth_ms: 0,
            authorizer: crate::acl::AuthorizerConfig::default(),
            segment_bytes: 1 << 30,
            segment_ms: Some(7 * 24 * 3600 * 1000),
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            max_message_bytes: 8 << 20,
            max_decompressed_bytes: None,
            timestamp_type: weir_storage::batch::TimestampType::CreateTime,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
            num_partitions: 1,
            default_replication_factor: 1,
            auto_create_topics: true,
            auto_leader_rebalance: true,
            replica_hibernate: true,
            controlled_shutdown: true,
            controlled_shutdown_timeout_ms: 5000,
            leader_imbalance_check_interval_s: 300,
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            producer_id_expiration_ms: 86_400_000,
            listeners_per_core: true,
            offset_metadata_max_bytes: 4096,
            node_id: None,
            rack: None,
            rack_aware_reads: false,
            voters: Vec::new(),
            socket_request_max_bytes: 100 << 20,
            sasl_max_receive_bytes: 512 << 10,
            max_partitions: 20_000,
            open_segment_files_max: None,
            failed_authentication_delay_ms: 100,
            queued_max_request_bytes: None,
            retention_check_interval_ms: 30_000,
            remote_storage_enable: false,
            remote_s3: RemoteStorageConfig::default(),
            remote_task_interval_ms: 30_000,
            remote_backlog_max_bytes: Some(4 << 30),
            max_parked_fetches: 100_000,
            fetch_max_wait_ms: 30_000,
            consumer_protocol: true,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            max_connections: 100_000,
            connections_max_idle_ms: 600_000,
            max_inflight_per_connection: 64,
            mesh_queue_depth: 1024,
            internal_topics_compaction_min_bytes: 4 << 20,
            cache_bytes_per_core: 256 << 20,
            read_cache_bytes_per_core: weir_storage::DEFAULT_READ_CACHE_BYTES,
            metrics_listen: Some("127.0.0.1:9644".into()),
            cleanup_policy: "delete".into(),
            cleaner_enable: true,
            cleaner_backoff_ms: 15_000,
            cleaner_io_max_bytes_per_second: None,
            cleaner_min_cleanable_ratio: 0.5,
            cleaner_min_compaction_lag_ms: 0,
            cleaner_max_compaction_lag_ms: None,
            cleaner_delete_retention_ms: 86_400_000,
            raw: BTreeMap::new(),
        }
    }
}

pub(super) fn parse_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{key}: '{value}' is not a valid number"))
}

/// `-1` means "no limit" for Kafka's retention settings; otherwise `0..=i64::MAX`
/// (a value that later arithmetic in milliseconds or bytes cannot overflow).
pub(super) fn parse_limit(key: &str, value: &str) -> Result<Option<u64>, String> {
    let v: i64 = parse_num(key, value)?;
    match v {
        -1 => Ok(None),
        v if v >= 0 => Ok(Some(v as u64)),
        _ => Err(format!(
            "{key}: '{value}' must be -1 (no limit) or at least 0"
        )),
    }
}

/// A number in `lo..=hi`, with the bounds in the message when it is not.
pub(super) fn parse_bounded<T>(key: &str, value: &str, lo: T, hi: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let v: T = parse_num(key, value)?;
    if v < lo || v > hi {
        return Err(format!(
            "{key}: '{}' must be between {lo} and {hi}",
            value.trim()
        ));
    }
    Ok(v)
}

/// `segment.bytes` / `log.segment.bytes`: 4096 ..= 2^31-1 (Kafka's int bound, and what the
/// engine's 32-bit index positions address: `weir_storage::config::SEGMENT_BYTES_MAX`).
pub(super) fn parse_segment_bytes(key: &str, value: &str) -> Result<u64, String> {
    parse_bounded(key, value, 4096, weir_storage::config::SEGMENT_BYTES_MAX)
}

/// `segment.ms` / `log.roll.ms`: at least 1 (Kafka), or -1 for never.
pub(super) fn parse_roll_ms(key: &str, value: &str) -> Result<Option<u64>, String> {
    match parse_limit(key, value)? {
        Some(0) => Err(format!("{key}: must be at least 1 (or -1: never)")),
        v => Ok(v),
    }
}

/// `max.message.bytes` / `message.max.bytes`: 0 ..= the engine's hard batch limit.
pub(super) fn parse_message_bytes(key: &str, value: &str) -> Result<usize, String> {
    parse_bounded(key, value, 0, weir_storage::batch::MAX_BATCH_BYTES)
}

pub(super) fn parse_bool(key: &str, value: &str) -> Result<bool, String> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{key}: '{value}' is not true or false")),
    }
}

impl BrokerConfig {
    /// Applies one Kafka-named setting.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let key = key.trim();
        match key {
            "log.segment.bytes" => self.segment_bytes = parse_segment_bytes(key, value)?,
            "log.roll.ms" => self.segment_ms = parse_roll_ms(key, value)?,
            "log.retention.ms" => self.retention_ms = parse_limit(key, value)?,
            "log.retention.hours" => {
                let hours = parse_limit(key, value)?;
                if hours.is_some_and(|h| h > i64::MAX as u64 / 3_600_000) {
                    return Err(format!("{key}: '{}' is too large", value.trim()));
                }
                self.retention_ms = hours.map(|h| h * 3_600_000)
            }
            "log.retention.bytes" => self.retention_bytes = parse_limit(key, value)?,
            "message.max.bytes" => self.max_message_bytes = parse_message_bytes(key, value)?,
            "message.max.decompressed.bytes" => {
                self.max_decompressed_bytes = match parse_num::<i64>(key, value)? {
                    -1 => None,
                    n if n >= 1 << 20 => Some(n as u64),
                    _ => return Err(format!("{key}: at least 1048576, or -1")),
                }
            }
            "log.message.timestamp.type" => {
                self.timestamp_type = topic::parse_timestamp_type(key, value)?
            }
            "log.message.timestamp.before.max.ms" => {
                self.timestamp_before_max_ms = parse_bounded(key, value, 0, i64::MAX)?
            }
            "log.message.timestamp.after.max.ms" => {
                self.timestamp_after_max_ms = parse_bounded(key, value, 0, i64::MAX)?
            }
            "num.partitions" => {
                self.num_partitions = parse_num(key, value)?;
                if self.num_partitions == 0 {
                    return Err("num.partitions must be at least 1".into());
                }
            }
            "default.replication.factor" => {
                self.default_replication_factor = parse_num(key, value)?;
                if self.default_replication_factor == 0 || self.default_replication_factor > 32 {
                    return Err("default.replication.factor must be between 1 and 32".into());
                }
            }
            "auto.create.topics.enable" => self.auto_create_topics = parse_bool(key, value)?,
            "auto.leader.rebalance.enable" => self.auto_leader_rebalance = parse_bool(key, value)?,
            "replica.hibernate.enable" => self.replica_hibernate = parse_bool(key, value)?,
            "controlled.shutdown.enable" => self.controlled_shutdown = parse_bool(key, value)?,
            "controlled.shutdown.timeout.ms" => {
                self.controlled_shutdown_timeout_ms = parse_bounded(key, value, 0, 600_000)?
            }
            "leader.imbalance.check.interval.seconds" => {
                self.leader_imbalance_check_interval_s = parse_bounded(key, value, 1, 1 << 31)?
            }
            "transaction.max.timeout.ms" => {
                self.transaction_max_timeout_ms = parse_num::<u32>(key, value)?.max(1).into();
            }
            "transactional.id.expiration.ms" => {
                self.transactional_id_expiration_ms = parse_num::<u32>(key, value)?.max(1).into();
            }
            "producer.id.expiration.ms" => {
                self.producer_id_expiration_ms = parse_num::<u32>(key, value)?.max(1).into();
            }
            "listeners.per.core" => self.listeners_per_core = parse_bool(key, value)?,
            "node.id" => self.node_id = parse_node_id(key, value)?,
            "broker.rack" => self.rack = parse_rack(key, value)?,
            "replica.selector.class" => self.rack_aware_reads = parse_selector(key, value)?,
            "controller.quorum.voters" => self.voters = parse_voters_setting(value)?,
            "offset.metadata.max.bytes" => {
                self.offset_metadata_max_bytes = parse_num(key, value)?;
                // Stored with a u16 length (group::offsets).
                if self.offset_metadata_max_bytes > usize::from(u16::MAX) {
                    return Err(format!("{key} must be at most {}", u16::MAX));
                }
            }
            "log.cleanup.policy" => {
                topic::parse_cleanup_policy(key, value)?;
                self.cleanup_policy = value.trim().replace(' ', "");
            }
            "log.cleaner.enable" => self.cleaner_enable = parse_bool(key, value)?,
            "log.cleaner.backoff.ms" => {
                self.cleaner_backoff_ms = parse_num::<u64>(key, value)?.max(10)
            }
            "log.cleaner.io.max.bytes.per.second" => {
                // Kafka's default is a double (1.7976931348623157E308): any huge value is no cap.
                let v: f64 = parse_num(key, value)?;
                self.cleaner_io_max_bytes_per_second = match v {
                    v if v == -1.0 || v >= i64::MAX as f64 => None,
                    v if v >= 1.0 => Some(v as u64),
                    _ => {
                        return Err(format!(
                            "{key}: '{}' must be -1 (no cap) or at least 1",
                            value.trim()
                        ))
                    }
                }
            }
            "log.cleaner.min.cleanable.ratio" => {
                self.cleaner_min_cleanable_ratio = topic::parse_ratio(key, value)?
            }
            "log.cleaner.min.compaction.lag.ms" => {
                self.cleaner_min_compaction_lag_ms =
                    parse_bounded::<i64>(key, value, 0, i64::MAX)? as u64
            }
            "log.cleaner.max.compaction.lag.ms" => {
                self.cleaner_max_compaction_lag_ms = topic::parse_max_lag(key, value)?
            }
            "log.cleaner.delete.retention.ms" => {
                self.cleaner_delete_retention_ms =
                    parse_bounded::<i64>(key, value, 0, i64::MAX)? as u64
            }
            "socket.request.max.bytes" => {
                // A frame's size prefix is an i32.
                self.socket_request_max_bytes = parse_bounded(key, value, 1, i32::MAX as usize)?
            }
            "sasl.server.max.receive.size" => {
                self.sasl_max_receive_bytes = parse_bounded(key, value, 1, i32::MAX as usize)?
            }
            "connection.failed.authentication.delay.ms" => {
                self.failed_authentication_delay_ms = parse_bounded(key, value, 0, 60_000)?
            }
            "max.partitions" => self.max_partitions = parse_bounded(key, value, 1, 10_000_000)?,
            "log.open.segment.files.max" => {
                self.open_segment_files_max = match value.trim() {
                    "-1" => None,
                    _ => Some(parse_bounded(key, value.trim(), 1, 100_000_000)?),
                }
            }
            "queued.max.request.bytes" => {
                self.queued_max_request_bytes = match parse_num::<i64>(key, value)? {
                    -1 => None,
                    n if n >= 1 => Some(n as usize),
                    _ => return Err(format!("{key}: at least 1, or -1")),
                }
            }
            "log.retention.check.interval.ms" => {
                self.retention_check_interval_ms = parse_num::<u64>(key, value)?.max(10)
            }
            "remote.log.storage.system.enable" => {
                self.remote_storage_enable = parse_bool(key, value)?
            }
            "remote.log.storage.s3.bucket" => self.remote_s3.bucket = word_or_none(value),
            "remote.log.storage.s3.endpoint" => self.remote_s3.endpoint = word_or_none(value),
            "remote.log.storage.s3.region" => {
                self.remote_s3.region =
                    word_or_none(value).ok_or_else(|| format!("{key}: a region is needed"))?
            }
            "remote.log.storage.s3.prefix" => self.remote_s3.prefix = word_or_none(value),
            "remote.log.manager.task.interval.ms" => {
                self.remote_task_interval_ms = parse_num::<u64>(key, value)?.max(10)
            }
            "remote.log.upload.backlog.max.bytes" => {
                self.remote_backlog_max_bytes = parse_limit(key, value)?
            }
            "max.connections" => self.max_connections = parse_num(key, value)?,
            "connections.max.idle.ms" => {
                self.connections_max_idle_ms = parse_num::<u64>(key, value)?.max(1)
            }
            "fetch.max.parked" => self.max_parked_fetches = parse_num(key, value)?,
            "group.coordinator.rebalance.protocols" => {
                self.consumer_protocol = parse_rebalance_protocols(key, value)?
            }
            "group.consumer.session.timeout.ms" => {
                self.consumer_session_timeout_ms = parse_bounded(key, value, 1, i32::MAX as u64)?
            }
            "group.consumer.heartbeat.interval.ms" => {
                self.consumer_heartbeat_interval_ms = parse_bounded(key, value, 1, i32::MAX as u64)?
            }
            "fetch.max.wait.ms" => {
                // Clients send max_wait_ms as an i32.
                self.fetch_max_wait_ms = parse_bounded(key, value, 0, i32::MAX as u64)?
            }
            "log.dirs" | "log.dir" => self.data_dir = PathBuf::from(value.trim()),
            "listeners" => self.listeners = listeners::parse_listeners(key, value)?,
            "advertised.listeners" => {
                self.advertised_listeners = listeners::parse_advertised(key, value)?
            }
            "ssl.certificate.location" => self.ssl.certificate = path_or_none(value),
            "ssl.key.location" => self.ssl.key = path_or_none(value),
            "ssl.truststore.location" => self.ssl.truststore = path_or_none(value),
            "security.inter.broker.protocol" => {
                self.inter_broker_protocol = parse_inter_broker_protocol(key, value)?
            }
            "ssl.client.auth" => self.ssl.client_auth = Some(ClientAuth::parse(key, value)?),
            "sasl.enabled.mechanisms" => {
                self.sasl_mechanisms = listeners::parse_mechanisms(key, value)?
            }
            "connections.max.reauth.ms" => {
                self.connections_max_reauth_ms = parse_bounded(key, value, 0, i64::MAX as u64)?
            }
            "authorizer.class.name" => {
                self.authorizer.enabled = listeners::parse_authorizer(key, value)?
            }
            "super.users" => self.authorizer.super_users = listeners::parse_principals(key, value)?,
            "allow.everyone.if.no.acl.found" => {
                self.authorizer.allow_if_no_acl = parse_bool(key, value)?
            }
            "internal.topics.compaction.min.bytes" => {
                self.internal_topics_compaction_min_bytes = parse_num::<u64>(key, value)?.max(1);
            }
            "cache.bytes.per.core" => self.cache_bytes_per_core = parse_num(key, value)?,
            "read.cache.bytes.per.core" => self.read_cache_bytes_per_core = parse_num(key, value)?,
            "metrics.listen" => self.metrics_listen = address_or_off(value),
            "cross.core.queue.depth" => {
                self.mesh_queue_depth = parse_num(key, value)?;
                if self.mesh_queue_depth == 0 {
                    return Err("cross.core.queue.depth must be at least 1".into());
                }
            }
            _ => return Err(format!("unknown setting '{key}'")),
        }
        self.raw.insert(key.to_string(), value.trim().to_string());
        Ok(())
    }

    /// Applies the `WEIR_*` environment variables of known settings (`env_name`), from
    /// `vars` (the process environment in the broker). Other variables are ignored.
    pub fn apply_env(
        &mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Vec<String>, String> {
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        let mut applied = Vec::new();
        for s in SETTINGS {
            let var = env_name(s.name);
            if let Some(v) = vars.get(&var) {
                self.set(s.name, v).map_err(|e| format!("{var}: {e}"))?;
                applied.push(var);
            }
        }
        Ok(applied)
    }

    /// Reads `key=value` lines (`#` comments and blank lines ignored).
    pub fn load_file(&mut self, path: &std::path::Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading config {}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("{}:{}: expected key=value", path.display(), n + 1))?;
            self.set(k, v)
                .map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        }
        Ok(())
    }

    /// The current value of a broker setting, as a string (DescribeConfigs); `None` for a
    /// name not in `SETTINGS`.
    pub fn value_of(&self, name: &str) -> Option<String> {
        let opt = |v: Option<u64>| v.map_or("-1".to_string(), |v| v.to_string());
        Some(match name {
            "log.dirs" => self.data_dir.display().to_string(),
            "listeners" => listeners::render(&self.listeners),
            "advertised.listeners" => listeners::render(
                &(0..self.listeners.len())
                    .map(|i| Listener {
                        protocol: self.listeners[i].protocol,
                        address: self
                            .advertised_for(i)
                            .unwrap_or(&self.listeners[i].address)
                            .to_string(),
                    })
                    .collect::<Vec<_>>(),
            ),
            "ssl.certificate.location" => show_path(&self.ssl.certificate),
            "ssl.key.location" => show_path(&self.ssl.key),
            "ssl.truststore.location" => show_path(&self.ssl.truststore),
            "security.inter.broker.protocol" => self
                .inter_broker_protocol
                .map_or("none", SecurityProtocol::name)
                .into(),
            "ssl.client.auth" => self
                .ssl
                .client_auth
                .unwrap_or(ClientAuth::None)
                .name()
                .to_string(),
            "num.partitions" => self.num_partitions.to_string(),
            "default.replication.factor" => self.default_replication_factor.to_string(),
            "auto.create.topics.enable" => self.auto_create_topics.to_string(),
            "auto.leader.rebalance.enable" => self.auto_leader_rebalance.to_string(),
            "replica.hibernate.enable" => self.replica_hibernate.to_string(),
            "controlled.shutdown.enable" => self.controlled_shutdown.to_string(),
            "controlled.shutdown.timeout.ms" => self.controlled_shutdown_timeout_ms.to_string(),
            "leader.imbalance.check.interval.seconds" => {
                self.leader_imbalance_check_interval_s.to_string()
            }
            "transaction.max.timeout.ms" => self.transaction_max_timeout_ms.to_string(),
            "transactional.id.expiration.ms" => self.transactional_id_expiration_ms.to_string(),
            "producer.id.expiration.ms" => self.producer_id_expiration_ms.to_string(),
            "listeners.per.core" => self.listeners_per_core.to_string(),
            "node.id" => self.node_id.map_or("-1".to_string(), |id| id.to_string()),
            "broker.rack" => self.rack.clone().unwrap_or_else(|| "none".into()),
            "replica.selector.class" => if self.rack_aware_reads {
                "org.apache.kafka.common.replica.RackAwareReplicaSelector"
            } else {
                "none"
            }
            .to_string(),
            "controller.quorum.voters" => match self.voters.as_slice() {
                [] => "none".to_string(),
                v => v
                    .iter()
                    .map(|v| format!("{}@{}", v.id, v.addr))
                    .collect::<Vec<_>>()
                    .join(","),
            },
            "offset.metadata.max.bytes" => self.offset_metadata_max_bytes.to_string(),
            "log.segment.bytes" => self.segment_bytes.to_string(),
            "log.roll.ms" => opt(self.segment_ms),
            "log.retention.ms" => opt(self.retention_ms),
            "log.retention.hours" => opt(self.retention_ms.map(|ms| ms / 3_600_000)),
            "log.retention.bytes" => opt(self.retention_bytes),
            "log.cleanup.policy" => self.cleanup_policy.clone(),
            "log.cleaner.enable" => self.cleaner_enable.to_string(),
            "log.cleaner.backoff.ms" => self.cleaner_backoff_ms.to_string(),
            "log.cleaner.io.max.bytes.per.second" => opt(self.cleaner_io_max_bytes_per_second),
            "log.cleaner.min.cleanable.ratio" => self.cleaner_min_cleanable_ratio.to_string(),
            "log.cleaner.min.compaction.lag.ms" => self.cleaner_min_compaction_lag_ms.to_string(),
            "log.cleaner.max.compaction.lag.ms" => self
                .cleaner_max_compaction_lag_ms
                .unwrap_or(i64::MAX as u64)
                .to_string(),
            "log.cleaner.delete.retention.ms" => self.cleaner_delete_retention_ms.to_string(),
            "message.max.bytes" => self.max_message_bytes.to_string(),
            "message.max.decompressed.bytes" => self
                .max_decompressed_bytes
                .map_or("-1".into(), |n| n.to_string()),
            "log.message.timestamp.type" => topic::timestamp_type_name(self.timestamp_type).into(),
            "log.message.timestamp.before.max.ms" => self.timestamp_before_max_ms.to_string(),
            "log.message.timestamp.after.max.ms" => self.timestamp_after_max_ms.to_string(),
            "log.retention.check.interval.ms" => self.retention_check_interval_ms.to_string(),
            "remote.log.storage.system.enable" => self.remote_storage_enable.to_string(),
            "remote.log.storage.s3.bucket" => show_word(&self.remote_s3.bucket),
            "remote.log.storage.s3.endpoint" => show_word(&self.remote_s3.endpoint),
            "remote.log.storage.s3.region" => self.remote_s3.region.clone(),
            "remote.log.storage.s3.prefix" => show_word(&self.remote_s3.prefix),
            "remote.log.manager.task.interval.ms" => self.remote_task_interval_ms.to_string(),
            "remote.log.upload.backlog.max.bytes" => opt(self.remote_backlog_max_bytes),
            "socket.request.max.bytes" => self.socket_request_max_bytes.to_string(),
            "sasl.server.max.receive.size" => self.sasl_max_receive_bytes.to_string(),
            "max.partitions" => self.max_partitions.to_string(),
            "log.open.segment.files.max" => self
                .open_segment_files_max
                .map_or("-1".into(), |n| n.to_string()),
            "connection.failed.authentication.delay.ms" => {
                self.failed_authentication_delay_ms.to_string()
            }
            "queued.max.request.bytes" => self
                .queued_max_request_bytes
                .map_or("-1".into(), |n| n.to_string()),
            "max.connections" => self.max_connections.to_string(),
            "connections.max.idle.ms" => self.connections_max_idle_ms.to_string(),
            "connections.max.reauth.ms" => self.connections_max_reauth_ms.to_string(),
            "authorizer.class.name" => if self.authorizer.enabled {
                "weir"
            } else {
                "none"
            }
            .into(),
            "super.users" if self.authorizer.super_users.is_empty() => "none".into(),
            "super.users" => self.authorizer.super_users.join(";"),
            "allow.everyone.if.no.acl.found" => self.authorizer.allow_if_no_acl.to_string(),
            "sasl.enabled.mechanisms" => self
                .sasl_mechanisms
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(","),
            "fetch.max.parked" => self.max_parked_fetches.to_string(),
            "fetch.max.wait.ms" => self.fetch_max_wait_ms.to_string(),
            "group.coordinator.rebalance.protocols" if self.consumer_protocol => {
                "classic,consumer".into()
            }
            "group.coordinator.rebalance.protocols" => "classic".into(),
            "group.consumer.session.timeout.ms" => self.consumer_session_timeout_ms.to_string(),
            "group.consumer.heartbeat.interval.ms" => {
                self.consumer_heartbeat_interval_ms.to_string()
            }
            "internal.topics.compaction.min.bytes" => {
                self.internal_topics_compaction_min_bytes.to_string()
            }
            "cache.bytes.per.core" => self.cache_bytes_per_core.to_string(),
            "read.cache.bytes.per.core" => self.read_cache_bytes_per_core.to_string(),
            "cross.core.queue.depth" => self.mesh_queue_depth.to_string(),
            "metrics.listen" => self
                .metrics_listen
                .clone()
                .unwrap_or_else(|| "off".to_string()),
            _ => return None,
        })
    }

    /// `queued.max.request.bytes` as applied: never below one largest request.
    pub fn queued_max_request_bytes(&self) -> usize {
        self.queued_max_request_bytes
            .unwrap_or(256 << 20)
            .max(self.socket_request_max_bytes)
    }

    /// The broker default of a topic config, as a string (DescribeConfigs).
    pub fn topic_default(&self, topic_key: &str) -> Option<String> {
        let opt = |v: Option<u64>| v.map_or("-1".to_string(), |v| v.to_string());
        Some(match topic_key {
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => opt(self.segment_ms),
            "retention.ms" => opt(self.retention_ms),
            "retention.bytes" => opt(self.retention_bytes),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "cleanup.policy" => self.cleanup_policy.clone(),
            "min.cleanable.dirty.ratio" => self.cleaner_min_cleanable_ratio.to_string(),
            "min.compaction.lag.ms" => self.cleaner_min_compaction_lag_ms.to_string(),
            "max.compaction.lag.ms" => self
                .cleaner_max_compaction_lag_ms
                .unwrap_or(i64::MAX as u64)
                .to_string(),
            "delete.retention.ms" => self.cleaner_delete_retention_ms.to_string(),
            "message.timestamp.type" => topic::timestamp_type_name(self.timestamp_type).into(),
            "message.timestamp.before.max.ms" => self.timestamp_before_max_ms.to_string(),
            "message.timestamp.after.max.ms" => self.timestamp_after_max_ms.to_string(),
            _ => return None,
        })
    }

    /// The `LogConfig` of a topic: broker defaults with the topic's overrides.
    pub fn log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        let mut c = LogConfig {
            segment_bytes: self.segment_bytes,
            segment_ms: self.segment_ms,
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            max_batch_bytes: self.max_message_bytes,
            min_cleanable_dirty_ratio: self.cleaner_min_cleanable_ratio,
            min_compaction_lag_ms: self.cleaner_min_compaction_lag_ms,
            max_compaction_lag_ms: self.cleaner_max_compaction_lag_ms,
            delete_retention_ms: self.cleaner_delete_retention_ms,
            producer_id_expiration_ms: self.producer_id_expiration_ms,
            timestamp_type: self.timestamp_type,
            timestamp_before_max_ms: self.timestamp_before_max_ms,
            timestamp_after_max_ms: self.timestamp_after_max_ms,
            ..LogConfig::default()
        };
        let _ = apply_topic_config(&mut c, "cleanup.policy", &self.cleanup_policy);
        for (k, v) in overrides {
            // Checked when set; one that fails today's checks (an older weir stored it) is
            // skipped, and reported at start-up (`invalid_overrides`).
            let _ = apply_topic_config(&mut c, k, v);
        }
        let local = |key: &str, whole: Option<u64>| match overrides.get(key) {
            Some(v) => topic::parse_local_limit(key, v)
                .ok()
                .flatten()
                .unwrap_or(whole),
            None => whole,
        };
        c.local_retention_ms = local("local.retention.ms", c.retention_ms);
        c.local_retention_bytes = local("local.retention.bytes", c.retention_bytes);
        c.remote_backlog_max_bytes = self.remote_backlog_max_bytes;
        c.inflated_max_bytes = self
            .max_decompressed_bytes
            .unwrap_or_else(|| (8 * c.max_batch_bytes as u64).max(64 << 20));
        c
    }
}

/// The S3 bucket of the remote tier (`remote.log.storage.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteStorageConfig {
    /// `remote.log.storage.s3.bucket`.
    pub bucket: Option<String>,
    /// `remote.log.storage.s3.endpoint` (`None`: AWS).
    pub endpoint: Option<String>,
    /// `remote.log.storage.s3.region`.
    pub region: String,
    /// `remote.log.storage.s3.prefix`.
    pub prefix: Option<String>,
}

impl Default for RemoteStorageConfig {
    fn default() -> Self {
        RemoteStorageConfig {
            bucket: None,
            endpoint: None,
            region: "us-east-1".into(),
            prefix: None,
        }
    }
}

impl BrokerConfig {
    /// The remote tier's bucket, if tiered storage is on.
    pub fn remote_storage(&self) -> Option<&RemoteStorageConfig> {
        self.remote_storage_enable.then_some(&self.remote_s3)
    }
}

/// A word, or `None` for `none` (or empty).
fn word_or_none(v: &str) -> Option<String> {
    let v = v.trim();
    (!v.is_empty() && !v.eq_ignore_ascii_case("none")).then(|| v.to_string())
}

fn show_word(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "none".into())
}

/// An address, or `None` for `off` (or empty).
fn address_or_off(v: &str) -> Option<String> {
    let v = v.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("off") {
        None
    } else {
        Some(strip_scheme(v))
    }
}

/// `security.inter.broker.protocol`: SSL, PLAINTEXT, or unset (none / empty).
fn parse_inter_broker_protocol(key: &str, value: &str) -> Result<Option<SecurityProtocol>, String> {
    let v = value.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("none") {
        Ok(None)
    } else if v.eq_ignore_ascii_case("PLAINTEXT") {
        Ok(Some(SecurityProtocol::Plaintext))
    } else if v.eq_ignore_ascii_case("SSL") {
        Ok(Some(SecurityProtocol::Ssl))
    } else {
        Err(format!(
            "{key}: '{v}' is not SSL or PLAINTEXT (brokers authenticate each other with mutual TLS)"
        ))
    }
}

/// A path, or `None` for `none` (or empty).
fn path_or_none(v: &str) -> Option<PathBuf> {
    let v = v.trim();
    (!v.is_empty() && !v.eq_ignore_ascii_case("none")).then(|| PathBuf::from(v))
}

fn show_path(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map_or("none".to_string(), |p| p.display().to_string())
}

fn strip_scheme(v: &str) -> String {
    let v = v.trim();
    match v.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        None => v.to_string(),
    }
}

/// `group.coordinator.rebalance.protocols`: a list of `classic` and `consumer`, `classic`
/// included (as Kafka requires); whether `consumer` is.
fn parse_rebalance_protocols(key: &str, value: &str) -> Result<bool, String> {
    let mut classic = false;
    let mut consumer = false;
    for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.to_ascii_lowercase().as_str() {
            "classic" => classic = true,
            "consumer" => consumer = true,
            other => {
                return Err(format!(
                    "{key}: unknown group protocol '{other}' (classic, consumer)"
                ))
            }
        }
    }
    if !classic {
        return Err(format!("{key}: must include classic"));
    }
    Ok(consumer)
}
