//! The command-line tools other than `weir serve`, all built on the native client: the admin
//! commands (`weir topic`, `weir group`) and the benchmark harness (`weir bench`).

mod admin;
pub mod bench;

pub use admin::{group, topic, GroupArgs, TopicArgs};
