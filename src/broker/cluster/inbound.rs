//! Connections from peer brokers (`Node::accept`): each read by a task of its own, frame
//! after frame through a read buffer (`net::PEER_READ_BUFFER`), each frame noting that its
//! sender is alive (`liveness`) and then handled (`Node::on_frame`): Raft messages to the
//! metadata group's inbox, partition messages to their replica's core, forwarded admin
//! requests proposed, calls served.

use std::rc::Rc;
use std::time::Duration;

use tracing::{debug, warn};

use super::call::AnswerFrame;
use super::net::{self, Frame, Reply};
use super::Node;

impl Node {
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
            glommio::spawn_local(self.clone().serve_peer(stream)).detach();
        }
    }

    /// Reads a peer's frames until it closes or sends something that does not decode (that
    /// closes this connection only).
    async fn serve_peer(self: Rc<Self>, stream: glommio::net::TcpStream) {
        let peer = stream.peer_addr().ok();
        let mut stream = futures_lite::io::BufReader::with_capacity(net::PEER_READ_BUFFER, stream);
        // The peer this connection comes from, once a frame named it.
        let mut from = None;
        loop {
            // Buffered frames are read without waiting: let the core's other tasks run.
            glommio::yield_if_needed().await;
            match net::read_frame(&mut stream).await {
                Ok(Some(frame)) => {
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
                if m.to != self.id || !self.peers.contains_key(&m.from) {
                    debug!(
                        from = m.from,
                        to = m.to,
                        "dropping a Raft message not for us"
                    );
                    return;
                }
                self.inbox.borrow_mut().push(m);
                self.work.notify();
            }
            Frame::Forward(f) => {
                let Some(peer) = self.peers.get(&f.from).cloned() else {
                    return;
                };
                let node = self.clone();
                glommio::spawn_local(async move {
                    let result = node.propose(f.req, f.records).await;
                    peer.send(&Frame::Reply(Reply { req: f.req, result }));
                })
                .detach();
            }
            Frame::Reply(r) => {
                if let Some(slot) = self.forwards.borrow_mut().remove(&r.req) {
                    slot.set(r.result);
                }
            }
            Frame::Partition(m) => {
                if m.msg.to != self.id || !self.peers.contains_key(&m.msg.from) {
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
