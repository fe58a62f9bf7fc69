//! The settings table, its parsing and bounds, against docs/configuration.md.

use std::collections::BTreeMap;

use super::*;

/// Every size and time setting a client can set (CreateTopics, AlterConfigs) has bounds
/// that fit the engine: segment.bytes past 2^31-1 let a segment outgrow its 32-bit index
/// positions (an assertion panic on append), and retention values past i64::MAX wrapped
/// the retention arithmetic.
/// Kafka's topic configs weir does not act on are accepted with a valid value (tools and
/// librdkafka's tests set them), refused with a bad one; unknown names are refused.
#[test]
fn kafka_topic_configs_are_accepted_checked_or_refused() {
    let mut c = LogConfig::default();
    for (k, v) in [
        ("message.format.version", "0.10.0.0"),
        ("message.format.version", "3.0-IV1"),
        ("delete.retention.ms", "86400000"),
        ("compression.type", "lz4"),
        ("min.insync.replicas", "2"),
        ("min.cleanable.dirty.ratio", "0.5"),
        ("preallocate", "true"),
        ("leader.replication.throttled.replicas", "0:1,1:1"),
        ("follower.replication.throttled.replicas", "*"),
        ("message.timestamp.type", "CreateTime"),
        ("local.retention.ms", "-2"),
        ("cleanup.policy", "delete"),
    ] {
        apply_topic_config(&mut c, k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    for (k, v, why) in [
        ("message.format.version", "ten", "not a valid value"),
        ("delete.retention.ms", "-5", "must be between 0"),
        ("max.compaction.lag.ms", "0", "must be between 1"),
        ("compression.type", "brotli", "not one of"),
        ("min.cleanable.dirty.ratio", "1.5", "not a valid value"),
        ("preallocate", "yes", "not a valid value"),
        (
            "leader.replication.throttled.replicas",
            "a:b",
            "not a valid value",
        ),
        ("message.timestamp.type", "SometimesTime", "not CreateTime"),
        ("message.timestamp.after.max.ms", "-1", "must be between 0"),
        ("remote.storage.enable", "yes", "not true or false"),
        ("local.retention.bytes", "-3", "or -2 (as retention)"),
        ("cleanup.policy", "sometimes", "not a list"),
        ("cleanup.policy", "", "not a list"),
        ("no.such.config", "1", "unknown topic config"),
    ] {
        let err = apply_topic_config(&mut c, k, v).expect_err(&format!("{k}={v} accepted"));
        assert!(err.contains(why), "{k}={v}: {err}");
    }
    // cleanup.policy and the compaction settings reach the engine.
    for (v, delete, compact) in [
        ("compact", false, true),
        ("compact,delete", true, true),
        ("delete, compact", true, true),
        ("delete", true, false),
    ] {
        apply_topic_config(&mut c, "cleanup.policy", v).expect(v);
        assert_eq!(
            (c.cleanup_delete, c.cleanup_compact),
            (delete, compact),
            "{v}"
        );
    }
    apply_topic_config(&mut c, "max.compaction.lag.ms", "9223372036854775807").expect("max");
    assert_eq!(c.max_compaction_lag_ms, None, "Long.MAX_VALUE is no limit");
    apply_topic_config(&mut c, "max.compaction.lag.ms", "60000").expect("lag");
    assert_eq!(c.max_compaction_lag_ms, Some(60_000));
    let mut broker = BrokerConfig::default();
    broker
        .set("log.cleanup.policy", "compact")
        .expect("broker policy");
    broker
        .set("log.cleaner.delete.retention.ms", "5")
        .expect("broker setting");
    let lc = broker.log_config(&BTreeMap::new());
    assert!(lc.cleanup_compact && !lc.cleanup_delete);
    assert_eq!(lc.delete_retention_ms, 5);
    // Names are Kafka's own and not repeated.
    for (k, _) in IGNORED_TOPIC_CONFIGS {
        assert!(
            !TOPIC_CONFIGS.iter().any(|(t, _)| t == k),
            "{k} is in both tables"
        );
    }
}

#[test]
fn topic_settings_are_bounded() {
    let mut c = LogConfig::default();
    for (k, v) in [
        ("segment.bytes", "2147483648"),
        ("segment.bytes", "18446744073709551615"),
        ("segment.bytes", "4095"),
        ("segment.bytes", "-1"),
        ("segment.ms", "0"),
        ("segment.ms", "-2"),
        ("retention.ms", "-2"),
        ("retention.ms", "9223372036854775808"),
        ("retention.bytes", "-5"),
        ("max.message.bytes", "268435457"),
        ("max.message.bytes", "-1"),
    ] {
        let err = apply_topic_config(&mut c, k, v).expect_err(&format!("{k}={v} accepted"));
        assert!(err.contains(k), "{err}");
    }
    for (k, v) in [
        ("segment.bytes", "2147483647"),
        ("segment.ms", "-1"),
        ("retention.ms", "9223372036854775807"),
        ("retention.bytes", "-1"),
        ("max.message.bytes", "268435456"),
    ] {
        apply_topic_config(&mut c, k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    let mut b = BrokerConfig::default();
    assert!(b.set("log.segment.bytes", "3000000000").is_err());
    assert!(b.set("log.retention.hours", "9223372036854775807").is_err());
    assert!(b.set("socket.request.max.bytes", "4294967296").is_err());
    assert!(b.set("fetch.max.wait.ms", "2147483648").is_err());
}

#[test]
fn kafka_names_parse_and_minus_one_means_unlimited() {
    let mut c = BrokerConfig::default();
    c.set("log.retention.ms", "-1").unwrap();
    c.set("log.retention.bytes", "1048576").unwrap();
    c.set("num.partitions", "3").unwrap();
    c.set("auto.create.topics.enable", "false").unwrap();
    assert_eq!(c.retention_ms, None);
    assert_eq!(c.retention_bytes, Some(1 << 20));
    assert_eq!(c.num_partitions, 3);
    assert!(!c.auto_create_topics);
    assert!(c.set("nope", "1").is_err());
    assert!(c.set("num.partitions", "x").is_err());
}

/// Follower fetching's settings take Kafka's values, and refuse what Kafka would not run.
#[test]
fn rack_settings_take_kafkas_values() {
    let mut c = BrokerConfig::default();
    assert_eq!((c.rack.as_deref(), c.rack_aware_reads), (None, false));
    c.set("broker.rack", "eu-west-1a").unwrap();
    c.set(
        "replica.selector.class",
        "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    )
    .unwrap();
    assert_eq!(
        (c.rack.as_deref(), c.rack_aware_reads),
        (Some("eu-west-1a"), true)
    );
    c.set(
        "replica.selector.class",
        "org.apache.kafka.common.replica.LeaderSelector",
    )
    .unwrap();
    assert!(!c.rack_aware_reads);
    c.set("broker.rack", "none").unwrap();
    assert_eq!(c.rack, None);
    assert!(c.set("replica.selector.class", "com.example.Mine").is_err());
    assert!(c.set("broker.rack", &"r".repeat(256)).is_err());
}

#[test]
fn every_setting_is_accepted_and_documented() {
    let doc = include_str!("../../docs/configuration.md");
    let code = include_str!("mod.rs");
    // Every name `set` matches on is in SETTINGS (or is an alias documented there).
    let set_fn = &code[code.find("pub fn set(").unwrap()..code.find("fn load_file").unwrap()];
    for line in set_fn.lines().filter(|l| l.contains("=>")) {
        for name in line.split("=>").next().unwrap().split('|') {
            let name = name.trim().trim_matches('"');
            if name.is_empty() || name == "_" || name.contains(' ') {
                continue;
            }
            assert!(
                SETTINGS.iter().any(|s| s.name == name) || doc.contains(&format!("`{name}`")),
                "setting '{name}' is accepted but missing from SETTINGS"
            );
        }
    }
    for s in SETTINGS {
        let row = format!("| `{}` |", s.name);
        assert!(
            doc.contains(&row),
            "docs/configuration.md has no row for `{}`",
            s.name
        );
        assert!(
            doc.contains(&format!("`{}`", env_name(s.name))),
            "docs/configuration.md does not name {}",
            env_name(s.name)
        );
        if !s.default.contains(' ') {
            let mut c = BrokerConfig::default();
            c.set(s.name, s.default)
                .unwrap_or_else(|e| panic!("default of {}: {e}", s.name));
        }
        if let Some(t) = s.topic {
            assert!(TOPIC_CONFIGS.contains(&(t, s.name)), "{t} <- {}", s.name);
        }
    }
    // The documented defaults are the real ones.
    let d = BrokerConfig::default();
    assert_eq!(d.segment_bytes.to_string(), default_of("log.segment.bytes"));
    assert_eq!(
        d.max_message_bytes.to_string(),
        default_of("message.max.bytes")
    );
    assert_eq!(
        d.cache_bytes_per_core.to_string(),
        default_of("cache.bytes.per.core")
    );
    assert_eq!(
        d.read_cache_bytes_per_core.to_string(),
        default_of("read.cache.bytes.per.core")
    );
    assert_eq!(
        d.max_parked_fetches.to_string(),
        default_of("fetch.max.parked")
    );
    assert_eq!(
        d.mesh_queue_depth.to_string(),
        default_of("cross.core.queue.depth")
    );
    assert_eq!(
        d.connections_max_idle_ms.to_string(),
        default_of("connections.max.idle.ms")
    );
    assert_eq!(d.value_of("listeners").unwrap(), default_of("listeners"));
    for s in SETTINGS {
        assert!(d.value_of(s.name).is_some(), "value_of({})", s.name);
        if !s.default.contains(' ') {
            assert_eq!(d.value_of(s.name).unwrap(), s.default, "{}", s.name);
        }
    }
}

fn default_of(name: &str) -> &'static str {
    SETTINGS.iter().find(|s| s.name == name).unwrap().default
}

#[test]
fn environment_overrides_and_is_checked() {
    let mut c = BrokerConfig::default();
    c.set("log.retention.ms", "1000").unwrap();
    let env = [
        ("WEIR_LOG_RETENTION_MS".to_string(), "2000".to_string()),
        ("WEIR_BIN".to_string(), "not a setting".to_string()),
    ];
    assert_eq!(c.apply_env(env).unwrap(), vec!["WEIR_LOG_RETENTION_MS"]);
    assert_eq!(c.retention_ms, Some(2000));
    let bad = [("WEIR_NUM_PARTITIONS".to_string(), "many".to_string())];
    let e = c.apply_env(bad).unwrap_err();
    assert!(e.contains("WEIR_NUM_PARTITIONS"), "{e}");
}

#[test]
fn topic_overrides_win() {
    let c = BrokerConfig::default();
    let mut o = BTreeMap::new();
    o.insert("retention.ms".to_string(), "1000".to_string());
    assert_eq!(c.log_config(&o).retention_ms, Some(1000));
}

/// DescribeConfigs v3+ reports each config's type; a name without one would be reported
/// UNKNOWN, which kafka-python's own admin tests reject (they expect Kafka's types, e.g.
/// `retention.bytes` LONG). Every name weir describes has one, and weir's own value checks
/// agree with it.
#[test]
fn every_described_config_has_a_type() {
    for s in SETTINGS {
        assert_ne!(config_type(s.name), ConfigType::Unknown, "{}", s.name);
        if s.unit == "bool" {
            assert_eq!(config_type(s.name), ConfigType::Boolean, "{}", s.name);
        }
    }
    for (k, _) in TOPIC_CONFIGS {
        assert_ne!(config_type(k), ConfigType::Unknown, "{k}");
    }
    for (k, kind) in IGNORED_TOPIC_CONFIGS {
        let t = config_type(k);
        let agrees = match kind {
            Kind::Long(_) => matches!(t, ConfigType::Long | ConfigType::Int),
            Kind::Bool => t == ConfigType::Boolean,
            Kind::Ratio => t == ConfigType::Double,
            Kind::Replicas => t == ConfigType::List,
            Kind::OneOf(_) => matches!(t, ConfigType::String | ConfigType::Boolean),
            Kind::Version => t == ConfigType::String,
        };
        assert!(agrees, "{k}: {kind:?} but {t:?}");
    }
    assert_eq!(config_type("no.such.config"), ConfigType::Unknown);
}

#[test]
fn local_retention_defaults_to_the_whole_logs() {
    let mut c = BrokerConfig::default();
    c.set("log.retention.bytes", "1000000").unwrap();
    let overrides = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let l = c.log_config(&overrides(&[("remote.storage.enable", "true")]));
    assert!(l.remote_storage);
    assert_eq!(
        (l.local_retention_ms, l.local_retention_bytes),
        (l.retention_ms, Some(1_000_000))
    );
    // -2 follows retention.* whatever order the overrides come in; -1 is no limit.
    let l = c.log_config(&overrides(&[
        ("local.retention.bytes", "-2"),
        ("local.retention.ms", "-1"),
        ("retention.bytes", "5000"),
    ]));
    assert_eq!(
        (l.local_retention_ms, l.local_retention_bytes),
        (None, Some(5000))
    );
    let l = c.log_config(&overrides(&[("local.retention.ms", "60000")]));
    assert_eq!(l.local_retention_ms, Some(60_000));
    assert!(!l.remote_storage);
}
