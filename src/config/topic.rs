//! Topic-level configs: the ones a topic may override (each defaulting from a broker
//! setting), the Kafka ones weir accepts and stores but does not act on, and how an override
//! becomes part of a partition's `LogConfig`.

use std::collections::BTreeMap;

use weir_storage::batch::TimestampType;
use weir_storage::LogConfig;

use super::*;

/// Topic-level config names a topic may override (CreateTopics configs), and the broker
/// setting each one defaults from.
pub const TOPIC_CONFIGS: &[(&str, &str)] = &[
    ("segment.bytes", "log.segment.bytes"),
    ("segment.ms", "log.roll.ms"),
    ("retention.ms", "log.retention.ms"),
    ("retention.bytes", "log.retention.bytes"),
    ("max.message.bytes", "message.max.bytes"),
    ("cleanup.policy", "log.cleanup.policy"),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
    ),
    ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    ("delete.retention.ms", "log.cleaner.delete.retention.ms"),
    ("message.timestamp.type", "log.message.timestamp.type"),
    (
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
    ),
    (
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
    ),
];

/// How the value of a Kafka topic config weir stores but does not act on is checked.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// A 64-bit integer at least this.
    Long(i64),
    Bool,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// A number in `0.0..=1.0`.
    Ratio,
    /// A message format / metadata version: `0.10.0`, `2.8-IV1`.
    Version,
    /// Throttled replicas: empty, `*`, or `partition:broker` pairs separated by commas.
    Replicas,
}

/// Kafka's other topic configs (Kafka 3.x/4.0 `TopicConfig`): accepted with a valid value,
/// stored and reported by DescribeConfigs, but weir does not act on them (docs/configuration.md
/// lists them and why). A name in neither this table nor `TOPIC_CONFIGS` is refused.
pub const IGNORED_TOPIC_CONFIGS: &[(&str, Kind)] = &[
    (
        "compression.type",
        Kind::OneOf(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
    ),
    ("file.delete.delay.ms", Kind::Long(0)),
    ("flush.messages", Kind::Long(1)),
    ("flush.ms", Kind::Long(0)),
    ("follower.replication.throttled.replicas", Kind::Replicas),
    ("index.interval.bytes", Kind::Long(0)),
    ("leader.replication.throttled.replicas", Kind::Replicas),
    ("message.downconversion.enable", Kind::Bool),
    ("message.format.version", Kind::Version),
    ("message.timestamp.difference.max.ms", Kind::Long(0)),
    ("min.insync.replicas", Kind::Long(1)),
    ("preallocate", Kind::Bool),
    ("remote.log.copy.disable", Kind::Bool),
    ("remote.log.delete.on.disable", Kind::Bool),
    ("segment.index.bytes", Kind::Long(4)),
    ("segment.jitter.ms", Kind::Long(0)),
    ("unclean.leader.election.enable", Kind::Bool),
];

/// Checks a value of a config in `IGNORED_TOPIC_CONFIGS`.
pub(super) fn check_kind(key: &str, kind: Kind, value: &str) -> Result<(), String> {
    let v = value.trim();
    let ok = match kind {
        Kind::Long(min) => match v.parse::<i64>() {
            Ok(n) if n >= min => true,
            Ok(_) => return Err(format!("{key}: '{v}' is below the minimum {min}")),
            Err(_) => false,
        },
        Kind::Bool => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
        Kind::OneOf(words) => {
            if words.iter().any(|w| w.eq_ignore_ascii_case(v)) {
                true
            } else {
                return Err(format!("{key}: '{v}' is not one of {}", words.join(", ")));
            }
        }
        Kind::Ratio => v.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)),
        Kind::Version => {
            let (nums, iv) = v.split_once("-IV").unwrap_or((v, "0"));
            let parts: Vec<&str> = nums.split('.').collect();
            (2..=4).contains(&parts.len())
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                && !iv.is_empty()
                && iv.bytes().all(|b| b.is_ascii_digit())
        }
        Kind::Replicas => {
            v.is_empty()
                || v == "*"
                || v.split(',').all(|pair| {
                    pair.trim().split_once(':').is_some_and(|(p, b)| {
                        p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
                    })
                })
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{key}: '{v}' is not a valid value ({kind:?})"))
    }
}

/// The stored overrides of a topic that do not pass `apply_topic_config` (key, value, why):
/// `BrokerConfig::log_config` skips them, and start-up reports them.
pub fn invalid_overrides(overrides: &BTreeMap<String, String>) -> Vec<(String, String, String)> {
    let mut scratch = LogConfig::default();
    overrides
        .iter()
        .filter_map(|(k, v)| {
            apply_topic_config(&mut scratch, k, v)
                .err()
                .map(|why| (k.clone(), v.clone(), why))
        })
        .collect()
}

/// Checks and applies one topic-level config to a `LogConfig`.
pub fn apply_topic_config(c: &mut LogConfig, key: &str, value: &str) -> Result<(), String> {
    match key {
        "segment.bytes" => c.segment_bytes = parse_segment_bytes(key, value)?,
        "segment.ms" => c.segment_ms = parse_roll_ms(key, value)?,
        "retention.ms" => c.retention_ms = parse_limit(key, value)?,
        "retention.bytes" => c.retention_bytes = parse_limit(key, value)?,
        "max.message.bytes" => c.max_batch_bytes = parse_message_bytes(key, value)?,
        "cleanup.policy" => {
            (c.cleanup_delete, c.cleanup_compact) = parse_cleanup_policy(key, value)?;
        }
        "min.cleanable.dirty.ratio" => c.min_cleanable_dirty_ratio = parse_ratio(key, value)?,
        "min.compaction.lag.ms" => {
            c.min_compaction_lag_ms = parse_bounded::<i64>(key, value, 0, i64::MAX)? as u64
        }
        "max.compaction.lag.ms" => c.max_compaction_lag_ms = parse_max_lag(key, value)?,
        "delete.retention.ms" => {
            c.delete_retention_ms = parse_bounded::<i64>(key, value, 0, i64::MAX)? as u64
        }
        "message.timestamp.type" => c.timestamp_type = parse_timestamp_type(key, value)?,
        "message.timestamp.before.max.ms" => {
            c.timestamp_before_max_ms = parse_bounded(key, value, 0, i64::MAX)?
        }
        "message.timestamp.after.max.ms" => {
            c.timestamp_after_max_ms = parse_bounded(key, value, 0, i64::MAX)?
        }
        "remote.storage.enable" => c.remote_storage = parse_bool(key, value)?,
        // -2 (the default) is the whole log's `retention.*`: `BrokerConfig::log_config`
        // resolves it once every override is in.
        "local.retention.ms" => {
            if let Some(limit) = parse_local_limit(key, value)? {
                c.local_retention_ms = limit;
            }
        }
        "local.retention.bytes" => {
            if let Some(limit) = parse_local_limit(key, value)? {
                c.local_retention_bytes = limit;
            }
        }
        _ => match IGNORED_TOPIC_CONFIGS.iter().find(|(k, _)| *k == key) {
            Some(&(_, kind)) => check_kind(key, kind, value)?,
            None => return Err(format!("unknown topic config '{key}'")),
        },
    }
    Ok(())
}

/// `local.retention.ms` / `local.retention.bytes`: -2 (`None`: as `retention.*`), -1
/// (`Some(None)`: no limit) or a limit.
pub(super) fn parse_local_limit(key: &str, value: &str) -> Result<Option<Option<u64>>, String> {
    match value.trim() {
        "-2" => Ok(None),
        v => super::parse_limit(key, v)
            .map(Some)
            .map_err(|e| format!("{e}, or -2 (as retention)")),
    }
}

/// `message.timestamp.type`: `CreateTime` or `LogAppendTime` (Kafka's spelling, any case).
pub(super) fn parse_timestamp_type(key: &str, value: &str) -> Result<TimestampType, String> {
    match value.trim() {
        v if v.eq_ignore_ascii_case("CreateTime") => Ok(TimestampType::CreateTime),
        v if v.eq_ignore_ascii_case("LogAppendTime") => Ok(TimestampType::LogAppendTime),
        v => Err(format!("{key}: '{v}' is not CreateTime or LogAppendTime")),
    }
}

/// Kafka's name of a timestamp type.
pub(super) fn timestamp_type_name(t: TimestampType) -> &'static str {
    match t {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

/// `cleanup.policy`: a comma-separated list of `delete` and `compact`. Returns (delete,
/// compact).
pub(super) fn parse_cleanup_policy(key: &str, value: &str) -> Result<(bool, bool), String> {
    let v = value.trim();
    let policies: Vec<&str> = v.split(',').map(str::trim).collect();
    if v.is_empty() || !policies.iter().all(|p| *p == "delete" || *p == "compact") {
        return Err(format!(
            "{key}: '{v}' is not a list of 'delete' and 'compact'"
        ));
    }
    Ok((policies.contains(&"delete"), policies.contains(&"compact")))
}

/// A ratio in `0.0..=1.0`.
pub(super) fn parse_ratio(key: &str, value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "{key}: '{}' is not a valid value (a ratio from 0 to 1)",
            value.trim()
        )),
    }
}

/// `max.compaction.lag.ms`: at least 1; Kafka's default `Long.MAX_VALUE` means no limit.
pub(super) fn parse_max_lag(key: &str, value: &str) -> Result<Option<u64>, String> {
    let v = parse_bounded::<i64>(key, value, 1, i64::MAX)?;
    Ok((v < i64::MAX).then_some(v as u64))
}
