//! raft-rs logs through `slog`; this drain hands its records to `tracing` (target
//! `weir::raft`), the broker's one logger, with the record's key-values appended.

use std::fmt::Write;

use slog::{Drain, Key, Level, OwnedKVList, Record, Serializer, KV};

struct ToTracing;

struct Pairs(String);

impl Serializer for Pairs {
    fn emit_arguments(&mut self, key: Key, val: &std::fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for ToTracing {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut kv = Pairs(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            Level::Critical | Level::Error => {
                tracing::error!(target: "weir::raft", "{msg}{}", kv.0)
            }
            Level::Warning => tracing::warn!(target: "weir::raft", "{msg}{}", kv.0),
            Level::Info => tracing::info!(target: "weir::raft", "{msg}{}", kv.0),
            Level::Debug => tracing::debug!(target: "weir::raft", "{msg}{}", kv.0),
            Level::Trace => tracing::trace!(target: "weir::raft", "{msg}{}", kv.0),
        }
        Ok(())
    }
}

/// The logger given to raft-rs.
pub fn logger() -> slog::Logger {
    slog::Logger::root(ToTracing.fuse(), slog::o!())
}
