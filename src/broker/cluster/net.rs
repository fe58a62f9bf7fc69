//! Traffic between brokers (core 0 to core 0): one outbound TCP connection per peer, written
//! by that peer's sender task, and the connections peers open to us, read by a task each.
//! An outbound connection leaves from this broker's own inter-broker address (its entry in
//! `controller.quorum.voters`) when that names one address, so a peer sees it come from there
//! and a firewall can tell the brokers apart even when they share one host (the tests cut
//! links between brokers on 127.0.0.2-6 with iptables: docs/replication.md, "Step 4 as built").
//!
//! A frame is `length (u32 BE) | kind (u8) | body`, the length counting kind and body:
//! - kind 1: a raft-rs `Message` (protobuf);
//! - kind 2: `Forward` (JSON): an admin request's records for the metadata leader;
//! - kind 3: `Reply` (JSON): the Raft index the leader proposed them at, or why not;
//! - kind 4: a partition group's Raft message (`replica::frame::PartitionMessage`);
//! - kind 5: `CallFrame` (JSON): a transaction request for another broker (`call`);
//! - kind 6: `AnswerFrame` (JSON): its answer;
//! - kind 7: a keepalive (the sender's broker id, u64 BE), written on an otherwise idle
//!   connection every `KEEPALIVE`: a peer is known to be up even when all the partition
//!   groups between the two brokers hibernate (`liveness`).
//!
//! A peer that sends a frame that does not decode loses that connection, never more.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use protobuf::Message as _;
use raft::prelude::Message;
use serde::{Deserialize, Serialize};
use tracing::{debug, info};
use weir::cluster::Record;

use super::call::{AnswerFrame, CallFrame};
use crate::broker::replica::frame::PartitionMessage;
use crate::broker::sync::{Event, Notify};

/// Largest frame accepted from a peer.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Frames queued for a peer; past it the oldest are dropped (Raft resends what matters).
/// A failed connection attempt drops them all.
const MAX_QUEUED: usize = 4096;
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a connection from a bound source address is checked while it is being made.
const CONNECT_POLL: Duration = Duration::from_millis(2);

/// Frames queued for a peer are written together, in writes of up to this many bytes (one
/// system call per frame cost most of an idle broker's CPU with thousands of groups); a
/// larger frame is written on its own, not copied.
const COALESCE_BYTES: usize = 64 << 10;
/// The read buffer of a connection from a peer.
pub const PEER_READ_BUFFER: usize = 64 << 10;

const KIND_RAFT: u8 = 1;
const KIND_FORWARD: u8 = 2;
const KIND_REPLY: u8 = 3;
const KIND_PARTITION: u8 = 4;
const KIND_CALL: u8 = 5;
const KIND_ANSWER: u8 = 6;
const KIND_PING: u8 = 7;
/// How long a connection to a peer may stay idle before a keepalive goes out.
pub const KEEPALIVE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forward {
    pub from: u64,
    pub req: u64,
    pub records: Vec<Record>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub req: u64,
    /// The Raft index of the proposed entry, or why it was not proposed.
    pub result: Result<u64, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Raft(Message),
    Forward(Forward),
    Reply(Reply),
    Partition(PartitionMessage),
    Call(CallFrame),
    Answer(AnswerFrame),
    /// A keepalive from the broker with this id.
    Ping(u64),
}

impl Frame {
    /// The broker that sent the frame, for the kinds that name it.
    pub fn sender(&self) -> Option<u64> {
        match self {
            Frame::Raft(m) => Some(m.from),
            Frame::Forward(f) => Some(f.from),
            Frame::Partition(p) => Some(p.msg.from),
            Frame::Call(c) => Some(c.from),
            Frame::Ping(from) => Some(*from),
            Frame::Reply(_) | Frame::Answer(_) => None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let (kind, body) = match self {
            Frame::Raft(m) => (KIND_RAFT, m.write_to_bytes().expect("a message encodes")),
            Frame::Forward(f) => (KIND_FORWARD, serde_json::to_vec(f).expect("encodes")),
            Frame::Reply(r) => (KIND_REPLY, serde_json::to_vec(r).expect("encodes")),
            Frame::Partition(p) => (
                KIND_PARTITION,
                p.encode_body()
                    .expect("a partition message of a known topic encodes"),
            ),
            Frame::Call(c) => (KIND_CALL, serde_json::to_vec(c).expect("encodes")),
            Frame::Answer(a) => (KIND_ANSWER, serde_json::to_vec(a).expect("encodes")),
            Frame::Ping(from) => (KIND_PING, from.to_be_bytes().to_vec()),
        };
        let mut out = Vec::with_capacity(5 + body.len());
        out.extend_from_slice(&(body.len() as u32 + 1).to_be_bytes());
        out.push(kind);
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a frame's kind and body (after the length).
    pub fn decode(kind_and_body: &[u8]) -> Result<Frame, String> {
        let (&kind, body) = kind_and_body.split_first().ok_or("empty frame")?;
        match kind {
            KIND_RAFT => Message::parse_from_bytes(body)
                .map(Frame::Raft)
                .map_err(|e| format!("bad Raft message: {e}")),
            KIND_FORWARD => serde_json::from_slice(body)
                .map(Frame::Forward)
                .map_err(|e| format!("bad forward: {e}")),
            KIND_REPLY => serde_json::from_slice(body)
                .map(Frame::Reply)
                .map_err(|e| format!("bad reply: {e}")),
            KIND_PARTITION => PartitionMessage::decode_body(body).map(Frame::Partition),
            KIND_CALL => serde_json::from_slice(body)
                .map(Frame::Call)
                .map_err(|e| format!("bad call: {e}")),
            KIND_ANSWER => serde_json::from_slice(body)
                .map(Frame::Answer)
                .map_err(|e| format!("bad answer: {e}")),
            KIND_PING => body
                .try_into()
                .map(|b| Frame::Ping(u64::from_be_bytes(b)))
                .map_err(|_| format!("bad keepalive of {} bytes", body.len())),
            k => Err(format!("unknown frame kind {k}")),
        }
    }
}

/// Reads one frame; `Ok(None)` at a clean end of the stream. Peers' connections are read
/// through a `BufReader` (`PEER_READ_BUFFER`): the frames of one write arrive in one read.
pub async fn read_frame<R: futures_lite::AsyncRead + Unpin>(
    stream: &mut R,
) -> Result<Option<Frame>, String> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME_BYTES {
        return Err(format!("frame of {len} bytes"));
    }
    let mut buf = vec![0u8; len];
    stream
        .read_exact(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    Frame::decode(&buf).map(Some)
}

/// One peer broker: the frames waiting to be written to it, and its sender task's wake-up.
pub struct Peer {
    pub id: u64,
    /// This broker's id (what its keepalives carry).
    own_id: u64,
    addr: SocketAddr,
    /// The source address of connections to it (see `source_for`).
    source: Option<IpAddr>,
    queue: RefCell<VecDeque<Vec<u8>>>,
    work: Notify,
    /// Fired (and replaced) each time a connection attempt fails and the queued frames are
    /// dropped: a call waiting for this peer's answer need not wait out its timeout.
    unreachable: RefCell<Rc<Event>>,
    /// When a frame from this peer last arrived, and whether it is taken to be up
    /// (`liveness`).
    pub heard: Cell<Option<Instant>>,
    pub up: Cell<bool>,
    /// Fired when the peer is taken to be down: the connection to it is dropped and made
    /// again (`Peer::reconnect`).
    reset: Notify,
}

impl Peer {
    /// A peer at `addr`, reached from `own` (this broker's inter-broker address, of the
    /// broker with id `own_id`).
    pub fn new(id: u64, addr: SocketAddr, own: SocketAddr, own_id: u64) -> Rc<Peer> {
        Rc::new(Peer {
            id,
            own_id,
            addr,
            source: source_for(own, addr),
            queue: RefCell::new(VecDeque::new()),
            work: Notify::default(),
            unreachable: RefCell::new(Rc::new(Event::default())),
            heard: Cell::new(None),
            up: Cell::new(false),
            reset: Notify::default(),
        })
    }

    /// Drops the connection to this peer and makes a new one (its sender task does, even in
    /// the middle of a write). Called when the peer went silent: the frames written into a
    /// link that dropped them wait in the kernel behind TCP's retransmission backoff, which
    /// grows to seconds, so after a network partition heals an old connection can stay mute
    /// for seconds more (the partition tests saw 4 s); a new connection's first SYN goes out
    /// at once, and the attempts repeat every `CONNECT_TIMEOUT` + `RECONNECT_PAUSE`.
    pub fn reconnect(&self) {
        self.reset.notify();
    }

    pub fn send(&self, frame: &Frame) {
        let mut q = self.queue.borrow_mut();
        if q.len() >= MAX_QUEUED {
            q.pop_front();
        }
        q.push_back(frame.encode());
        drop(q);
        self.work.notify();
    }

    /// Resolves at the next failed connection attempt to this peer (what was queued for it
    /// is then dropped).
    pub fn unreachable(&self) -> impl std::future::Future<Output = ()> {
        let event = self.unreachable.borrow().clone();
        async move { event.wait().await }
    }

    /// The sender task: connects (again after any error), then writes queued frames.
    pub async fn run(self: Rc<Self>) {
        let mut connected_before = false;
        loop {
            let mut stream = match connect(self.addr, self.source).await {
                Ok(s) => s,
                Err(e) => {
                    // What was queued for an unreachable peer is dropped: Raft sends again
                    // what matters once it answers, and partition groups' entries would
                    // otherwise pile up here (up to `MAX_QUEUED` frames of up to 1 MiB).
                    let dropped = std::mem::take(&mut *self.queue.borrow_mut()).len();
                    std::mem::take(&mut *self.unreachable.borrow_mut()).fire();
                    debug!(peer = self.id, addr = %self.addr, error = %e, dropped, "cannot reach peer");
                    glommio::timer::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            // A reset asked for before this connection was made is done.
            let _ = futures_lite::future::poll_once(self.reset.notified()).await;
            if !connected_before {
                info!(peer = self.id, addr = %self.addr, "connected to peer broker");
                connected_before = true;
            }
            'conn: loop {
                let mut frames: Vec<Vec<u8>> = self.queue.borrow_mut().drain(..).collect();
                if frames.is_empty() {
                    let woken = or(
                        async {
                            self.work.notified().await;
                            Some(true)
                        },
                        or(
                            async {
                                glommio::timer::sleep(KEEPALIVE).await;
                                Some(false)
                            },
                            async {
                                self.reset.notified().await;
                                None
                            },
                        ),
                    )
                    .await;
                    match woken {
                        Some(true) => continue,
                        Some(false) => frames.push(Frame::Ping(self.own_id).encode()),
                        None => {
                            info!(peer = self.id, "peer silent: connecting to it again");
                            break 'conn;
                        }
                    }
                }
                let written = or(
                    async { write_frames(&mut stream, frames).await.map(|()| true) },
                    async {
                        self.reset.notified().await;
                        Ok(false)
                    },
                )
                .await;
                match written {
                    Ok(true) => {}
                    Ok(false) => {
                        info!(peer = self.id, "peer silent: connecting to it again");
                        break 'conn;
                    }
                    Err(e) => {
                        debug!(peer = self.id, error = %e, "peer connection lost; reconnecting");
                        break 'conn;
                    }
                }
            }
            glommio::timer::sleep(RECONNECT_PAUSE).await;
        }
    }
}

/// Writes frames in order: the small ones gathered into writes of up to `COALESCE_BYTES`, a
/// larger one on its own.
async fn write_frames<W: futures_lite::AsyncWrite + Unpin>(
    out: &mut W,
    frames: Vec<Vec<u8>>,
) -> std::io::Result<()> {
    let mut gathered = Vec::new();
    for f in frames {
        if !gathered.is_empty() && gathered.len() + f.len() > COALESCE_BYTES {
            out.write_all(&gathered).await?;
            gathered.clear();
        }
        if f.len() >= COALESCE_BYTES {
            out.write_all(&f).await?;
        } else {
            gathered.extend_from_slice(&f);
        }
    }
    if !gathered.is_empty() {
        out.write_all(&gathered).await?;
    }
    Ok(())
}

/// The address to connect to a peer at `peer` from, for a broker whose own inter-broker
/// address is `own`: that address itself when it names one (not 0.0.0.0 or ::) of the peer's
/// family; otherwise none (the kernel picks, by its routes).
fn source_for(own: SocketAddr, peer: SocketAddr) -> Option<IpAddr> {
    let ip = own.ip();
    (!ip.is_unspecified() && own.is_ipv4() == peer.is_ipv4()).then_some(ip)
}

/// A connection to `addr`, from `source` (any port) when given, within `CONNECT_TIMEOUT`.
/// glommio's `TcpStream` cannot bind before it connects, so a bound one is made with socket2,
/// connected without blocking the reactor (a non-blocking `connect`, then its state looked at
/// every `CONNECT_POLL`: a connection on one host is made in microseconds, and one to an
/// unreachable peer gives up at the timeout as glommio's does), then handed to glommio.
async fn connect(addr: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, String> {
    let Some(source) = source else {
        return TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
            .await
            .map_err(|e| e.to_string());
    };
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| io("socket", e))?;
    if let Err(e) = socket.bind(&SocketAddr::new(source, 0).into()) {
        // The voters entry names an address this host does not have (behind NAT, or a
        // container's published address): connect as before, from whatever the kernel picks.
        tracing::debug!(%source, error = %e, "cannot bind a peer connection to this broker's voters address; connecting unbound");
        return TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
            .await
            .map_err(|e| e.to_string());
    }
    socket
        .set_nonblocking(true)
        .map_err(|e| io("set_nonblocking", e))?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            let deadline = Instant::now() + CONNECT_TIMEOUT;
            loop {
                // SO_ERROR first: a refused connection is no longer "in progress" either.
                if let Some(e) = socket.take_error().map_err(|e| io("SO_ERROR", e))? {
                    return Err(e.to_string());
                }
                if socket.peer_addr().is_ok() {
                    break; // established
                }
                if Instant::now() >= deadline {
                    return Err("connection timed out".into());
                }
                glommio::timer::sleep(CONNECT_POLL).await;
            }
        }
        Err(e) => return Err(e.to_string()),
    }
    // glommio's own sockets are blocking ones (it reads and writes through io_uring).
    socket
        .set_nonblocking(false)
        .map_err(|e| io("set_nonblocking", e))?;
    Ok(TcpStream::from(socket))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::cluster::Record;

    #[test]
    fn frames_roundtrip_and_garbage_is_an_error() {
        let m = Message {
            from: 1,
            to: 2,
            term: 7,
            ..Default::default()
        };
        let frames = [
            Frame::Raft(m),
            Frame::Forward(Forward {
                from: 2,
                req: 9,
                records: vec![Record::DeleteTopic { name: "t".into() }],
            }),
            Frame::Reply(Reply {
                req: 9,
                result: Err("not the leader".into()),
            }),
            Frame::Partition(PartitionMessage {
                topic_id: "0123456789abcdef0123456789abcdef".into(),
                partition: 3,
                msg: Message {
                    from: 2,
                    to: 1,
                    term: 4,
                    ..Default::default()
                },
            }),
            Frame::Call(CallFrame {
                from: 2,
                req: 10,
                call: super::super::call::PeerCall::Markers {
                    producer_id: 5,
                    epoch: 1,
                    commit: true,
                    parts: vec![("t".into(), 0)],
                },
            }),
            Frame::Answer(AnswerFrame {
                req: 10,
                answer: super::super::call::PeerAnswer::Codes(vec![0, 6]),
            }),
            Frame::Ping(3),
        ];
        for f in frames {
            let bytes = f.encode();
            let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
            assert_eq!(len, bytes.len() - 4);
            assert_eq!(Frame::decode(&bytes[4..]).unwrap(), f);
        }
        assert!(Frame::decode(&[]).is_err());
        assert!(Frame::decode(&[9, 1, 2]).is_err());
        assert!(Frame::decode(&[KIND_FORWARD, b'{']).is_err());
        assert!(Frame::decode(&[KIND_RAFT, 0xff, 0xff, 0xff]).is_err());
        assert!(Frame::decode(&[KIND_PARTITION, 1, 2, 3]).is_err());
        assert!(Frame::decode(&[KIND_CALL, b'[']).is_err());
        assert!(Frame::decode(&[KIND_ANSWER, b'{', b'}']).is_err());
        assert!(Frame::decode(&[KIND_PING, 0, 0, 1]).is_err());
    }

    /// Frames written together (small ones gathered, a large one alone) come back one by one
    /// and in order through a read buffer smaller than some of them.
    #[test]
    fn gathered_frames_read_back_in_order() {
        futures_lite::future::block_on(async {
            let frames: Vec<Frame> = (0..50u64)
                .map(|i| {
                    if i % 10 == 3 {
                        Frame::Reply(Reply {
                            req: i,
                            result: Err("x".repeat(COALESCE_BYTES + 1)),
                        })
                    } else {
                        Frame::Ping(i)
                    }
                })
                .collect();
            let mut out: Vec<u8> = Vec::new();
            write_frames(&mut out, frames.iter().map(Frame::encode).collect())
                .await
                .unwrap();
            let mut rd = futures_lite::io::BufReader::with_capacity(4096, out.as_slice());
            for f in &frames {
                assert_eq!(read_frame(&mut rd).await.unwrap().as_ref(), Some(f));
            }
            assert_eq!(read_frame(&mut rd).await.unwrap(), None);
        });
    }

    #[test]
    fn source_address_is_the_brokers_own_when_it_names_one() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            source_for(at("127.0.0.2:9093"), at("127.0.0.3:9093")),
            Some("127.0.0.2".parse().unwrap())
        );
        assert_eq!(source_for(at("0.0.0.0:9093"), at("127.0.0.3:9093")), None);
        assert_eq!(source_for(at("[::]:9093"), at("[::1]:9093")), None);
        assert_eq!(source_for(at("127.0.0.2:9093"), at("[::1]:9093")), None);
    }

    /// A peer sees the connection come from this broker's own address (what lets a firewall
    /// rule cut one broker pair on a shared host), frames flow on it, and a refused connection
    /// is an error at once, not a hang of the reactor.
    #[test]
    fn connections_leave_from_the_bound_source_address() {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .spawn(|| async {
                let listener = glommio::net::TcpListener::bind("127.0.0.3:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let accepted = glommio::spawn_local(async move {
                    let mut s = listener.accept().await.unwrap();
                    let from = s.peer_addr().unwrap();
                    (from, read_frame(&mut s).await.unwrap())
                });
                let mut out = connect(addr, Some("127.0.0.2".parse().unwrap()))
                    .await
                    .unwrap();
                let frame = Frame::Reply(Reply {
                    req: 5,
                    result: Ok(12),
                });
                out.write_all(&frame.encode()).await.unwrap();
                let (from, got) = accepted.await;
                assert_eq!(from.ip(), "127.0.0.2".parse::<IpAddr>().unwrap());
                assert_eq!(got, Some(frame));
                // Nothing listens there any more: refused, well within the timeout.
                drop(out);
                let t0 = Instant::now();
                let free = std::net::TcpListener::bind("127.0.0.3:0").unwrap();
                let closed = free.local_addr().unwrap();
                drop(free);
                assert!(connect(closed, Some("127.0.0.2".parse().unwrap()))
                    .await
                    .is_err());
                assert!(t0.elapsed() < CONNECT_TIMEOUT);
                // A voters address this host does not have (NAT, a container's published
                // address) must not keep the brokers apart: the connection is made unbound.
                let listener = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let accepted = glommio::spawn_local(async move { listener.accept().await.is_ok() });
                assert!(connect(addr, Some("192.0.2.1".parse().unwrap()))
                    .await
                    .is_ok());
                assert!(accepted.await);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
