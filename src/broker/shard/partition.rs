//! A partition on its owner core: its log and, on a cluster, its replica. Every write to a
//! partition — a producer's batch, a transaction marker, a log start move (DeleteRecords),
//! retention and tiering — goes through here, the one place that knows whether the partition
//! is replicated (written through its Raft group, docs/replication.md §3.4) or not (written
//! straight to its log).
//!
//! A replicated partition's replica holds its partition (`Replica::part`) and the partition
//! holds its replica: the cycle is broken when the replica is closed (`Shard::close_replica`,
//! at retirement and at shutdown). Between opening the log and opening the replica (a broker
//! starting up) a replicated partition takes no write: each is answered
//! NOT_LEADER_OR_FOLLOWER, and the client asks again.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;
use tracing::{debug, info, warn};
use weir_storage::batch::Origin;
use weir_storage::Log;

use super::Waiters;
use crate::broker::errors::{self, storage_error_code};
use crate::broker::replica::{Host, OwnsLog, Replica};

pub struct Partition {
    pub topic: String,
    pub partition: i32,
    pub topic_id: String,
    pub log: Log,
    /// A cluster's partition: every write goes through its Raft group.
    replicated: bool,
    /// Its replica, from `ReplicaHost::open` to `Shard::close_replica`.
    replica: RefCell<Option<Rc<Replica>>>,
    pub(super) waiters: Waiters,
    /// Disk errors seen on this partition: the first is logged as a warning, the rest at
    /// debug level (a dead disk under a busy partition must not flood the log).
    io_errors: Cell<u64>,
    /// For the metrics: batch bytes and records appended, batch bytes fetched.
    pub(super) bytes_in: Cell<u64>,
    pub(super) records_in: Cell<u64>,
    pub(super) bytes_out: Cell<u64>,
}

impl OwnsLog for Partition {
    fn log(&self) -> &Log {
        &self.log
    }
}

/// A producer's batch written.
pub(super) struct Appended {
    pub base_offset: u64,
    pub log_start_offset: u64,
    /// The time the broker stamped on the batch (a LogAppendTime topic), else -1.
    pub log_append_time_ms: i64,
}

/// Why a producer's batch was not written.
pub(super) enum Refused {
    /// Kafka's log validator refused it: answered with its record errors.
    Invalid(weir_storage::Error),
    /// This replica does not lead: the leader and term it knows, for the client's hint.
    NotLeader(Option<(u64, u64)>),
    Code(i16),
}

impl Partition {
    pub(super) fn new(
        topic: &str,
        partition: i32,
        topic_id: &str,
        log: Log,
        replicated: bool,
        waiters: Waiters,
    ) -> Partition {
        Partition {
            topic: topic.to_string(),
            partition,
            topic_id: topic_id.to_string(),
            log,
            replicated,
            replica: RefCell::new(None),
            waiters,
            io_errors: Cell::new(0),
            bytes_in: Cell::new(0),
            records_in: Cell::new(0),
            bytes_out: Cell::new(0),
        }
    }

    /// Its replica, while open.
    pub fn replica(&self) -> Option<Rc<Replica>> {
        self.replica.borrow().clone()
    }

    pub(super) fn set_replica(&self, r: Rc<Replica>) {
        *self.replica.borrow_mut() = Some(r);
    }

    /// Takes its replica away (closing it): breaks the partition ⇄ replica cycle.
    pub(super) fn take_replica(&self) -> Option<Rc<Replica>> {
        self.replica.borrow_mut().take()
    }

    /// Whether this core may answer for the partition from its own log: a replicated
    /// partition only while its replica here leads. A restarting broker opens a partition's
    /// log before its replica, and replays old leadership records before the replica hears
    /// from the leader elected meanwhile; answered from the log then, a Fetch would get
    /// OFFSET_OUT_OF_RANGE and a Produce would be written outside Raft.
    pub(super) fn leads(&self) -> bool {
        match self.replica() {
            Some(r) => r.is_leader(),
            None => !self.replicated,
        }
    }

    /// A producer's batch, checked as Kafka's log validator does and written: proposed
    /// through the replica (answered once written there, acks=1, or committed, acks=all), or
    /// appended to the log (`Log::append_produced`: the check and the append in one pass) and
    /// flushed for acks=all. An idempotent producer's retry is answered with its original
    /// offsets. Whatever yields, this call takes its place in line in its first poll: a
    /// connection's pipelined requests are written in the order they came.
    pub(super) async fn produce(
        &self,
        host: &dyn Host,
        acks: i16,
        records: Bytes,
    ) -> Result<Appended, Refused> {
        let bytes = records.len() as u64;
        if let Some(r) = self.replica() {
            let turn = r.check_order.lock().await;
            let valid = self
                .log
                .validate(records, Origin::Client)
                .await
                .map_err(Refused::Invalid)?;
            let stamped = valid.log_append_time_ms();
            return match r.produce(host, acks, valid, turn).await {
                Ok((base, last)) => {
                    self.count_in(bytes, last - base + 1);
                    Ok(Appended {
                        base_offset: base,
                        log_start_offset: self.log.watermarks().log_start_offset,
                        log_append_time_ms: stamped,
                    })
                }
                Err(code) if code == errors::NOT_LEADER_OR_FOLLOWER => {
                    Err(Refused::NotLeader(Some((r.leader.get(), r.term()))))
                }
                Err(code) => Err(Refused::Code(code)),
            };
        }
        if self.replicated {
            // Its replica is not open (yet: a broker starting up).
            return Err(Refused::NotLeader(None));
        }
        let info = match self.log.append_produced(records).await {
            Ok(info) => info,
            Err(e) if e.is_storage_error() => return Err(self.io_failed("append", &e)),
            Err(e) => return Err(Refused::Invalid(e)),
        };
        if info.duplicate {
            debug!(topic = %self.topic, partition = self.partition, base_offset = info.base_offset,
                "duplicate batch not written again");
        } else {
            self.count_in(bytes, info.last_offset - info.base_offset + 1);
        }
        if acks == -1 {
            if let Err(e) = self.log.flush().await {
                return Err(self.io_failed("flush", &e));
            }
        }
        Ok(Appended {
            base_offset: info.base_offset,
            log_start_offset: info.log_start_offset,
            log_append_time_ms: info.log_append_time_ms,
        })
    }

    /// A transaction marker (a control batch), written durably: committed through the
    /// replica, or appended and flushed. NONE or the error code.
    pub(super) async fn write_marker(&self, host: &dyn Host, batch: Bytes) -> i16 {
        if let Some(r) = self.replica() {
            return match r.produce_checked(host, -1, batch, Origin::Internal).await {
                Ok(_) => errors::NONE,
                Err(code) => code,
            };
        }
        if self.replicated {
            return errors::NOT_LEADER_OR_FOLLOWER;
        }
        let written = async {
            self.log.append(batch).await?;
            self.log.flush().await
        }
        .await;
        match written {
            Ok(_) => errors::NONE,
            Err(e) => {
                warn!(topic = %self.topic, partition = self.partition, error = %e, "transaction marker not written");
                storage_error_code(&e)
            }
        }
    }

    /// DeleteRecords: moves the log start (durably; on a replicated partition as a committed
    /// Raft entry every replica carries out, `Replica::delete_records`) and deletes the
    /// segments wholly below it. `offset` -1: the high watermark; past it,
    /// OFFSET_OUT_OF_RANGE. The error code and the log start after it.
    pub(super) async fn delete_records(&self, host: &dyn Host, offset: i64) -> (i16, i64) {
        if let Some(r) = self.replica() {
            return r.delete_records(host, offset).await;
        }
        if self.replicated {
            return (errors::NOT_LEADER_OR_FOLLOWER, -1);
        }
        let wm = self.log.watermarks();
        let target = match offset {
            -1 => wm.high_watermark,
            o if o < 0 => return (errors::OFFSET_OUT_OF_RANGE, wm.log_start_offset as i64),
            o => o as u64,
        };
        match self.log.set_log_start_offset(target).await {
            Ok(()) => {
                info!(topic = %self.topic, partition = self.partition, offset = target, "records deleted");
                (errors::NONE, self.log.watermarks().log_start_offset as i64)
            }
            Err(e) => (storage_error_code(&e), wm.log_start_offset as i64),
        }
    }

    /// Retention (`log.retention.*`) at `now_ms`: on a replicated partition its replica's
    /// driver does it, between `Ready`s (the Raft snapshot point moves first).
    pub(super) async fn retention(&self, host: &dyn Host, now_ms: i64) {
        if let Some(r) = self.replica() {
            r.retention_due.set(Some(now_ms));
            host.wake_driver();
            return;
        }
        if self.replicated {
            return;
        }
        match self.log.enforce_retention(now_ms).await {
            Ok(0) => {}
            Ok(n) => {
                info!(topic = %self.topic, partition = self.partition, segments = n, "retention deleted segments")
            }
            Err(e) => {
                warn!(topic = %self.topic, partition = self.partition, error = %e, "retention failed")
            }
        }
    }

    /// One tiering pass at `now_ms`: uploads closed segments, then local retention. On a
    /// replicated partition only its leader uploads, and every replica lists each upload as a
    /// committed entry (`Replica::tier`).
    pub(super) async fn tier(&self, host: &dyn Host, now_ms: i64) {
        if let Some(r) = self.replica() {
            return r.tier(host, now_ms).await;
        }
        if self.replicated {
            return;
        }
        match self.log.tier_tick(now_ms).await {
            Ok(0) => {}
            Ok(n) => {
                debug!(topic = %self.topic, partition = self.partition, segments = n, "segments uploaded")
            }
            Err(e) => {
                warn!(topic = %self.topic, partition = self.partition, error = %e, "tiering failed; will retry")
            }
        }
        if let Err(e) = self.log.enforce_retention(now_ms).await {
            warn!(topic = %self.topic, partition = self.partition, error = %e, "retention failed");
        }
    }

    fn count_in(&self, bytes: u64, records: u64) {
        self.bytes_in.set(self.bytes_in.get() + bytes);
        self.records_in.set(self.records_in.get() + records);
    }

    /// A disk error on a write: logged (`log_io_error`), answered with its code.
    fn io_failed(&self, op: &str, e: &weir_storage::Error) -> Refused {
        self.log_io_error(op, e);
        Refused::Code(storage_error_code(e))
    }

    /// Logs a disk error of this partition: once at warn level, then at debug level.
    pub(super) fn log_io_error(&self, op: &str, e: &weir_storage::Error) {
        let n = self.io_errors.get() + 1;
        self.io_errors.set(n);
        if n == 1 {
            warn!(topic = %self.topic, partition = self.partition, op, error = %e,
                "disk error on this partition; its requests get KAFKA_STORAGE_ERROR (further errors at debug level)");
        } else {
            debug!(topic = %self.topic, partition = self.partition, op, error = %e, errors = n, "disk error");
        }
    }
}
