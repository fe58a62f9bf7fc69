//! weir as a library: the native Kafka-protocol client (`client`), the command-line tools
//! that use it (`cli`: `weir topic`, `weir group`, `weir user`, `weir acl`, `weir bench`),
//! the wire formats (`protocol`), SASL's mechanisms (`sasl`), Kafka's ACL model (`acl`), and
//! the broker's settings and metadata file (`config`, `metadata`), which the fuzz targets
//! drive. The broker itself (`weir serve`) is the binary's `broker` module.

pub mod acl;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod metadata;
pub mod protocol;
pub mod sasl;
