//! weir as a library: the native Kafka-protocol client and the `weir bench` harness.

pub mod bench;
pub mod client;
pub mod wire;
