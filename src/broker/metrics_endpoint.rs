//! The Prometheus endpoint (`metrics.listen`, served by core 0): `GET /metrics` asks every
//! core for its `CoreSnapshot` over the mesh (`Req::Metrics`) and answers `metrics::render`.

use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use crate::broker::metrics::{render, CoreSnapshot};
use crate::broker::shard::{MetricsCall, Shard};

/// Serves `GET /metrics` on `listener` (core 0) until shutdown.
pub async fn serve(shard: Rc<Shard>, listener: TcpListener) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.shutdown.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                let sh = shard.clone();
                glommio::spawn_local(async move {
                    if let Err(e) = http_connection(sh, stream).await {
                        debug!(error = %e, "metrics connection closed");
                    }
                })
                .detach();
            }
            Some(Err(e)) => {
                warn!(error = %e, "metrics accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Every core's snapshot, core 0 first.
pub async fn gather(shard: &Rc<Shard>) -> Vec<CoreSnapshot> {
    let mut out = Vec::with_capacity(shard.cores);
    for core in 0..shard.cores {
        if let Some(s) = shard.ask(core, MetricsCall).await {
            out.push(*s);
        }
    }
    out
}

/// One HTTP/1.1 connection: requests answered in turn until the client closes, asks to
/// close, or sends something that is not a small GET (then it is closed).
async fn http_connection(shard: Rc<Shard>, mut stream: TcpStream) -> std::io::Result<()> {
    const MAX_HEAD: usize = 8 << 10;
    let mut buf = Vec::with_capacity(1024);
    loop {
        // Read one request head (up to the blank line), with a deadline.
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > MAX_HEAD {
                return respond(
                    &mut stream,
                    431,
                    "text/plain",
                    b"request head too large\n",
                    true,
                )
                .await;
            }
            let mut chunk = [0u8; 1024];
            let n =
                futures_lite::future::or(async { Some(stream.read(&mut chunk).await) }, async {
                    glommio::timer::sleep(Duration::from_secs(10)).await;
                    None
                })
                .await;
            match n {
                None | Some(Ok(0)) => return Ok(()),
                Some(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                Some(Err(e)) => return Err(e),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let mut first = head.lines().next().unwrap_or("").split(' ');
        let (method, path, version) = (first.next(), first.next(), first.next());
        let close = head.to_ascii_lowercase().contains("connection: close");
        match (method, path, version) {
            (Some("GET"), Some(p), Some(v)) if v.starts_with("HTTP/1.") => {
                let path = p.split('?').next().unwrap_or(p);
                if path == "/metrics" {
                    let text = render(&gather(&shard).await);
                    respond(
                        &mut stream,
                        200,
                        "text/plain; version=0.0.4; charset=utf-8",
                        text.as_bytes(),
                        close,
                    )
                    .await?;
                } else {
                    respond(
                        &mut stream,
                        404,
                        "text/plain",
                        b"not found: try /metrics\n",
                        close,
                    )
                    .await?;
                }
                if close || v == "HTTP/1.0" {
                    return Ok(());
                }
            }
            _ => {
                return respond(&mut stream, 400, "text/plain", b"bad request\n", true).await;
            }
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        431 => "Request Header Fields Too Large",
        _ => "Bad Request",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{}\r\n",
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    );
    // One write: head and body leave in one segment where they fit, not two round trips.
    let mut reply = Vec::with_capacity(head.len() + body.len());
    reply.extend_from_slice(head.as_bytes());
    reply.extend_from_slice(body);
    stream.write_all(&reply).await?;
    stream.flush().await
}
