//! `weir-storage`: weir's embeddable log storage engine.
//!
//! A [`Log`] is one partition: an ordered sequence of Kafka record batches (v2, magic 2),
//! stored verbatim in append-only segment files written with direct I/O through glommio.
//! A `Log` lives on one glommio executor (it is `!Send`); a program that wants several cores
//! opens different logs on different executors.
//!
//! ```no_run
//! use weir_storage::{Log, LogConfig, batch::RecordBatchBuilder};
//! glommio::LocalExecutorBuilder::default().spawn(|| async move {
//!     weir_storage::io::prime_dma_probe(std::path::Path::new("/var/lib/app")).await.unwrap();
//!     let log = Log::open("/var/lib/app/orders-0", LogConfig::default()).await.unwrap();
//!     let batch = RecordBatchBuilder::new(0).record(None, Some(b"hello"), &[]).build();
//!     let appended = log.append(batch).await.unwrap();   // survives kill -9 now
//!     log.flush().await.unwrap();                          // survives power loss now
//!     let read = log.read(appended.base_offset, 1 << 20).await.unwrap();
//!     assert_eq!(read.batches().count(), 1);
//!     log.close().await.unwrap();
//! }).unwrap().join().unwrap();
//! ```
//!
//! Durability: when [`Log::append`] returns, the batch has been written to the segment file
//! with direct I/O (it survives a crash of the process); when [`Log::flush`] returns, it has
//! been `fdatasync`ed (it survives power loss). See `DESIGN.md` for the on-disk format and
//! the crash cases.
#![deny(clippy::unwrap_used)]

pub mod batch;
pub mod cache;
pub mod config;
pub mod error;
pub mod io;
pub mod log;
pub mod offset_index;
pub mod time_index;
pub mod watermark;

mod appender;
mod producer_state;
mod reader;
mod recovery;
mod segment;

pub use crate::cache::{BatchCache, CacheStats, DEFAULT_READ_CACHE_BYTES};
pub use crate::config::LogConfig;
pub use crate::error::{Error, Result};
pub use crate::log::{AppendInfo, FlushStats, Log, ReadOutcome, FLUSH_BUCKETS};
pub use crate::watermark::{FifoGuard, FifoLock, FifoWait, Watermarks};
