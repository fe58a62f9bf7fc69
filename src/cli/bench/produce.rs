//! `weir bench produce`: producers at full speed (or a fixed rate), acks as asked.

use std::time::Duration;

use report::Latency;

use super::ctx::*;
use super::*;

pub(super) fn scenario_produce(ctx: &mut Ctx) -> Result<(), String> {
    // `--raw-secs 0`: the caller measures the yardsticks (benches/replication.py).
    let sampled = ctx.args.raw_secs > 0.0;
    if sampled {
        ctx.raw_sample("before")?;
    }
    let linger = Duration::from_millis(ctx.args.linger_ms);
    // --rate: a fixed offered rate (all producers together), for send->ack latency at a
    // load the machine can carry; without it, as fast as the producers can.
    let rate = ctx.args.rate.map(|r| r / ctx.args.producers.max(1) as f64);
    if let Some(r) = ctx.args.rate {
        ctx.report.figure("offered rate", r, "records/s");
    }
    let specs = (0..ctx.args.producers)
        .map(|_| ctx.produce_spec(rate, false, linger))
        .collect();
    let d = Duration::from_secs(ctx.args.duration);
    let cpu_before = ctx.broker.pid.and_then(broker::cpu_seconds);
    let r = ctx.run_phase("produce", specs, Vec::new(), Some(d), None)?;
    let cpu_after = ctx.broker.pid.and_then(broker::cpu_seconds);
    if sampled {
        ctx.raw_sample("after")?;
    }
    let raw = ctx.report.raw_means();
    let rep = &mut ctx.report;
    rep.figure("weir produce", r.stats.mb_per_s(), "MB/s");
    rep.figure("weir produce", r.stats.records_per_s(), "records/s");
    // Counts, for callers that check them against the partitions' high watermarks.
    rep.figure("records acknowledged", r.stats.records as f64, "records");
    rep.figure("produce errors", r.stats.errors as f64, "records");
    // The broker's own cost, whatever the client's speed: CPU seconds (user + system, all
    // its cores) per GB of records produced. What the produce path's copies show in.
    if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
        if r.stats.bytes > 0 {
            rep.figure(
                "broker CPU per GB produced",
                (b - a) / (r.stats.bytes as f64 / 1e9),
                "s/GB",
            );
        }
    }
    rep.latencies.push(Latency {
        name: format!("produce latency (acks={})", ctx.args.acks),
        hist: r.produce_latency,
    });
    if !sampled {
        return Ok(());
    }
    let yard = raw.disk_write_bps.min(raw.tcp_bps) / 1e6;
    let ratio = r.stats.mb_per_s() / yard;
    rep.figure(
        "weir / raw disk write",
        r.stats.mb_per_s() / (raw.disk_write_bps / 1e6),
        "x",
    );
    rep.figure(
        "weir / loopback TCP",
        r.stats.mb_per_s() / (raw.tcp_bps / 1e6),
        "x",
    );
    rep.goal(
        "produce / min(raw write, TCP)",
        ratio,
        ">= 0.8",
        ratio >= 0.8,
    );
    Ok(())
}
