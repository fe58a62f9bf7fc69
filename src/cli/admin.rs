//! `weir topic ...`, `weir group ...` and `weir user ...`: an admin CLI over Kafka's Admin APIs, so it works
//! against any Kafka-protocol broker (`--bootstrap`). Human-readable tables by default,
//! `--json` for scripts. Each command runs on one glommio executor with the native client.

use clap::Args;
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use crate::client::Connection;

pub(super) const CLIENT_ID: &str = "weir-admin";
pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const OP_SET: i8 = 0;
pub(super) const OP_DELETE: i8 = 1;

/// Options every admin command takes.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// The broker to talk to (any Kafka-protocol broker).
    #[arg(long, default_value = "127.0.0.1:9092", global = true)]
    pub bootstrap: String,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

pub(super) type Res<T> = Result<T, String>;

pub(super) fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(super) fn check(code: i16, message: Option<&StrBytes>, what: &str) -> Res<()> {
    match code.err() {
        None => Ok(()),
        Some(e) => Err(match message.filter(|m| !m.is_empty()) {
            Some(m) => format!("{what}: {e:?}: {}", m.as_str()),
            None => format!("{what}: {e:?}"),
        }),
    }
}

pub(super) fn kv(s: &str) -> Res<(String, String)> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("'{s}': expected KEY=VALUE"))
}

pub(super) fn cerr(e: crate::client::Error) -> String {
    e.to_string()
}

pub(super) async fn send<R: kafka_protocol::protocol::Request>(
    conn: &Connection,
    req: &R,
    cap: i16,
) -> Res<R::Response> {
    let version = conn.version::<R>(cap).map_err(cerr)?;
    conn.send(req, version)
        .await
        .map_err(cerr)?
        .await
        .map_err(cerr)
}

/// Prints rows as an aligned table.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out.push('\n');
        out.push_str(&line(r.clone()));
    }
    out
}

pub(super) fn run<F, Fut>(f: F) -> Res<Value>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Res<Value>> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .name("weir-admin")
        .spawn(f)
        .map_err(|e| format!("starting the client: {e}"))?
        .join()
        .map_err(|e| format!("client executor: {e}"))?
}

pub(super) fn finish(json: bool, r: Res<Value>, human: impl Fn(&Value) -> String) -> i32 {
    match r {
        Ok(v) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                println!("{}", human(&v));
            }
            0
        }
        Err(e) => {
            if json {
                println!("{}", json!({ "error": e }));
            }
            eprintln!("weir: {e}");
            1
        }
    }
}

pub(super) async fn connect(bootstrap: &str) -> Res<Connection> {
    Connection::connect(bootstrap, CLIENT_ID)
        .await
        .map_err(|e| format!("connecting to {bootstrap}: {e}"))
}

pub(super) async fn metadata(
    conn: &Connection,
    topics: Option<Vec<String>>,
) -> Res<MetadataResponse> {
    let req = MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(sb(t)))))
                .collect()
        }))
        .with_allow_auto_topic_creation(false);
    send(conn, &req, 9).await
}

pub(super) fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["A", "LONGER"],
            &[
                vec!["xyz".into(), "1".into()],
                vec!["q".into(), "22".into()],
            ],
        );
        assert_eq!(t, "A    LONGER\nxyz  1\nq    22");
    }

    #[test]
    fn key_values_need_an_equals_sign() {
        assert_eq!(kv(" a = b ").unwrap(), ("a".into(), "b".into()));
        assert!(kv("nothing").is_err());
    }
}
