//! weir as a library: the native Kafka-protocol client (`client`), the command-line tools
//! that use it (`cli`: `weir topic`, `weir group`, `weir bench`), the wire formats
//! (`protocol`), and the broker's settings and metadata file (`config`, `metadata`), which
//! the fuzz targets drive. The broker itself (`weir serve`) is the binary's `broker` module.

pub mod cli;
pub mod client;
pub mod config;
pub mod metadata;
pub mod protocol;
