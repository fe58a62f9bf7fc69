//! A partition group's Raft message between brokers: its wire form is
//! `weir::protocol::peer::PartitionMessage` (frame kind 4).

pub use weir::protocol::peer::PartitionMessage;
