//! The command-line tools other than `weir serve`, all built on the native client: the admin
//! commands (`weir topic`, `weir group`, sharing `admin`) and the benchmark harness
//! (`weir bench`).

mod admin;
pub mod bench;
mod group;
mod topic;

pub use admin::Common;
pub use group::{group, GroupArgs, GroupCommand};
pub use topic::{topic, TopicArgs, TopicCommand};
