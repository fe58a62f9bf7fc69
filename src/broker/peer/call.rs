//! Requests one broker makes of another for a transaction (Kafka's inter-broker
//! `WriteTxnMarkers`, and the checks a partition leader and a group coordinator need from a
//! transaction coordinator on another broker): their wire form is `weir::protocol::peer`'s
//! (frame kinds 5 and 6); the receiving core 0 hands each to the core that serves it
//! (`Shard::serve_peer_call`) and sends the answer back.

pub use weir::protocol::peer::{AnswerFrame, CallFrame, PeerAnswer, PeerCall, QuorumStatus};
