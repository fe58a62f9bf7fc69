//! `weir bench consume-disk`: write a data set, then read it from offset 0 (from disk).

use std::collections::HashMap;
use std::time::Duration;

use crate::client::{Cluster, ClusterConfig, TopicPartition};
use report::Latency;
use workload::ConsumeSpec;

use super::ctx::*;
use super::*;

pub(super) fn scenario_consume_disk(ctx: &mut Ctx) -> Result<(), String> {
    // `--raw-secs 0`: the caller measures the yardsticks (benches/vs_kafka.py).
    let sampled = ctx.args.raw_secs > 0.0;
    if sampled {
        ctx.raw_sample("before")?;
    }
    let linger = Duration::from_millis(ctx.args.linger_ms);
    let specs = (0..ctx.args.producers)
        .map(|_| ctx.produce_spec(None, false, linger))
        .collect();
    let w = ctx.run_phase(
        "write dataset",
        specs,
        Vec::new(),
        None,
        Some(ctx.args.dataset),
    )?;
    ctx.report
        .figure("weir produce (dataset write)", w.stats.mb_per_s(), "MB/s");
    if sampled {
        ctx.raw_sample("between")?;
    }
    if ctx.args.drop_caches {
        drop_page_cache()?;
    }
    let (bootstrap, topic, n) = (
        ctx.broker.bootstrap.clone(),
        ctx.topic.clone(),
        ctx.args.parts(),
    );
    let ends: HashMap<i32, i64> = executor("bench-ends", move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(bootstrap)).await?;
        let mut ends = HashMap::new();
        for p in 0..n {
            ends.insert(
                p,
                cluster
                    .list_offset(&TopicPartition::new(topic.clone(), p), -1)
                    .await?,
            );
        }
        Ok::<_, crate::client::Error>(ends)
    })
    .map_err(|e| format!("end offsets: {e}"))?;
    let consumers = split_partitions(ctx.args.parts(), ctx.args.consumers)
        .into_iter()
        .map(|parts| ConsumeSpec {
            bootstrap: ctx.broker.bootstrap.clone(),
            topic: ctx.topic.clone(),
            partitions: parts,
            from_end: false,
            until: Some(ends.clone()),
            stamped: false,
            max_wait: Duration::from_millis(500),
            streaming: ctx.args.fetch == FetchMode::Stream,
            warmup: false,
        })
        .collect();
    let cpu_before = ctx.broker.pid.and_then(broker::cpu_seconds);
    let r = ctx.run_phase(
        "catch-up read",
        Vec::new(),
        consumers,
        None,
        Some(w.stats.bytes),
    )?;
    let cpu_after = ctx.broker.pid.and_then(broker::cpu_seconds);
    if sampled {
        ctx.raw_sample("after")?;
    }
    let raw = ctx.report.raw_means();
    let rep = &mut ctx.report;
    let mbps = r.consumed.mb_per_s();
    rep.figure("dataset written", w.stats.bytes as f64 / 1e6, "MB");
    rep.figure("dataset read", r.consumed.bytes as f64 / 1e6, "MB");
    rep.figure("weir catch-up read", mbps, "MB/s");
    rep.figure(
        "weir catch-up read",
        r.consumed.records_per_s(),
        "records/s",
    );
    if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
        if r.consumed.bytes > 0 {
            rep.figure(
                "broker CPU per GB read",
                (b - a) / (r.consumed.bytes as f64 / 1e9),
                "s/GB",
            );
        }
    }
    rep.latencies.push(Latency {
        name: format!("produce latency (acks={})", ctx.args.acks),
        hist: w.produce_latency,
    });
    if !sampled {
        return Ok(());
    }
    rep.figure(
        "weir read / raw disk read",
        mbps / (raw.disk_read_bps / 1e6),
        "x",
    );
    rep.figure("weir read / loopback TCP", mbps / (raw.tcp_bps / 1e6), "x");
    let ratio = mbps / (raw.disk_read_bps.min(raw.tcp_bps) / 1e6);
    rep.goal(
        "catch-up read / min(raw read, TCP)",
        ratio,
        ">= 0.8",
        ratio >= 0.8,
    );
    let wr = w.stats.mb_per_s() / (raw.disk_write_bps.min(raw.tcp_bps) / 1e6);
    rep.figure("dataset write / min(raw write, TCP)", wr, "x");
    Ok(())
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`: written-back pages first, since only clean
/// pages can be dropped.
fn drop_page_cache() -> Result<(), String> {
    progress("[drop caches] sync; echo 3 > /proc/sys/vm/drop_caches");
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("--drop-caches: /proc/sys/vm/drop_caches: {e} (needs root)"))?;
    progress_done();
    Ok(())
}
