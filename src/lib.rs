//! weir as a library: the native Kafka-protocol client, the `weir bench` harness, and the
//! broker's pure decoders (requests, the metadata file), which the fuzz targets drive.

pub mod admin;
pub mod bench;
pub mod client;
pub mod config;
pub mod metadata;
pub mod stream_fetch;
pub mod wire;
