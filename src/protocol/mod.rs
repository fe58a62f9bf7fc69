//! Wire formats shared by the broker, the native client and the fuzz targets: Kafka request
//! framing and decoding (`wire`), weir's streaming-fetch extension (`stream_fetch`), the
//! frames brokers exchange on their peer port (`peer`), and the consumer protocol classic
//! group members embed in JoinGroup/SyncGroup (`consumer_protocol`).

pub mod consumer_protocol;
pub mod peer;
pub mod stream_fetch;
pub mod wire;
