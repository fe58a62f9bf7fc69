//! The type of each config as Kafka declares it, which DescribeConfigs v3+ reports
//! (`config_type`); clients show it and some check it (kafka-python's admin tests expect
//! `retention.bytes` to be LONG). Weir's own settings get the type their values have.

/// Kafka's `ConfigType` (DescribeConfigsResponse v3+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigType {
    Unknown = 0,
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

/// The type of a broker setting or topic config, by name; `Unknown` for a name weir does
/// not know (`config::tests` checks every name of `SETTINGS`, `TOPIC_CONFIGS` and
/// `IGNORED_TOPIC_CONFIGS` has a type).
pub fn config_type(name: &str) -> ConfigType {
    use ConfigType::*;
    match name {
        // Broker settings: Kafka's types for Kafka's names, the value's type for weir's own.
        "log.dirs"
        | "listeners"
        | "advertised.listeners"
        | "metrics.listen"
        | "ssl.certificate.location"
        | "ssl.key.location"
        | "ssl.truststore.location"
        | "security.inter.broker.protocol"
        | "ssl.client.auth"
        | "authorizer.class.name"
        | "super.users"
        | "broker.rack"
        | "replica.selector.class"
        | "remote.log.storage.s3.bucket"
        | "remote.log.storage.s3.endpoint"
        | "remote.log.storage.s3.region"
        | "remote.log.storage.s3.prefix" => String,
        "controller.quorum.voters" => List,
        "listeners.per.core"
        | "auto.create.topics.enable"
        | "auto.leader.rebalance.enable"
        | "replica.hibernate.enable"
        | "controlled.shutdown.enable"
        | "log.cleaner.enable"
        | "remote.log.storage.system.enable"
        | "allow.everyone.if.no.acl.found" => Boolean,
        "offset.metadata.max.bytes"
        | "node.id"
        | "num.partitions"
        | "default.replication.factor"
        | "log.segment.bytes"
        | "log.retention.hours"
        | "message.max.bytes"
        | "socket.request.max.bytes"
        | "sasl.server.max.receive.size"
        | "max.partitions"
        | "log.open.segment.files.max"
        | "max.connections"
        | "fetch.max.parked"
        | "transaction.max.timeout.ms"
        | "transactional.id.expiration.ms"
        | "producer.id.expiration.ms"
        | "cross.core.queue.depth" => Int,
        "log.roll.ms"
        | "log.retention.ms"
        | "log.retention.bytes"
        | "remote.log.upload.backlog.max.bytes"
        | "log.retention.check.interval.ms"
        | "remote.log.manager.task.interval.ms"
        | "connections.max.idle.ms"
        | "connections.max.reauth.ms"
        | "fetch.max.wait.ms"
        | "group.consumer.session.timeout.ms"
        | "group.consumer.heartbeat.interval.ms"
        | "cache.bytes.per.core"
        | "internal.topics.compaction.min.bytes"
        | "leader.imbalance.check.interval.seconds"
        | "controlled.shutdown.timeout.ms"
        | "read.cache.bytes.per.core"
        | "log.cleaner.backoff.ms"
        | "log.cleaner.min.compaction.lag.ms"
        | "log.cleaner.max.compaction.lag.ms"
        | "log.cleaner.delete.retention.ms" => Long,
        "log.message.timestamp.before.max.ms"
        | "log.message.timestamp.after.max.ms"
        | "message.max.decompressed.bytes"
        | "queued.max.request.bytes"
        | "connection.failed.authentication.delay.ms" => Long,
        "log.message.timestamp.type" => String,
        "log.cleaner.io.max.bytes.per.second" | "log.cleaner.min.cleanable.ratio" => Double,
        "log.cleanup.policy"
        | "sasl.enabled.mechanisms"
        | "group.coordinator.rebalance.protocols" => List,
        // Topic configs (Kafka's LogConfig).
        "segment.bytes"
        | "max.message.bytes"
        | "index.interval.bytes"
        | "min.insync.replicas"
        | "segment.index.bytes" => Int,
        "segment.ms"
        | "retention.ms"
        | "retention.bytes"
        | "delete.retention.ms"
        | "file.delete.delay.ms"
        | "flush.messages"
        | "flush.ms"
        | "local.retention.bytes"
        | "local.retention.ms"
        | "max.compaction.lag.ms"
        | "message.timestamp.after.max.ms"
        | "message.timestamp.before.max.ms"
        | "message.timestamp.difference.max.ms"
        | "min.compaction.lag.ms"
        | "segment.jitter.ms" => Long,
        "cleanup.policy"
        | "follower.replication.throttled.replicas"
        | "leader.replication.throttled.replicas" => List,
        "compression.type" | "message.format.version" | "message.timestamp.type" => String,
        "message.downconversion.enable"
        | "preallocate"
        | "remote.log.copy.disable"
        | "remote.log.delete.on.disable"
        | "remote.storage.enable"
        | "unclean.leader.election.enable" => Boolean,
        "min.cleanable.dirty.ratio" => Double,
        _ => Unknown,
    }
}
