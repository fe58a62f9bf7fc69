//! Connections from peer brokers (`Peers::accept`, core 0). One whose first byte is a core
//! link's hello (`LinkHello`) has the hello read and is handed to the core it names
//! (`PeerHooks::link`, served by `links`). Any other is core 0's: with `security.inter.broker.protocol=SSL` a TLS
//! handshake first that only certificates of the cluster's CA pass, naming the peer
//! (`authenticate`, `peer_tls`); then read by a task of its own, frame after frame through a
//! read buffer (`serve_frames`), each frame noting that its sender is alive (`liveness`) and
//! then handled (`Peers::on_frame`): Raft messages and forwarded admin requests to the
//! metadata group (`Controller`), partition messages to their replica's core and calls to the
//! core that serves them (`PeerHooks`).

use std::cell::Cell;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::AsyncReadExt;
use glommio::net::TcpStream;
use tracing::{debug, warn};
use weir::protocol::peer::LinkHello;

use super::call::AnswerFrame;
use super::net::{self, Frame, Reply};
use super::peer_tls::{self, PeerIdentity, PeerTls};
use super::Peers;
use crate::broker::log_limit::LogLimit;
use crate::broker::sockets::hang_up;

/// Refused peer connections are logged at most once a second (an attacker can open many).
static REFUSED_LOG_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    static REFUSED: LogLimit = const { LogLimit::new(REFUSED_LOG_EVERY) };
}

fn refused(peer: Option<SocketAddr>, why: &str) {
    if let Some(left_out) = REFUSED.with(LogLimit::allow) {
        warn!(peer = ?peer, left_out, "refused a peer connection: {why}");
    }
}

/// An accepted peer connection that passed authentication: the stream its frames come on
/// (TLS over the socket, or the socket), its fd (to hang up on), the peer's address and,
/// with TLS, the brokers its certificate proves it may be.
pub(super) struct Accepted {
    stream: Box<dyn futures_lite::AsyncRead + Unpin>,
    fd: RawFd,
    addr: Option<SocketAddr>,
    who: Option<PeerIdentity>,
}

/// Authenticates an accepted connection: with `tls`, a handshake within
/// `HANDSHAKE_TIMEOUT` whose certificate must name another broker's host (of this broker,
/// `own_id`); without, nothing to check. `None`: refused (and logged).
pub(super) async fn authenticate(
    stream: TcpStream,
    tls: Option<&PeerTls>,
    own_id: u64,
) -> Option<Accepted> {
    let addr = stream.peer_addr().ok();
    let fd = stream.as_raw_fd();
    let Some(tls) = tls else {
        return Some(Accepted {
            stream: Box::new(stream),
            fd,
            addr,
            who: None,
        });
    };
    let handshake = futures_lite::future::or(
        async { Some(tls.acceptor.accept(stream).into_fallible().await) },
        async {
            glommio::timer::sleep(peer_tls::HANDSHAKE_TIMEOUT).await;
            // The socket is still the handshake's: hang up before it goes.
            hang_up(fd);
            None
        },
    )
    .await;
    let stream = match handshake {
        Some(Ok(s)) => s,
        Some(Err((e, io))) => {
            let _ = io.shutdown(std::net::Shutdown::Both).await;
            refused(addr, &format!("TLS: {e}"));
            return None;
        }
        None => {
            refused(addr, "TLS handshake timed out");
            return None;
        }
    };
    let cert = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first());
    match cert.map(|c| tls.identify(c, own_id)) {
        Some(who) if !who.0.is_empty() => {
            debug!(peer = ?addr, brokers = ?who.0, "peer connection authenticated");
            Some(Accepted {
                stream: Box::new(stream),
                fd,
                addr,
                who: Some(who),
            })
        }
        _ => {
            let _ = stream.get_ref().0.shutdown(std::net::Shutdown::Both).await;
            refused(
                addr,
                "its certificate is valid for no other broker's host in controller.quorum.voters",
            );
            None
        }
    }
}

/// Reads a peer's frames until it closes or sends something that does not decode (that
/// closes this connection only), handing each to `on_frame` with the broker the connection
/// comes from once a frame named it; an `Err` from `on_frame` closes the connection with
/// that reason. With TLS the first frame naming its sender fixes which of the brokers the
/// certificate proves it may be, and a frame naming any other closes the connection, nothing
/// of it handled. With `silent`, a connection on which nothing arrives for that long is
/// closed (its peer keeps it busy with keepalives while it uses it).
pub(super) async fn serve_frames(
    c: Accepted,
    silent: Option<Duration>,
    on_frame: impl FnMut(Frame, Option<u64>) -> Result<(), String>,
) {
    let Some(silent) = silent else {
        return read_frames(c, on_frame).await;
    };
    let (fd, addr) = (c.fd, c.addr);
    let heard = Rc::new(Cell::new(Instant::now()));
    let c = Accepted {
        stream: Box::new(Noted {
            inner: c.stream,
            heard: heard.clone(),
        }),
        ..c
    };
    futures_lite::future::or(read_frames(c, on_frame), async move {
        loop {
            glommio::timer::sleep(silent / 4).await;
            if heard.get().elapsed() > silent {
                hang_up(fd);
                return debug!(peer = ?addr, "closing a silent peer connection");
            }
        }
    })
    .await
}

/// A connection's bytes, noting when some last arrived.
struct Noted<R> {
    inner: R,
    heard: Rc<Cell<Instant>>,
}

impl<R: futures_lite::AsyncRead + Unpin> futures_lite::AsyncRead for Noted<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let read = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(read, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.heard.set(Instant::now());
        }
        read
    }
}

/// `serve_frames`' reading.
async fn read_frames(
    c: Accepted,
    mut on_frame: impl FnMut(Frame, Option<u64>) -> Result<(), String>,
) {
    let Accepted {
        stream,
        fd,
        addr,
        who,
    } = c;
    let mut stream = futures_lite::io::BufReader::with_capacity(net::PEER_READ_BUFFER, stream);
    // The peer this connection comes from, once a frame named it.
    let mut from = None;
    loop {
        // Buffered frames are read without waiting: let the core's other tasks run.
        glommio::yield_if_needed().await;
        match net::read_frame(&mut stream).await {
            Ok(Some(frame)) => {
                if let (Some(who), Some(sender)) = (&who, frame.sender()) {
                    if !who.may_be(sender) || from.is_some_and(|f| f != sender) {
                        hang_up(fd);
                        return refused(
                            addr,
                            &format!(
                                "a frame from broker {sender} on a connection authenticated \
                                 as {:?}",
                                from.map_or(who.0.clone(), |f| vec![f])
                            ),
                        );
                    }
                }
                from = frame.sender().or(from);
                if let Err(why) = on_frame(frame, from) {
                    hang_up(fd);
                    return refused(addr, &why);
                }
            }
            Ok(None) => return,
            Err(e) => {
                warn!(peer = ?addr, error = %e, "closing a peer connection: bad frame");
                return;
            }
        }
    }
}

/// Longest an accepted connection may stay silent before its first byte (a peer's first
/// write follows its connect at once; its keepalives come every `net::KEEPALIVE`).
const FIRST_BYTE_TIMEOUT: Duration = peer_tls::HANDSHAKE_TIMEOUT;

impl Peers {
    pub(super) async fn accept(self: Rc<Self>, listener: glommio::net::TcpListener) {
        loop {
            let stream = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "accepting a peer connection");
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            glommio::spawn_local(self.clone().serve_accepted(stream)).detach();
        }
    }

    /// One accepted connection: a core link (its first byte is a `LinkHello`'s) has its hello
    /// read and is handed to the core it names (`PeerHooks::link`); any other is core 0's,
    /// authenticated and read here.
    async fn serve_accepted(self: Rc<Self>, mut stream: TcpStream) {
        let addr = stream.peer_addr().ok();
        let mut first = [0u8; 1];
        let peeked =
            futures_lite::future::or(async { Some(stream.peek(&mut first).await) }, async {
                glommio::timer::sleep(FIRST_BYTE_TIMEOUT).await;
                None
            })
            .await;
        match peeked {
            Some(Ok(1)) => {}
            Some(Ok(_)) => return, // closed at once
            Some(Err(e)) => return debug!(peer = ?addr, error = %e, "reading a peer connection"),
            None => return refused(addr, "nothing sent"),
        }
        if first[0] == LinkHello::FIRST {
            // The hello is read here (exactly its bytes: the socket is not read ahead), one
            // pending read under the same bound as the first byte.
            let mut hello = [0u8; LinkHello::LEN];
            let read = futures_lite::future::or(
                async { Some(stream.read_exact(&mut hello).await) },
                async {
                    glommio::timer::sleep(FIRST_BYTE_TIMEOUT).await;
                    None
                },
            )
            .await;
            let hello = match read.map(|r| r.map_err(|e| e.to_string())) {
                Some(Ok(())) => match LinkHello::decode(&hello) {
                    Ok(h) => h,
                    Err(e) => return refused(addr, &format!("core link: {e}")),
                },
                Some(Err(e)) => return refused(addr, &format!("core link: {e}")),
                None => return refused(addr, "core link: hello incomplete"),
            };
            // The socket goes on under a descriptor of its own; this one closes with `stream`.
            // SAFETY: `stream` owns the descriptor and outlives the borrow.
            let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) }.try_clone_to_owned();
            match fd {
                Ok(fd) => (self.hooks.link)(fd, hello.core, addr),
                Err(e) => warn!(peer = ?addr, error = %e, "handing a core link on"),
            }
            return;
        }
        let Some(accepted) = authenticate(stream, self.tls.as_ref(), self.id).await else {
            return;
        };
        let peers = self.clone();
        serve_frames(accepted, None, move |frame, from| {
            if let Some(peer) = from {
                peers.heard_from(peer);
            }
            peers.on_frame(frame);
            Ok(())
        })
        .await
    }

    fn on_frame(self: &Rc<Self>, frame: Frame) {
        match frame {
            Frame::Raft(m) => {
                if m.to != self.id || !self.contains(m.from) {
                    debug!(
                        from = m.from,
                        to = m.to,
                        "dropping a Raft message not for us"
                    );
                    return;
                }
                match self.controller() {
                    Some(c) => c.raft(m),
                    None => debug!(from = m.from, "no metadata node: dropping a Raft message"),
                }
            }
            Frame::Forward(f) => {
                let (Some(peer), Some(c)) = (self.peers.get(&f.from).cloned(), self.controller())
                else {
                    debug!(
                        from = f.from,
                        "dropping a forwarded request: unknown peer or no node"
                    );
                    return;
                };
                let req = f.req;
                let placed = c.forward(f);
                glommio::spawn_local(async move {
                    let result = placed.await;
                    peer.send(&Frame::Reply(Reply { req, result }));
                })
                .detach();
            }
            Frame::Reply(r) => match self.controller() {
                Some(c) => c.forwarded(r.req, r.result),
                None => debug!(req = r.req, "no metadata node: dropping a reply"),
            },
            Frame::Partition(m) => {
                if m.msg.to != self.id || !self.contains(m.msg.from) {
                    debug!(
                        from = m.msg.from,
                        to = m.msg.to,
                        "dropping a partition message not for us"
                    );
                    return;
                }
                (self.hooks.partition)(m);
            }
            Frame::Call(c) => {
                let Some(peer) = self.peers.get(&c.from).cloned() else {
                    debug!(from = c.from, "dropping a call from an unknown broker");
                    return;
                };
                let answer = (self.hooks.call)(c.call);
                glommio::spawn_local(async move {
                    let answer = answer.await;
                    peer.send(&Frame::Answer(AnswerFrame { req: c.req, answer }));
                })
                .detach();
            }
            Frame::Answer(a) => {
                if let Some(slot) = self.calls.borrow_mut().remove(&a.req) {
                    slot.set(a.answer);
                }
            }
            Frame::Ping(_) => {}
        }
    }
}
