//! Wire formats shared by the broker, the native client and the fuzz targets: Kafka request
//! framing and decoding (`wire`), weir's streaming-fetch extension (`stream_fetch`), and the
//! frames brokers exchange on their peer port (`peer`).

pub mod peer;
pub mod stream_fetch;
pub mod wire;
