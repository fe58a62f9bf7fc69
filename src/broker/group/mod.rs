//! Consumer groups: the classic group membership protocol (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup) with client-side assignment, and durable committed offsets.
//!
//! Each group lives on one core, chosen by hashing its id into one of [`offsets::BUCKETS`]
//! buckets (Kafka's `__consumer_offsets` partitions); a bucket's groups and its offsets log
//! live on the core that owns the bucket.

mod admin;
mod commits;
pub mod consumer;
pub mod coordinator;
mod migrate;
#[cfg(test)]
mod migrate_tests;
pub mod offsets;
mod persist;
mod routing;
pub mod service;
mod state;
mod takeover;
#[cfg(test)]
mod takeover_tests;
#[cfg(test)]
mod tests;

pub use coordinator::{Coordinator, GroupConfig};
