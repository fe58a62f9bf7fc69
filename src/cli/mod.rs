//! The command-line tools other than `weir serve`, all built on the native client: the admin
//! commands (`weir topic`, `weir group`, `weir user`, `weir acl`, `weir cluster`, sharing `admin`) and the benchmark harness
//! (`weir bench`).

mod acl;
mod admin;
pub mod bench;
mod cluster;
mod group;
mod topic;
mod user;

pub use acl::{acl, AclArgs, AclCommand};
pub use admin::Common;
pub use cluster::{cluster, ClusterArgs, ClusterCommand};
pub use group::{group, GroupArgs, GroupCommand};
pub use topic::{topic, TopicArgs, TopicCommand};
pub use user::{user, UserArgs, UserCommand};
