//! Embedding weir's storage engine: open a log, append, wait for new data, read, reopen.
//!
//! Run with `cargo run -p weir-storage --example embed -- /path/on/ext4`.

use std::rc::Rc;

use weir_storage::batch::{decode_records, RecordBatchBuilder};
use weir_storage::{Log, LogConfig};

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/embed-example".to_owned());
    let dir = std::path::PathBuf::from(dir);
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            let log = Rc::new(Log::open(dir.join("orders-0"), LogConfig::default()).await?);
            let start = log.watermarks().log_end_offset;

            // A reader that waits for data at the log end, as a tailing consumer would.
            let reader = {
                let log = log.clone();
                glommio::spawn_local(async move {
                    log.wait_for_data(start).await?;
                    let read = log.read(start, 1 << 20).await?;
                    let mut values = Vec::new();
                    for (_, batch) in read.batches() {
                        for r in decode_records(batch).unwrap_or_default() {
                            values.push(
                                String::from_utf8_lossy(&r.value.unwrap_or_default()).into_owned(),
                            );
                        }
                    }
                    Ok::<_, weir_storage::Error>(values)
                })
            };

            let now = 1_700_000_000_000;
            let batch = RecordBatchBuilder::new(now)
                .record(
                    Some(b"order-1"),
                    Some(b"2 apples"),
                    &[("source", b"example")],
                )
                .record(Some(b"order-2"), Some(b"1 pear"), &[])
                .build();
            let appended = log.append(batch).await?; // written: survives kill -9
            log.flush().await?; // fdatasync'ed: survives power loss
            println!(
                "appended offsets {}..={}",
                appended.base_offset, appended.last_offset
            );
            println!("reader saw {:?}", reader.await?);
            println!("watermarks {:?}", log.watermarks());

            Rc::try_unwrap(log)
                .map_err(|_| "log still shared")?
                .close()
                .await?;
            let reopened = Log::open(dir.join("orders-0"), LogConfig::default()).await?;
            println!(
                "after reopen the log ends at {}",
                reopened.watermarks().log_end_offset
            );
            reopened.close().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        })
        .map_err(|e| format!("spawn executor: {e}"))?
        .join()
        .map_err(|e| format!("executor: {e:?}"))?
}
