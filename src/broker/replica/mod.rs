//! A partition replicated across brokers (docs/replication.md §3, step 3): the pieces each
//! replica's Raft group is built from — the per-partition Raft state file (`state`), the side
//! log of Raft-only entries (`side`), the Raft log as raft-rs sees it, rebuilt from the
//! segment files and the side log (`store`), the frames that carry a partition group's
//! messages between brokers (`frame`), and the snapshot a follower behind its leader's log
//! start installs (`snapshot`), the entry that moves every replica's log start
//! (`log_start`, DeleteRecords) and the one that lists an uploaded segment in every replica's
//! remote tier (`remote`, tiered storage).
//!
//! What is built and what is not: docs/replication.md, "Step 3 as built".

pub mod frame;
pub mod log_start;
pub mod remote;
pub mod side;
pub mod snapshot;
pub mod state;
pub mod storage;
pub mod store;
