//! `--client rdkafka` in a build without the `rdkafka` feature: every call explains why it
//! cannot run.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};
use std::sync::Arc;

use hdrhistogram::Histogram;

use super::workload::{ConsumeSpec, Counters, ProduceSpec};

const OFF: &str = "weir was built without the `rdkafka` feature: --client rdkafka is not available";

/// Parses `--rd-set key=value` flags (refused: there is no librdkafka to give them to).
pub fn parse_props(props: &[String]) -> Result<Vec<(String, String)>, String> {
    if props.is_empty() {
        Ok(Vec::new())
    } else {
        Err(OFF.to_string())
    }
}

pub fn produce(
    _spec: ProduceSpec,
    _props: &[(String, String)],
    _counters: Arc<Counters>,
    _stop: Arc<AtomicBool>,
    _budget: Option<Arc<AtomicI64>>,
) -> Result<Histogram<u64>, String> {
    Err(OFF.to_string())
}

pub fn consume(
    _spec: ConsumeSpec,
    _props: &[(String, String)],
    _counters: Arc<Counters>,
    _stop: Arc<AtomicBool>,
    _ready: Arc<AtomicU64>,
) -> Result<Histogram<u64>, String> {
    Err(OFF.to_string())
}
