//! Connections: one SO_REUSEPORT listener per core, and per connection a read loop that
//! frames and decodes requests in order and a write loop that sends responses in the same
//! order. Between them, each request is processed by its own task, so a connection may
//! pipeline (`max_inflight_per_connection` requests read ahead) while a parked fetch or a
//! slow append is still running.
//!
//! On an SSL listener the connection's task first runs the TLS handshake (rustls, on this
//! core) and then the same loops over the encrypted stream. On a SASL listener the read loop
//! passes each request through the connection's `sasl::ConnAuth` first: nothing but
//! ApiVersions and the SASL exchange is processed before the client has authenticated.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use glommio::task::JoinHandle;
use tracing::{debug, info, warn};

pub use crate::broker::kafka::Listener;
use crate::broker::kafka::{self, ProtocolError, Response};
use crate::broker::shard::Shard;
use crate::broker::sync::{ByteBudget, Held};

/// What a listener's connections need to know: which listener (its index in `listeners`,
/// for the endpoints Metadata answers with) and, on an SSL listener, this core's TLS acceptor.
#[derive(Clone)]
pub struct Endpoint {
    pub listener: usize,
    /// The shared bootstrap port, or this core's own port (ListGroups answers for the one
    /// broker the port stands for).
    pub kind: Listener,
    pub tls: Option<Rc<crate::broker::tls::CoreTls>>,
    /// SASL_PLAINTEXT / SASL_SSL: clients must authenticate first.
    pub sasl: bool,
}

/// Accepts connections until shutdown.
pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener, endpoint: Endpoint) {
    let per_core_limit = shard.config.max_connections.div_ceil(shard.cores).max(1);
    let mut refused: u64 = 0;
    let accept_failed = crate::broker::log_limit::LogLimit::new(Duration::from_secs(10));
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.shutdown.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                if shard.connections.get() >= per_core_limit {
                    crate::broker::metrics::CoreMetrics::bump(&shard.metrics.connections_refused);
                    refused += 1;
                    if refused.is_power_of_two() {
                        warn!(
                            core = shard.id,
                            limit = per_core_limit,
                            refused,
                            "connection limit reached (max.connections): closing new connections"
                        );
                    }
                    drop(stream);
                    continue;
                }
                crate::broker::metrics::CoreMetrics::bump(&shard.metrics.connections_accepted);
                let (sh, ep) = (shard.clone(), endpoint.clone());
                glommio::spawn_local(async move { serve_tcp(sh, stream, ep).await }).detach();
            }
            Some(Err(e)) => {
                // At the open-file limit every accept fails at once: logged at most every 10 s
                // (it was ~200 lines a second), and the loop backs off.
                if let Some(left_out) = accept_failed.allow() {
                    warn!(core = shard.id, error = %e, left_out, "accept failed");
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    debug!(core = shard.id, "listener closed");
}

enum Frame {
    /// A request's bytes, with their place in the core's request-memory budget (given back
    /// when the request's task ends).
    Request(Bytes, Held),
    Eof,
    Bad(ProtocolError),
}

/// A connection's read buffer. Frames are split off it as `Bytes` (no copy). The memory
/// past `buf.len()` that is known to be initialized is tracked, so each byte of the buffer
/// is zeroed once per allocation instead of before every read.
struct ReadBuf {
    buf: BytesMut,
    /// The budget taken for the frame being read (its whole size, once its prefix arrived).
    frame: Option<Held>,
    /// Bytes from `buf.as_ptr()` known initialized (`>= buf.len()`).
    init: usize,
    /// How much to read at once of a large frame: small for idle or chatty connections,
    /// doubling while reads come back full (streaming producers).
    read_hint: usize,
}

const READ_MIN: usize = 8 << 10;
const READ_MAX: usize = 1 << 20;
/// An emptied read buffer larger than this is let go rather than kept for the next frame:
/// an idle connection keeps at most this much beside the requests it has in flight.
const KEEP_MAX: usize = 64 << 10;

impl ReadBuf {
    fn new(capacity: usize) -> ReadBuf {
        ReadBuf {
            buf: BytesMut::with_capacity(capacity),
            frame: None,
            init: 0,
            read_hint: READ_MIN,
        }
    }

    /// Makes `buf[len..len + extra]` readable into; returns the old length.
    fn grow(&mut self, extra: usize) -> usize {
        let start = self.buf.len();
        let upto = start + extra;
        let before = self.buf.as_ptr();
        self.buf.reserve(extra);
        if self.buf.as_ptr() != before {
            self.init = start; // new or moved allocation: only the data is initialized
        }
        let from = self.init.max(start);
        if from < upto {
            let spare = self.buf.spare_capacity_mut();
            for b in &mut spare[from - start..extra] {
                b.write(0);
            }
            self.init = upto;
        }
        // SAFETY: bytes up to `upto` are initialized (data, earlier reads, or zeroed above)
        // and within capacity (reserved above).
        unsafe { self.buf.set_len(upto) };
        start
    }

    fn split_frame(&mut self, size: usize) -> Bytes {
        self.buf.advance(4);
        let frame = self.buf.split_to(size).freeze();
        self.init = self.init.saturating_sub(4 + size);
        if self.buf.is_empty() && self.buf.capacity() > KEEP_MAX {
            self.buf = BytesMut::new();
            self.init = 0;
        }
        frame
    }
}

/// Reads one size-prefixed frame. A size prefix over `max` (or negative) is refused before
/// any of the body is read. Once the prefix is in, the frame's whole size is taken from the
/// core's budget (waiting while it is spent: the only wait); the buffer still grows only as
/// the bytes arrive.
async fn read_frame<R: futures_lite::AsyncRead + Unpin>(
    rd: &mut R,
    rb: &mut ReadBuf,
    max: usize,
    budget: &Rc<ByteBudget>,
) -> std::io::Result<Frame> {
    loop {
        let mut need = 4;
        if rb.buf.len() >= 4 {
            let b = &rb.buf;
            let size = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            if size < 0 || size as usize > max {
                return Ok(Frame::Bad(ProtocolError(format!(
                    "request size {size} is outside 0..={max} (socket.request.max.bytes; \
                     sasl.server.max.receive.size before a SASL login)"
                ))));
            }
            let size = size as usize;
            if rb.frame.is_none() {
                rb.frame = Some(budget.take(4 + size).await);
            }
            if rb.buf.len() >= 4 + size {
                let frame = rb.split_frame(size);
                let held = rb.frame.take().expect("taken above");
                return Ok(Frame::Request(frame, held));
            }
            need = 4 + size;
        }
        // Memory follows the bytes that actually arrive: at most as much again as the frame
        // holds so far (or the read hint), never the size its prefix announces — a peer
        // announcing a large frame and then trickling, or sending nothing, holds a few KiB.
        let have = rb.buf.len();
        let want = (need - have).min(rb.read_hint.max(have)).clamp(1, 4 << 20);
        let start = rb.grow(want);
        let n = match rd.read(&mut rb.buf[start..]).await {
            Ok(n) => n,
            Err(e) => {
                rb.buf.truncate(start);
                return Err(e);
            }
        };
        rb.buf.truncate(start + n);
        if n == want {
            rb.read_hint = (rb.read_hint * 2).min(READ_MAX);
        } else if n < want / 4 {
            rb.read_hint = (rb.read_hint / 2).max(READ_MIN);
        }
        if n == 0 {
            if start == 0 {
                return Ok(Frame::Eof);
            }
            return Ok(Frame::Bad(ProtocolError(format!(
                "connection closed inside a frame ({start} of {need} bytes)"
            ))));
        }
    }
}

/// One accepted connection, counted in `shard.connections` from accept to close (a TLS
/// handshake in progress counts against `max.connections` too).
async fn serve_tcp(shard: Rc<Shard>, stream: TcpStream, endpoint: Endpoint) {
    shard.connections.set(shard.connections.get() + 1);
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_nodelay(true);
    debug!(core = shard.id, %peer, "connection opened");
    match &endpoint.tls {
        None => serve_connection(&shard, stream, &peer, &endpoint, None).await,
        Some(tls) => {
            let acceptor = tls.acceptor();
            let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
            let handshake = futures_lite::future::or(
                async {
                    Some(match acceptor.accept(stream).into_fallible().await {
                        Ok(s) => Ok(s),
                        Err((e, io)) => {
                            // Else the socket stays open until the client sends more.
                            let _ = io.shutdown(std::net::Shutdown::Both).await;
                            Err(e)
                        }
                    })
                },
                futures_lite::future::or(
                    async {
                        shard.shutdown.wait().await;
                        None
                    },
                    async {
                        glommio::timer::sleep(crate::broker::tls::HANDSHAKE_TIMEOUT).await;
                        // While the handshake still holds the socket.
                        crate::broker::sockets::hang_up(fd);
                        Some(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "no TLS handshake within 10 s",
                        )))
                    },
                ),
            )
            .await;
            match handshake {
                None => {}
                Some(Ok(tls)) => {
                    debug!(core = shard.id, %peer, "TLS handshake done");
                    // A verified client certificate names the principal (ssl.client.auth).
                    let principal = crate::broker::tls::client_principal(tls.get_ref().1);
                    serve_connection(&shard, tls, &peer, &endpoint, principal).await
                }
                Some(Err(e)) => {
                    // A plaintext client on the SSL port, an untrusted client certificate, a
                    // client that refused ours: this connection only.
                    crate::broker::metrics::CoreMetrics::bump(
                        &shard.metrics.tls_handshake_failures,
                    );
                    let hint = if e.to_string().contains("InvalidContentType") {
                        " (not TLS: a plaintext client on the SSL port?)"
                    } else {
                        ""
                    };
                    warn!(core = shard.id, %peer, error = %format!("{e}{hint}"),
                        "TLS handshake failed; closing connection");
                }
            }
        }
    }
    shard.connections.set(shard.connections.get() - 1);
    debug!(core = shard.id, %peer, "connection closed");
}

async fn serve_connection<S>(
    shard: &Rc<Shard>,
    stream: S,
    peer: &str,
    endpoint: &Endpoint,
    principal: Option<String>,
) where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + 'static,
{
    let peer = peer.to_string();
    let (listener, kind) = (endpoint.listener, endpoint.kind);
    let mut auth = endpoint.sasl.then(crate::broker::sasl::ConnAuth::new);
    // Who sends this connection's requests, for ACLs: the SASL user once logged in, else the
    // client certificate's subject, else Kafka's User:ANONYMOUS; and the client's address.
    let host = peer
        .rsplit_once(':')
        .map(|(h, _)| h.trim_matches(|c| c == '[' || c == ']').to_string())
        .unwrap_or_default();
    let mut session = Rc::new(weir::acl::Session {
        principal: principal.unwrap_or_else(|| weir::acl::ANONYMOUS.to_string()),
        host,
    });
    let (mut rd, mut wr) = futures_lite::io::split(stream);
    let (tx, rx) = local_channel::new_bounded::<JoinHandle<Result<Response, ProtocolError>>>(
        shard.config.max_inflight_per_connection,
    );
    let writer_peer = peer.clone();
    let core = shard.id;
    // For connections.max.idle.ms: requests read and not yet answered, and the last time
    // a request arrived or a response went out.
    let activity = Rc::new((Cell::new(0usize), Cell::new(Instant::now())));
    let writer_activity = activity.clone();
    // Streaming fetch pushes reach the writer on a side channel, so that a stream never
    // holds up the ordered responses (and is bounded: a full channel stalls the stream).
    let (push_tx, push_rx) = local_channel::new_bounded::<crate::broker::streaming::Push>(16);
    let streams = crate::broker::streaming::ConnStreams::new(push_tx);
    let writer = glommio::spawn_local(async move {
        let mut staged = BytesMut::new();
        let mut current: Option<JoinHandle<Result<Response, ProtocolError>>> = None;
        let mut pushes_open = true;
        loop {
            // Next: the response at the head of the line, or a push, whichever is ready.
            enum Ev {
                Task(Option<JoinHandle<Result<Response, ProtocolError>>>),
                Done(Option<Result<Response, ProtocolError>>),
                Push(Option<crate::broker::streaming::Push>),
            }
            let push_next = async {
                if pushes_open {
                    Ev::Push(push_rx.recv().await)
                } else {
                    futures_lite::future::pending().await
                }
            };
            let ev = match current.as_mut() {
                None => {
                    futures_lite::future::or(async { Ev::Task(rx.recv().await) }, push_next).await
                }
                Some(h) => futures_lite::future::or(async { Ev::Done(h.await) }, push_next).await,
            };
            let task_result = match ev {
                Ev::Task(Some(t)) => {
                    current = Some(t);
                    continue;
                }
                Ev::Task(None) => break,
                Ev::Push(None) => {
                    pushes_open = false;
                    continue;
                }
                Ev::Push(Some(pieces)) => {
                    if let Err(e) = write_pieces(&mut wr, &mut staged, pieces).await {
                        debug!(core, peer = %writer_peer, error = %e, "write failed; closing");
                        break;
                    }
                    writer_activity.1.set(Instant::now());
                    continue;
                }
                Ev::Done(r) => {
                    current = None;
                    r
                }
            };
            let done = &writer_activity;
            let result = match task_result {
                Some(r) => r,
                None => Err(ProtocolError("request task was cancelled".into())),
            };
            match result {
                Ok(Some(pieces)) => {
                    if let Err(e) = write_pieces(&mut wr, &mut staged, pieces).await {
                        debug!(core, peer = %writer_peer, error = %e, "write failed; closing");
                        break;
                    }
                    done.0.set(done.0.get() - 1);
                    done.1.set(Instant::now());
                }
                Ok(None) => {
                    done.0.set(done.0.get() - 1);
                    done.1.set(Instant::now());
                }
                Err(e) => {
                    warn!(core, peer = %writer_peer, error = %e, "closing connection");
                    break;
                }
            }
        }
        let _ = wr.close().await;
    });

    let max = shard.config.socket_request_max_bytes;
    // Before a SASL login only the exchange's small requests are taken
    // (`sasl.server.max.receive.size`, Kafka's rule).
    let pre_login_max = shard.config.sasl_max_receive_bytes.min(max);
    let idle = Duration::from_millis(shard.config.connections_max_idle_ms);
    let mut buf = ReadBuf::new(READ_MIN);
    loop {
        let limit = if auth.as_ref().is_some_and(|a| a.user().is_none()) {
            pre_login_max
        } else {
            max
        };
        let frame = futures_lite::future::or(
            async { Some(read_frame(&mut rd, &mut buf, limit, &shard.reading).await) },
            futures_lite::future::or(
                async {
                    shard.shutdown.wait().await;
                    None
                },
                async {
                    idle_expired(&activity, idle).await;
                    info!(core = shard.id, %peer, idle_ms = idle.as_millis() as u64,
                        "closing idle connection (connections.max.idle.ms)");
                    None
                },
            ),
        )
        .await;
        let (frame, held) = match frame {
            None => break,
            Some(Ok(Frame::Request(f, held))) => (f, held),
            Some(Ok(Frame::Eof)) => break,
            Some(Ok(Frame::Bad(e))) => {
                crate::broker::metrics::CoreMetrics::bump(
                    &shard.metrics.connections_closed_bad_input,
                );
                warn!(core = shard.id, %peer, error = %e, "bad input; closing connection");
                break;
            }
            Some(Err(e)) => {
                debug!(core = shard.id, %peer, error = %e, "read failed");
                break;
            }
        };
        // SASL listener: the request passes `ConnAuth` first (after a SaslHandshake v0 the
        // next token comes as a raw frame, without a request header).
        use crate::broker::sasl::Admit;
        let (req, admit) = match auth.as_mut() {
            Some(a) if a.expects_raw_token() => (None, a.raw_token(shard, frame, &peer).await),
            _ => match kafka::decode_request(frame) {
                Ok(r) => {
                    let admit = match auth.as_mut() {
                        Some(a) => a
                            .admit(shard, &r, &peer)
                            .await
                            .unwrap_or_else(|e| Admit::Close(e.to_string())),
                        None => Admit::Pass,
                    };
                    (Some(r), admit)
                }
                Err(e) => {
                    crate::broker::metrics::CoreMetrics::bump(
                        &shard.metrics.connections_closed_bad_input,
                    );
                    warn!(core = shard.id, %peer, error = %e, "bad request; closing connection");
                    break;
                }
            },
        };
        let (answer, close) = match admit {
            Admit::Pass => (None, None),
            Admit::Answer(b) => (Some(b), None),
            Admit::AnswerAndClose(b, why) => (Some(b), Some(why)),
            Admit::Close(why) => (None, Some(why)),
        };
        let answered = answer.is_some();
        if let Some(bytes) = answer {
            // Answered in its turn, after the responses to the requests before it.
            activity.0.set(activity.0.get() + 1);
            activity.1.set(Instant::now());
            let task = glommio::spawn_local(async move { Ok(Some(vec![bytes])) }).detach();
            if tx.send(task).await.is_err() {
                break;
            }
        }
        if let Some(why) = close {
            // What a client that never logs in can make happen over and over: at most one
            // line a second per core.
            if let Some(left_out) = CLOSING_LOG.with(crate::broker::log_limit::LogLimit::allow) {
                info!(core = shard.id, %peer, reason = %why, left_out, "closing connection");
            }
            break;
        }
        if let Some(user) = auth.as_ref().and_then(|a| a.user()) {
            if session.principal.strip_prefix("User:") != Some(user) {
                session = Rc::new(weir::acl::Session {
                    principal: format!("User:{user}"),
                    host: session.host.clone(),
                });
            }
        }
        let Some(req) = req.filter(|_| !answered) else {
            continue; // a SASL token or request, answered by `ConnAuth`
        };
        if let kafka::Body::StreamFetch(op) = req.body {
            // Answered (and then fed) through the push channel, not in line.
            activity.1.set(Instant::now());
            streams
                .handle(shard, req.correlation_id, op, &session)
                .await;
            continue;
        }
        activity.0.set(activity.0.get() + 1);
        activity.1.set(Instant::now());
        let sh = shard.clone();
        let who = session.clone();
        // The request's bytes count against the core's budget until its task ends.
        let task = glommio::spawn_local(async move {
            let answer = kafka::process(sh, req, listener, kind, who).await;
            drop(held);
            answer
        })
        .detach();
        if tx.send(task).await.is_err() {
            break; // the writer stopped (client gone or protocol error)
        }
    }
    streams.cancel_all();
    drop(streams);
    drop(buf);
    drop(tx);
    writer.await;
}

thread_local! {
    static CLOSING_LOG: crate::broker::log_limit::LogLimit =
        const { crate::broker::log_limit::LogLimit::new(Duration::from_secs(1)) };
}

/// Resolves once the connection has had no request in flight and no traffic for `idle`
/// (`activity`: requests in flight, time of the last request or response).
async fn idle_expired(activity: &(Cell<usize>, Cell<Instant>), idle: Duration) {
    loop {
        let since = activity.1.get().elapsed();
        if activity.0.get() == 0 && since >= idle {
            return;
        }
        glommio::timer::sleep(idle.saturating_sub(since).max(Duration::from_millis(100))).await;
    }
}

/// Writes a response: small pieces are gathered into one buffer, large record chunks are
/// written from their own memory.
async fn write_pieces<W: futures_lite::AsyncWrite + Unpin>(
    wr: &mut W,
    staged: &mut BytesMut,
    pieces: Vec<Bytes>,
) -> std::io::Result<()> {
    const GATHER: usize = 32 << 10;
    for p in pieces {
        if p.len() < GATHER {
            staged.extend_from_slice(&p);
            if staged.len() >= GATHER {
                wr.write_all(staged).await?;
                staged.clear();
            }
        } else {
            if !staged.is_empty() {
                wr.write_all(staged).await?;
                staged.clear();
            }
            wr.write_all(&p).await?;
        }
    }
    if !staged.is_empty() {
        wr.write_all(staged).await?;
        staged.clear();
    }
    // On a TLS stream a write that would block leaves the last records in rustls's buffer
    // (its `poll_write` has already accepted the bytes): flush sends them now rather than
    // with the next response, which may never come (a hang seen with benches/tls.py). On a
    // plain socket it returns at once.
    wr.flush().await
}

/// One line per listener, before the "listening on" line (the SSL tests parse it).
pub fn log_listener(protocol: &str, addr: &std::net::SocketAddr) {
    println!("{protocol} listener on {addr}");
}

pub fn log_listening(addr: &std::net::SocketAddr) {
    // The test harness parses exactly this line.
    println!("listening on {addr}");
    info!(%addr, "all cores are serving");
}
