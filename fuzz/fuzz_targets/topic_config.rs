//! The config path a client drives: CreateTopics / AlterConfigs / IncrementalAlterConfigs
//! hand arbitrary (key, value) strings to `config::apply_topic_config`, and operators hand
//! them to `BrokerConfig::set` (file, flags, environment). Neither may panic, and whatever
//! they accept must fit the engine: segment sizes the 32-bit index positions address, batch
//! limits within the engine's hard limit, time and size limits that cannot overflow i64
//! arithmetic. Input: `key=value` lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::config::{apply_topic_config, BrokerConfig};
use weir_storage::LogConfig;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut topic = LogConfig::default();
    let mut broker = BrokerConfig::default();
    for line in text.lines() {
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        let _ = apply_topic_config(&mut topic, k, v);
        let _ = broker.set(k, v);
    }
    for c in [&topic, &broker.log_config(&Default::default())] {
        assert!((4096..=weir_storage::config::SEGMENT_BYTES_MAX).contains(&c.segment_bytes));
        assert!(c.max_batch_bytes <= weir_storage::batch::MAX_BATCH_BYTES);
        for ms in [c.segment_ms, c.retention_ms, c.retention_bytes].into_iter().flatten() {
            assert!(ms <= i64::MAX as u64);
        }
    }
    assert!(broker.socket_request_max_bytes <= i32::MAX as usize);
    assert!(broker.fetch_max_wait_ms <= i32::MAX as u64);
});
