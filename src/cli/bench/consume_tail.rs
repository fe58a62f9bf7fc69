//! `weir bench consume-tail`: consumers reading what producers write, end-to-end latency.

use std::time::Duration;

use report::Latency;
use workload::ConsumeSpec;

use super::ctx::*;
use super::*;

/// How much longer a librdkafka tail runs for its untimed start (`ConsumeSpec::warmup`).
const RDKAFKA_WARMUP: Duration = Duration::from_secs(2);

pub(super) fn scenario_consume_tail(ctx: &mut Ctx) -> Result<(), String> {
    // `--raw-secs 0`: the caller measures the yardsticks (benches/vs_kafka.py).
    let sampled = ctx.args.raw_secs > 0.0;
    if sampled {
        ctx.raw_sample("before")?;
    }
    let rate = match ctx.args.rate {
        Some(r) => r,
        None => {
            let specs = (0..ctx.args.producers)
                .map(|_| ctx.produce_spec(None, false, Duration::from_millis(ctx.args.linger_ms)))
                .collect();
            let probe = ctx.run_phase(
                "max-rate probe",
                specs,
                Vec::new(),
                Some(Duration::from_secs(5)),
                None,
            )?;
            let max = probe.stats.records_per_s();
            ctx.report
                .figure("max produce rate (probe)", max, "records/s");
            max / 2.0
        }
    };
    ctx.report.figure("offered rate", rate, "records/s");
    let per = rate / ctx.args.producers.max(1) as f64;
    let modes: &[(&str, bool)] = match ctx.args.fetch {
        _ if ctx.args.client == ClientKind::Rdkafka => &[("librdkafka", false)],
        FetchMode::LongPoll => &[("long poll", false)],
        FetchMode::Stream => &[("stream", true)],
        FetchMode::Both => &[("long poll", false), ("stream", true)],
    };
    // (mode, e2e p99 µs, fetch requests per second)
    let mut summary: Vec<(&str, f64, f64)> = Vec::new();
    // librdkafka sends a consumer's first fetch after `assign` up to ~1.5 s late (and its
    // `assign` returns before that): what was sent before a consumer's first record arrived is
    // read but not timed, and the phase runs that much longer. weir's client says when its
    // first fetch is out.
    let (warmup, extra) = match ctx.args.client {
        ClientKind::Rdkafka => (true, RDKAFKA_WARMUP),
        ClientKind::Native => (false, Duration::ZERO),
    };
    for &(mode, streaming) in modes {
        let producers = (0..ctx.args.producers)
            .map(|_| ctx.produce_spec(Some(per), true, Duration::ZERO))
            .collect();
        let consumers = split_partitions(ctx.args.parts(), ctx.args.consumers)
            .into_iter()
            .map(|parts| ConsumeSpec {
                bootstrap: ctx.broker.bootstrap.clone(),
                topic: ctx.topic.clone(),
                partitions: parts,
                from_end: true,
                until: None,
                stamped: true,
                max_wait: Duration::from_millis(500),
                streaming,
                warmup,
            })
            .collect();
        let d = Duration::from_secs(ctx.args.duration) + extra;
        let r = ctx.run_phase(
            &format!("tail ({mode})"),
            producers,
            consumers,
            Some(d),
            None,
        )?;
        let rep = &mut ctx.report;
        rep.figure(
            &format!("[{mode}] achieved produce rate"),
            r.stats.records_per_s(),
            "records/s",
        );
        rep.figure(
            &format!("[{mode}] consumed"),
            r.consumed.records as f64,
            "records",
        );
        rep.figure(
            &format!("[{mode}] produced"),
            r.stats.records as f64,
            "records",
        );
        if warmup {
            rep.figure(
                &format!("[{mode}] first record's latency (consumer start-up, not timed)"),
                r.first_record_us as f64 / 1000.0,
                "ms",
            );
        }
        let rps = r.fetch_requests as f64 / r.stats.seconds.max(1e-9);
        if ctx.args.client == ClientKind::Native {
            // librdkafka does not count its fetches for us.
            rep.figure(&format!("[{mode}] fetch requests"), rps, "requests/s");
        }
        if streaming {
            rep.figure(
                &format!("[{mode}] pushes"),
                r.pushes as f64 / r.stats.seconds.max(1e-9),
                "pushes/s",
            );
        }
        let p50 = r.e2e_latency.value_at_percentile(50.0) as f64;
        let p99 = r.e2e_latency.value_at_percentile(99.0) as f64;
        rep.figure(&format!("[{mode}] end-to-end p50"), p50, "us");
        rep.goal(
            &format!("[{mode}] end-to-end p99 (us)"),
            p99,
            "< 1000",
            p99 < 1000.0,
        );
        summary.push((mode, p99, rps));
        rep.latencies.push(Latency {
            name: format!("end-to-end latency ({mode})"),
            hist: r.e2e_latency,
        });
        rep.latencies.push(Latency {
            name: format!("produce latency (acks={}, {mode} phase)", ctx.args.acks),
            hist: r.produce_latency,
        });
    }
    if let [(_, lp_p99, lp_rps), (_, st_p99, st_rps)] = summary[..] {
        let rep = &mut ctx.report;
        let lat = lp_p99 / st_p99.max(1.0);
        let req = lp_rps / st_rps.max(1e-9);
        rep.goal(
            "stream: e2e p99 lower than long poll by (x)",
            lat,
            ">= 2",
            lat >= 2.0,
        );
        rep.goal(
            "stream: fewer fetch requests than long poll by (x)",
            req,
            ">= 5",
            req >= 5.0,
        );
    }
    if sampled {
        ctx.raw_sample("after")?;
    }
    Ok(())
}
