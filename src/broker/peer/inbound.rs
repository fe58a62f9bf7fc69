//! Connections from peer brokers (`Peers::accept`): with `security.inter.broker.protocol=SSL`
//! a TLS handshake first that only certificates of the cluster's CA pass, naming the peer
//! (`peer_tls`); each read by a task of its own, frame after frame through a read buffer (`net::PEER_READ_BUFFER`), each frame noting that its
//! sender is alive (`liveness`) and then handled (`Peers::on_frame`): Raft messages and
//! forwarded admin requests to the metadata group (`Controller`), partition messages to their
//! replica's core and calls to the core that serves them (`PeerHooks`).

use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use tracing::{debug, warn};

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

fn refused(peer: Option<std::net::SocketAddr>, why: &str) {
    if let Some(left_out) = REFUSED.with(LogLimit::allow) {
        warn!(peer = ?peer, left_out, "refused a peer connection: {why}");
    }
}

impl Peers {
    pub(super) async fn accept(
        self: Rc<Self>,
        listener: glommio::net::TcpListener,
        tls: Option<PeerTls>,
    ) {
        loop {
            let stream = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "accepting a peer connection");
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let peers = self.clone();
            let tls = tls.clone();
            glommio::spawn_local(async move {
                let peer = stream.peer_addr().ok();
                let fd = stream.as_raw_fd();
                match tls {
                    None => peers.serve_peer(stream, fd, peer, None).await,
                    Some(tls) => {
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
                                return refused(peer, &format!("TLS: {e}"));
                            }
                            None => return refused(peer, "TLS handshake timed out"),
                        };
                        let cert = stream.get_ref().1.peer_certificates().and_then(|c| c.first());
                        let who = cert.map(|c| tls.identify(c, peers.id));
                        match who {
                            Some(who) if !who.0.is_empty() => {
                                debug!(peer = ?peer, brokers = ?who.0, "peer connection authenticated");
                                peers.serve_peer(stream, fd, peer, Some(who)).await
                            }
                            _ => {
                                let _ = stream.get_ref().0.shutdown(std::net::Shutdown::Both).await;
                                refused(
                                    peer,
                                    "its certificate is valid for no other broker's host in \
                                     controller.quorum.voters",
                                )
                            }
                        }
                    }
                }
            })
            .detach();
        }
    }

    /// Reads a peer's frames until it closes or sends something that does not decode (that
    /// closes this connection only). With TLS, `who` says which brokers the certificate
    /// proves the peer may be: the first frame naming its sender fixes which one, and a frame
    /// naming any other closes the connection, nothing of it handled.
    async fn serve_peer<S: futures_lite::AsyncRead + Unpin>(
        self: Rc<Self>,
        stream: S,
        fd: RawFd,
        peer: Option<std::net::SocketAddr>,
        who: Option<PeerIdentity>,
    ) {
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
                                peer,
                                &format!(
                                    "a frame from broker {sender} on a connection authenticated \
                                     as {:?}",
                                    from.map_or(who.0.clone(), |f| vec![f])
                                ),
                            );
                        }
                    }
                    from = frame.sender().or(from);
                    if let Some(peer) = from {
                        self.heard_from(peer);
                    }
                    self.on_frame(frame)
                }
                Ok(None) => return,
                Err(e) => {
                    warn!(peer = ?peer, error = %e, "closing a peer connection: bad frame");
                    return;
                }
            }
        }
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
