//! `weir bench idle-polls`: the CPU cost of many parked fetches on an idle broker.

use std::time::Duration;

use report::Latency;

use super::ctx::*;
use super::*;

pub(super) fn scenario_idle(ctx: &mut Ctx) -> Result<(), String> {
    ctx.raw_sample("before")?;
    // One fd per fetcher (see idle.rs): stay under the fd limit.
    let fd_cap = fd_limit().saturating_sub(512).max(1);
    let fetchers = if ctx.args.fetchers > fd_cap {
        eprintln!(
            "[idle-polls] {} fetchers need ~{} fds; the limit allows {fd_cap}: using {fd_cap}",
            ctx.args.fetchers, ctx.args.fetchers
        );
        fd_cap
    } else {
        ctx.args.fetchers
    };
    let spec = idle::IdleSpec {
        bootstrap: ctx.broker.bootstrap.clone(),
        topic: ctx.topic.clone(),
        partitions: ctx.args.parts(),
        fetchers,
        idle: Duration::from_secs(ctx.args.idle_secs),
        rounds: ctx.args.wake_rounds,
        broker_pid: ctx.broker.pid,
    };
    let (res, hist) = spawn_executor("bench-idle", 1 << 20, move || async move {
        let r = idle::run(spec, |l| progress(&format!("[idle-polls] {l}"))).await;
        progress_done();
        r
    })
    .join()
    .map_err(|e| format!("idle executor: {e}"))??;
    ctx.raw_sample("after")?;
    let rep = &mut ctx.report;
    rep.figure("parked fetches", res.parked as f64, "fetches");
    if let Some(c) = res.broker_cpu_core_fraction {
        rep.figure("broker CPU while parked", c * 100.0, "% of a core");
        rep.goal("idle broker CPU (% of a core)", c * 100.0, "< 2", c < 0.02);
    }
    if let Some(r) = res.broker_rss_parked_bytes {
        rep.figure("broker RSS while parked", r as f64 / 1e6, "MB");
    }
    if let Some(r) = res.broker_rss_before_bytes {
        rep.figure("broker RSS before", r as f64 / 1e6, "MB");
    }
    rep.figure("wake-ups timed", res.wakeups as f64, "responses");
    rep.figure(
        "waking produce acked (acks=1) p50",
        res.produce_ack_p50_us as f64,
        "us",
    );
    rep.figure(
        "waking produce acked (acks=1) p99",
        res.produce_ack_p99_us as f64,
        "us",
    );
    rep.figure(
        "wake-ups missing (> 5 s)",
        res.wakeup_timeouts as f64,
        "responses",
    );
    let p99 = hist.value_at_percentile(99.0) as f64;
    rep.goal(
        "wake-up p99 (us)",
        p99,
        "< 1000",
        p99 < 1000.0 && res.wakeups > 0,
    );
    rep.extra = serde_json::to_value(&res).unwrap_or_default();
    rep.latencies.push(Latency {
        name: "wake-up latency (produce sent -> parked fetch answered)".to_string(),
        hist,
    });
    Ok(())
}
