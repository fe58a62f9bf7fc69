//! `weir-storage`: weir's embeddable log storage engine.
//!
//! A [`Log`] is one partition: an ordered sequence of Kafka record batches (v2, magic 2),
//! stored verbatim in append-only segment files written with direct I/O through glommio.
//! A `Log` lives on one glommio executor (it is `!Send`); a program that wants several cores
//! opens different logs on different executors.
//!
//! ```no_run
//! use weir_storage::batch::{decode_records, RecordBatchBuilder};
//! use weir_storage::{Log, LogConfig};
//!
//! glommio::LocalExecutorBuilder::default()
//!     .spawn(|| async move {
//!         let log = Log::open("/var/lib/app/orders-0", LogConfig::default()).await?;
//!         let batch = RecordBatchBuilder::new(1_700_000_000_000)
//!             .record(Some(b"order-1"), Some(b"2 apples"), &[])
//!             .build();
//!         let appended = log.append(batch).await?; // written: survives kill -9
//!         log.flush().await?; // fdatasync'ed: survives power loss
//!         let read = log.read(appended.base_offset, 1 << 20).await?;
//!         for (_, batch) in read.batches() {
//!             for record in decode_records(batch).unwrap_or_default() {
//!                 println!("{} {:?}", record.offset, record.value);
//!             }
//!         }
//!         log.close().await
//!     })
//!     .expect("spawn executor")
//!     .join()
//!     .expect("executor thread")
//!     .expect("log operations");
//! ```
//!
//! Durability: when [`Log::append`] returns, the batch has been written to the segment file
//! with direct I/O (it survives a crash of the process); when [`Log::flush`] returns, it has
//! been `fdatasync`ed (it survives power loss). Recovery after a crash checks every batch's
//! CRC and cuts a corrupt or torn tail; corrupt bytes are never served. `DESIGN.md` has the
//! on-disk format and the crash cases; `README.md` the guarantees in short.
//!
//! The modules: [`batch`] builds and parses record batches; [`config`] holds [`LogConfig`];
//! [`cache`] the per-core [`BatchCache`]; [`error`] the [`Error`] type; [`log`] the [`Log`];
//! [`watermark`] its [`Watermarks`]; [`offset_index`] and [`time_index`] the index file
//! formats; [`io`] the file layer's public helpers (and, with the `sim` feature, the
//! simulated disk the crash tests run on).
//!
//! Cargo features: `sim` (off by default) makes the simulated disk public — `io::SimDisk`,
//! `io::Vfs` and `Log::open_in` — for tests and fuzzing; a program storing real data does
//! not need it.
#![deny(clippy::unwrap_used)]
#![warn(missing_docs)]

pub mod batch;
pub mod cache;
pub mod config;
pub mod error;
pub mod io;
pub mod log;
pub mod offset_index;
pub mod tier;
pub mod time_index;
pub mod watermark;

mod appender;
mod producer_state;
mod read_budget;
mod reader;
mod recovery;
mod segment;

pub use crate::cache::{BatchCache, CacheStats, DEFAULT_READ_CACHE_BYTES};
pub use crate::config::LogConfig;
pub use crate::error::{Error, Result};
pub use crate::log::{AbortedTxn, AppendInfo, FlushStats, Log, ReadOutcome, FLUSH_BUCKETS};
pub use crate::watermark::Watermarks;

/// Compiles the code in `README.md` (its example is the one above).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
