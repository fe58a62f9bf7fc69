//! Wire formats shared by the broker, the native client and the fuzz targets: Kafka request
//! framing and decoding (`wire`) and weir's streaming-fetch extension (`stream_fetch`).

pub mod stream_fetch;
pub mod wire;
