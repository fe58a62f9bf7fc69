//! Traffic between brokers: one outbound TCP connection per peer (core 0's control
//! connection, or a core's link to a peer's core: `links`), written by its sender task, and
//! the connections peers open to us, read by a task each.
//! An outbound connection leaves from this broker's own inter-broker address (its entry in
//! `controller.quorum.voters`) when that names one address, so a peer sees it come from there
//! and a firewall can tell the brokers apart even when they share one host (the tests cut
//! links between brokers on 127.0.0.2-6 with iptables: docs/replication.md, "Network partitions with iptables").
//!
//! The frames (`weir::protocol::peer`: Raft messages, forwarded admin requests, partition
//! messages, transaction calls and answers) are written by the sender task; a keepalive
//! (kind 7) goes out on an otherwise idle connection every `KEEPALIVE`, so that a peer is known
//! to be up even when all the partition groups between the two brokers hibernate
//! (`liveness`). With `security.inter.broker.protocol=SSL` every connection is mutual TLS
//! (`peer_tls`).
//!
//! A peer that sends a frame that does not decode loses that connection, never more.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use futures_lite::AsyncWriteExt;
use tracing::{debug, info, warn};

use super::dial::{connect, source_for};
use crate::broker::log_limit::LogLimit;
use crate::broker::sync::{Event, Notify};
pub use weir::protocol::peer::{read_frame, Forward, Frame, Reply};

/// Frames queued for a peer; past it the oldest are dropped (Raft resends what matters).
/// A failed connection attempt drops them all.
const MAX_QUEUED: usize = 4096;
/// Bytes of frames queued for a peer; past it, as past `MAX_QUEUED`, the oldest are dropped
/// (a partition message can carry up to 1 MiB of entries, and every core may have a link).
const MAX_QUEUED_BYTES: usize = 64 << 20;
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// Frames queued for a peer are written together, in writes of up to this many bytes (one
/// system call per frame cost most of an idle broker's CPU with thousands of groups); a
/// larger frame is written on its own, not copied.
const COALESCE_BYTES: usize = 64 << 10;
/// The read buffer of a connection from a peer.
pub const PEER_READ_BUFFER: usize = 64 << 10;

/// How long a connection to a peer may stay idle before a keepalive goes out.
pub const KEEPALIVE: Duration = Duration::from_millis(100);

/// One peer broker: the frames waiting to be written to it, and its sender task's wake-up.
pub struct Peer {
    pub id: u64,
    /// This broker's id (what its keepalives carry).
    own_id: u64,
    addr: SocketAddr,
    /// The source address of connections to it (see `source_for`).
    source: Option<IpAddr>,
    queue: RefCell<VecDeque<Vec<u8>>>,
    /// The bytes in `queue`.
    queued_bytes: Cell<usize>,
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
    /// Mutual TLS (`peer_tls`): the connector, and the name the peer's certificate must be
    /// valid for. `None`: PLAINTEXT.
    tls: Option<(
        futures_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    /// A core link (`links`): the peer's core it is for, named by the `LinkHello` each
    /// connection opens with. `None`: the control link of core 0 (no hello).
    link_core: Option<u16>,
    /// A core link whose hello was not answered at the last attempt (a weir from before core
    /// links reads it as a bad frame and hangs up; or the core it names cannot take it): its
    /// messages go through core 0 instead (`links`) until an attempt, every
    /// `DECLINED_PAUSE`, is answered.
    declined: Cell<bool>,
    /// A core link: when a frame was last queued on it, and whether it closed for being idle
    /// that long (`LINK_IDLE`; its sender task has ended, and `links` makes a new one).
    last_used: Cell<Instant>,
    closed: Cell<bool>,
}

/// How often a declined core link is tried again.
const DECLINED_PAUSE: Duration = Duration::from_secs(60);
/// A core link with nothing to carry for this long closes (its keepalives would otherwise
/// go on for ever, one per 100 ms per link, while the groups behind it hibernate).
const LINK_IDLE: Duration = Duration::from_secs(10);
/// How long the peer may take to accept a core link's hello.
const HELLO_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

thread_local! {
    static TLS_FAILED: LogLimit = const { LogLimit::new(Duration::from_secs(60)) };
}

/// The writing end of a connection to a peer: the socket, or TLS over it.
type PeerWriter = Box<dyn futures_lite::AsyncWrite + Unpin>;

impl Peer {
    /// A peer at `addr`, reached from `own` (this broker's inter-broker address, of the
    /// broker with id `own_id`).
    pub fn new(
        id: u64,
        addr: SocketAddr,
        own: SocketAddr,
        own_id: u64,
        tls: Option<(
            futures_rustls::TlsConnector,
            rustls::pki_types::ServerName<'static>,
        )>,
        link_core: Option<u16>,
    ) -> Rc<Peer> {
        Rc::new(Peer {
            id,
            own_id,
            addr,
            source: source_for(own, addr),
            queue: RefCell::new(VecDeque::new()),
            queued_bytes: Cell::new(0),
            work: Notify::default(),
            unreachable: RefCell::new(Rc::new(Event::default())),
            heard: Cell::new(None),
            up: Cell::new(false),
            reset: Notify::default(),
            tls,
            link_core,
            declined: Cell::new(false),
            last_used: Cell::new(Instant::now()),
            closed: Cell::new(false),
        })
    }

    /// A connection to the peer, through TLS when configured (the peer's certificate checked
    /// against the cluster's CA and its host; ours presented); a core link's begins with its
    /// hello, before any TLS byte.
    async fn open(&self) -> Result<PeerWriter, String> {
        let mut stream = connect(self.addr, self.source).await?;
        let _ = stream.set_nodelay(true);
        if let Some(core) = self.link_core {
            let accepted = or(
                async {
                    link_hello(&mut stream, core)
                        .await
                        .map_err(|e| e.to_string())
                },
                async {
                    glommio::timer::sleep(HELLO_ANSWER_TIMEOUT).await;
                    Err("no answer".into())
                },
            )
            .await;
            self.declined.set(accepted.is_err());
            accepted.map_err(|e| format!("core link for core {core} not accepted: {e}"))?;
        }
        let Some((connector, name)) = &self.tls else {
            return Ok(Box::new(stream));
        };
        let handshake = connector.connect(name.clone(), stream);
        or(
            async { handshake.await.map_err(|e| format!("TLS: {e}")) },
            async {
                glommio::timer::sleep(super::peer_tls::HANDSHAKE_TIMEOUT).await;
                Err("TLS handshake timed out".to_string())
            },
        )
        .await
        .map(|s| Box::new(s) as PeerWriter)
    }

    /// Whether the peer declined this core link at the last attempt.
    pub fn declined(&self) -> bool {
        self.declined.get()
    }

    /// Whether this core link closed for being idle (a new one must be made).
    pub fn closed(&self) -> bool {
        self.closed.get()
    }

    /// A core link, not declined, with nothing queued and nothing queued for `LINK_IDLE`:
    /// closes (`closed`) so that its sender task ends.
    fn idle_close(&self) -> bool {
        let idle = self.link_core.is_some()
            && !self.declined.get()
            && self.queue.borrow().is_empty()
            && self.last_used.get().elapsed() >= LINK_IDLE;
        if idle {
            self.closed.set(true);
            debug!(
                peer = self.id,
                core = self.link_core,
                "core link idle: closed"
            );
        }
        idle
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
        if self.link_core.is_some() {
            self.last_used.set(Instant::now());
        }
        let bytes = frame.encode();
        let mut queued = self.queued_bytes.get() + bytes.len();
        let mut q = self.queue.borrow_mut();
        while !q.is_empty() && (q.len() >= MAX_QUEUED || queued > MAX_QUEUED_BYTES) {
            queued -= q.pop_front().map_or(0, |f| f.len());
        }
        q.push_back(bytes);
        drop(q);
        self.queued_bytes.set(queued);
        self.work.notify();
    }

    /// Takes every queued frame.
    fn take_queued(&self) -> VecDeque<Vec<u8>> {
        self.queued_bytes.set(0);
        std::mem::take(&mut *self.queue.borrow_mut())
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
            let mut stream = match self.open().await {
                Ok(s) => s,
                Err(e) => {
                    // What was queued for an unreachable peer is dropped: Raft sends again
                    // what matters once it answers, and partition groups' entries would
                    // otherwise pile up here (up to `MAX_QUEUED` frames of up to 1 MiB).
                    let dropped = self.take_queued().len();
                    std::mem::take(&mut *self.unreachable.borrow_mut()).fire();
                    if e.starts_with("TLS") {
                        // A certificate problem, not a peer that is down: say so (at most
                        // once a minute per core).
                        if let Some(left_out) = TLS_FAILED.with(LogLimit::allow) {
                            warn!(peer = self.id, addr = %self.addr, error = %e, left_out,
                                "cannot connect to peer: TLS handshake failed");
                        }
                    }
                    debug!(peer = self.id, addr = %self.addr, error = %e, dropped, "cannot reach peer");
                    if self.idle_close() {
                        return;
                    }
                    let pause = if self.declined.get() {
                        DECLINED_PAUSE
                    } else {
                        RECONNECT_PAUSE
                    };
                    glommio::timer::sleep(pause).await;
                    continue;
                }
            };
            // A reset asked for before this connection was made is done.
            let _ = futures_lite::future::poll_once(self.reset.notified()).await;
            if !connected_before {
                match self.link_core {
                    None => info!(peer = self.id, addr = %self.addr, "connected to peer broker"),
                    Some(core) => debug!(peer = self.id, core, "core link connected"),
                }
                connected_before = true;
            }
            'conn: loop {
                let mut frames: Vec<Vec<u8>> = self.take_queued().into();
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
                        Some(false) if self.idle_close() => return,
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

/// Opens a core link: writes its hello and reads the peer's answer (the hello's first byte:
/// the core that serves the link has it).
async fn link_hello(stream: &mut glommio::net::TcpStream, core: u16) -> std::io::Result<()> {
    use futures_lite::AsyncReadExt;
    use weir::protocol::peer::LinkHello;
    stream.write_all(&LinkHello { core }.encode()).await?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await?;
    if answer[0] != LinkHello::FIRST {
        return Err(std::io::Error::other(format!("answer {:#x}", answer[0])));
    }
    Ok(())
}

/// Writes frames in order: the small ones gathered into writes of up to `COALESCE_BYTES`, a
/// larger one on its own; then flushes. A TLS stream's `write` returns once its plaintext is
/// taken, with ciphertext the socket would not take yet still buffered in the session: without
/// the flush it went out only with the next write — after the next frame, or the keepalive
/// ping 100 ms later.
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
    out.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core link to a peer that does not answer its hello as a weir with core links does
    /// (here, one that reads it as a frame and hangs up, as an older weir does) is declined,
    /// so its messages go through core 0; one that answers is not.
    #[test]
    fn a_core_link_the_peer_does_not_answer_is_declined() {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .spawn(|| async {
                use futures_lite::AsyncReadExt;
                use weir::protocol::peer::LinkHello;
                let old = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let old_addr = old.local_addr().unwrap();
                glommio::spawn_local(async move {
                    loop {
                        let mut s = old.accept().await.unwrap();
                        assert!(read_frame(&mut s).await.is_err(), "a hello is no frame");
                    }
                })
                .detach();
                let new = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let new_addr = new.local_addr().unwrap();
                let served = glommio::spawn_local(async move {
                    let mut s = new.accept().await.unwrap();
                    let mut hello = [0u8; LinkHello::LEN];
                    s.read_exact(&mut hello).await.unwrap();
                    assert_eq!(LinkHello::decode(&hello), Ok(LinkHello { core: 1 }));
                    s.write_all(&[LinkHello::FIRST]).await.unwrap();
                    read_frame(&mut s).await.unwrap()
                });
                let own: SocketAddr = "127.0.0.1:0".parse().unwrap();
                let to_old = Peer::new(2, old_addr, own, 1, None, Some(1));
                let to_new = Peer::new(3, new_addr, own, 1, None, Some(1));
                glommio::spawn_local(to_old.clone().run()).detach();
                glommio::spawn_local(to_new.clone().run()).detach();
                to_old.send(&Frame::Ping(1));
                to_new.send(&Frame::Ping(1));
                assert_eq!(served.await, Some(Frame::Ping(1)));
                assert!(!to_new.declined());
                let t0 = Instant::now();
                while !to_old.declined() {
                    assert!(t0.elapsed() < Duration::from_secs(10), "never declined");
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                }
            })
            .unwrap()
            .join()
            .unwrap();
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
}
