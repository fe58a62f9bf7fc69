//! What the broker's Raft groups share, the metadata group (`broker::controller`) and the
//! partition groups (`broker::replica`) alike: raft-rs's logger bridged into tracing (`log`),
//! how a replica on a replaced disk rejoins (`rejoin`), and whom a stopping leader hands its
//! group to (`handover`).

pub mod handover;
mod log;
pub mod rejoin;

pub use handover::{successor, Handover};

/// The raft-rs logger every Raft group of this broker uses (records go to tracing).
pub fn raft_logger() -> slog::Logger {
    log::logger()
}
