//! What a run reports: a summary table on stdout, a JSON file of every figure, and an SVG
//! with throughput over time and the latency distribution.

use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::raw::RawSample;

#[derive(Debug, Clone, serde::Serialize)]
pub struct SeriesPoint {
    pub phase: String,
    /// Seconds since the run started.
    pub t: f64,
    pub mb_per_s: f64,
    pub records_per_s: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Goal {
    pub name: String,
    pub value: f64,
    pub target: String,
    pub met: bool,
}

pub struct Latency {
    pub name: String,
    pub hist: Histogram<u64>,
}

#[derive(Default)]
pub struct Report {
    pub scenario: String,
    pub command: String,
    pub config: Value,
    pub raw: Vec<(String, RawSample)>,
    pub series: Vec<SeriesPoint>,
    pub figures: Vec<Figure>,
    pub goals: Vec<Goal>,
    pub latencies: Vec<Latency>,
    pub extra: Value,
}

pub const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 100.0];

fn pname(p: f64) -> String {
    if p >= 100.0 {
        "max".to_string()
    } else {
        format!("p{}", p.to_string().replace('.', ""))
    }
}

impl Report {
    pub fn figure(&mut self, name: &str, value: f64, unit: &str) {
        self.figures.push(Figure {
            name: name.to_string(),
            value,
            unit: unit.to_string(),
        });
    }

    pub fn goal(&mut self, name: &str, value: f64, target: &str, met: bool) {
        self.goals.push(Goal {
            name: name.to_string(),
            value,
            target: target.to_string(),
            met,
        });
    }

    /// Means of the raw samples: (disk write, disk read, tcp), bytes per second.
    pub fn raw_means(&self) -> RawSample {
        let n = self.raw.len().max(1) as f64;
        let mut m = RawSample::default();
        for (_, s) in &self.raw {
            m.disk_write_bps += s.disk_write_bps / n;
            m.disk_read_bps += s.disk_read_bps / n;
            m.tcp_bps += s.tcp_bps / n;
        }
        m
    }

    pub fn to_json(&self) -> Value {
        let latencies: Vec<Value> = self
            .latencies
            .iter()
            .map(|l| {
                let mut pct = serde_json::Map::new();
                for p in PERCENTILES {
                    pct.insert(pname(p), json!(l.hist.value_at_percentile(p)));
                }
                json!({
                    "name": l.name,
                    "unit": "us",
                    "count": l.hist.len(),
                    "mean": l.hist.mean(),
                    "percentiles": pct,
                    "distribution": distribution(&l.hist),
                })
            })
            .collect();
        json!({
            "scenario": self.scenario,
            "command": self.command,
            "config": self.config,
            "raw_samples": self.raw.iter().map(|(when, s)| json!({"when": when, "sample": s})).collect::<Vec<_>>(),
            "raw_mean": self.raw_means(),
            "figures": self.figures,
            "goals": self.goals,
            "latency": latencies,
            "series": self.series,
            "extra": self.extra,
        })
    }

    pub fn print_summary(&self) {
        println!();
        println!("== weir bench {} ==", self.scenario);
        println!("{}", self.command);
        println!("{:<44} {:>14}  unit", "figure", "value");
        println!("{}", "-".repeat(66));
        let raw = self.raw_means();
        // Without samples (`--raw-secs 0`) there is nothing to print, rather than zeros.
        let yardsticks = [
            ("raw disk write (1 MiB direct, mean)", raw.disk_write_bps),
            ("raw disk read (1 MiB direct, mean)", raw.disk_read_bps),
            ("loopback TCP (1 stream, mean)", raw.tcp_bps),
        ];
        for (name, v) in yardsticks.iter().filter(|_| !self.raw.is_empty()) {
            println!("{:<44} {:>14.1}  MB/s", name, v / 1e6);
        }
        for f in &self.figures {
            println!("{:<44} {:>14.3}  {}", f.name, f.value, f.unit);
        }
        for l in &self.latencies {
            for p in PERCENTILES {
                println!(
                    "{:<44} {:>14}  us",
                    format!("{} {}", l.name, pname(p)),
                    l.hist.value_at_percentile(p)
                );
            }
        }
        if !self.goals.is_empty() {
            println!("{}", "-".repeat(66));
            for g in &self.goals {
                println!(
                    "{:<44} {:>14.3}  goal {} -> {}",
                    g.name,
                    g.value,
                    g.target,
                    if g.met { "MET" } else { "missed" }
                );
            }
        }
    }

    pub fn write_files(&self, json_path: &Path, svg_path: &Path) -> std::io::Result<()> {
        for p in [json_path, svg_path] {
            if let Some(d) = p.parent() {
                std::fs::create_dir_all(d)?;
            }
        }
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(std::io::Error::other)?;
        std::fs::write(json_path, text)?;
        std::fs::write(svg_path, self.svg())?;
        Ok(())
    }

    /// Two panels: throughput over time per phase (with the raw yardsticks as dashed
    /// lines), and latency by percentile on a log-log "nines" axis.
    pub fn svg(&self) -> String {
        let (w, h) = (1000.0, 420.0);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="10" y="18" font-size="14">weir bench {} — {}</text>"#,
            self.scenario,
            xml_escape(&self.command)
        );
        self.svg_throughput(&mut s, 60.0, 50.0, 400.0, 300.0);
        self.svg_latency(&mut s, 560.0, 50.0, 400.0, 300.0);
        s.push_str("</svg>\n");
        s
    }

    fn svg_throughput(&self, s: &mut String, x0: f64, y0: f64, w: f64, h: f64) {
        let raw = self.raw_means();
        let t_max = self.series.iter().map(|p| p.t).fold(1.0, f64::max);
        let v_max = self
            .series
            .iter()
            .map(|p| p.mb_per_s)
            .chain([
                raw.disk_write_bps / 1e6,
                raw.disk_read_bps / 1e6,
                raw.tcp_bps / 1e6,
            ])
            .fold(1.0, f64::max)
            * 1.1;
        axes(s, x0, y0, w, h, "seconds", "MB/s", t_max, v_max);
        let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
        let mut phases: Vec<&str> = Vec::new();
        for p in &self.series {
            if !phases.contains(&p.phase.as_str()) {
                phases.push(&p.phase);
            }
        }
        for (i, ph) in phases.iter().enumerate() {
            let pts: Vec<String> = self
                .series
                .iter()
                .filter(|p| p.phase == *ph)
                .map(|p| {
                    format!(
                        "{:.1},{:.1}",
                        x0 + p.t / t_max * w,
                        y0 + h - p.mb_per_s / v_max * h
                    )
                })
                .collect();
            let c = colors[i % colors.len()];
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" fill="{c}">weir {ph}</text>"#,
                x0 + 10.0,
                y0 + 15.0 + 15.0 * i as f64
            );
        }
        for (i, (name, v)) in [
            ("raw disk write", raw.disk_write_bps),
            ("raw disk read", raw.disk_read_bps),
            ("loopback TCP", raw.tcp_bps),
        ]
        .iter()
        .enumerate()
        {
            let y = y0 + h - v / 1e6 / v_max * h;
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#888" stroke-dasharray="{}"/><text x="{}" y="{:.1}" fill="#666">{name} {:.0}</text>"##,
                x0 + w,
                ["6,3", "2,2", "10,4"][i],
                x0 + w - 150.0,
                y - 3.0,
                v / 1e6
            );
        }
    }

    fn svg_latency(&self, s: &mut String, x0: f64, y0: f64, w: f64, h: f64) {
        // x: nines, log10(1/(1-q)) from 0 (p0) to 5 (p99.999); y: log10 microseconds.
        let max_us = self
            .latencies
            .iter()
            .map(|l| l.hist.max())
            .max()
            .unwrap_or(1)
            .max(10) as f64;
        let y_top = max_us.log10().ceil().max(1.0);
        let _ = writeln!(
            s,
            r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#000"/>"##
        );
        for (i, label) in ["p0", "p90", "p99", "p99.9", "p99.99", "p99.999"]
            .iter()
            .enumerate()
        {
            let x = x0 + i as f64 / 5.0 * w;
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{label}</text>"##,
                y0 + h,
                y0 + h + 15.0
            );
        }
        for e in 0..=(y_top as i32) {
            let y = y0 + h - e as f64 / y_top * h;
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{y:.1}" text-anchor="end">{}</text>"##,
                x0 + w,
                x0 - 4.0,
                fmt_us(10f64.powi(e))
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">latency by percentile (log scales)</text>"#,
            x0 + w / 2.0,
            y0 + h + 32.0
        );
        let colors = ["#d62728", "#1f77b4", "#2ca02c"];
        for (i, l) in self.latencies.iter().enumerate() {
            if l.hist.is_empty() {
                continue;
            }
            let mut pts = Vec::new();
            for k in 0..=100 {
                let nines = k as f64 / 20.0;
                let q = (1.0 - 10f64.powf(-nines)) * 100.0;
                let v = l.hist.value_at_percentile(q).max(1) as f64;
                pts.push(format!(
                    "{:.1},{:.1}",
                    x0 + nines / 5.0 * w,
                    y0 + h - v.log10() / y_top * h
                ));
            }
            let c = colors[i % colors.len()];
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/><text x="{}" y="{}" fill="{c}">{}</text>"#,
                pts.join(" "),
                x0 + 10.0,
                y0 + 15.0 + 15.0 * i as f64,
                xml_escape(&l.name)
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn axes(
    s: &mut String,
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
    xl: &str,
    yl: &str,
    x_max: f64,
    y_max: f64,
) {
    let _ = writeln!(
        s,
        r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#000"/>"##
    );
    for i in 0..=5 {
        let f = i as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" text-anchor="middle">{:.0}</text><text x="{}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
            x0 + f * w,
            y0 + h + 15.0,
            f * x_max,
            x0 - 4.0,
            y0 + h - f * h,
            f * y_max
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{xl}</text><text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">{yl}</text>"#,
        x0 + w / 2.0,
        y0 + h + 32.0,
        x0 - 45.0,
        y0 + h / 2.0,
        x0 - 45.0,
        y0 + h / 2.0
    );
}

fn fmt_us(v: f64) -> String {
    if v >= 1e6 {
        format!("{}s", v / 1e6)
    } else if v >= 1e3 {
        format!("{}ms", v / 1e3)
    } else {
        format!("{v}us")
    }
}

fn xml_escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The latency distribution as (percentile, microseconds) pairs at logarithmic steps.
fn distribution(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (0..=50)
        .map(|k| {
            let q = (1.0 - 10f64.powf(-(k as f64) / 10.0)) * 100.0;
            (q, h.value_at_percentile(q))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_and_json_render() {
        let mut r = Report {
            scenario: "produce".into(),
            command: "weir bench produce".into(),
            ..Report::default()
        };
        r.raw.push((
            "before".into(),
            RawSample {
                disk_write_bps: 2e9,
                disk_read_bps: 3e9,
                tcp_bps: 3e9,
            },
        ));
        r.series.push(SeriesPoint {
            phase: "produce".into(),
            t: 1.0,
            mb_per_s: 100.0,
            records_per_s: 1e5,
        });
        let mut h = Histogram::new(3).unwrap();
        for v in 1..1000u64 {
            h.record(v).unwrap();
        }
        r.latencies.push(Latency {
            name: "produce".into(),
            hist: h,
        });
        r.figure("x", 1.0, "MB/s");
        let svg = r.svg();
        assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.ends_with("</svg>\n"));
        let j = r.to_json();
        assert_eq!(j["latency"][0]["percentiles"]["p50"], json!(500));
        assert_eq!(pname(99.9), "p999");
    }
}
