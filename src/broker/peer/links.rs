//! Core links (docs/replication.md §5.2): a partition group's Raft messages go from the core
//! of one replica straight to the core of another, over a connection of that pair of cores,
//! instead of through core 0 at both ends.
//!
//! Every core keeps its own outbound connections, one per (peer broker, peer core) it sends
//! to, made on first use and written by a sender task each (`net::Peer`, as core 0's control
//! connection is, with its keepalives); one with nothing to carry for 10 s closes. Each opens
//! with a `LinkHello` naming the core it is for, before any TLS byte. The peer's core 0 accepts
//! it on the one inter-broker port, reads the hello and hands the socket to that core
//! (`inbound`, `PeerHooks::link`), which answers the hello with its first byte, authenticates
//! the link as core 0 would and reads its frames (`Links::serve`); a link silent for 10 s is
//! closed there. A core link carries partition messages and keepalives, nothing else: the
//! metadata group, forwarded requests and calls stay on core 0's connections.
//!
//! A peer whose core 0 takes it to be down has this core's links to it made again
//! (`Links::reconnect`, for the reason `Peer::reconnect` gives). A link whose hello goes
//! unanswered (an older weir, during a rolling upgrade) is declined: its messages go through
//! core 0 (`ReplicaHost::send_raft`), and it is tried again every minute.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;
use std::time::Duration;

use futures_lite::AsyncWriteExt;
use glommio::net::TcpStream;
use tracing::debug;
use weir::protocol::peer::{LinkHello, PartitionMessage};

use super::inbound::{authenticate, serve_frames};
use super::net::{Frame, Peer};
use super::peer_tls::PeerTls;

/// An inbound core link on which nothing (not even a keepalive) arrives for this long is
/// closed: its sender closes it after 10 s idle, or its host is gone without a word.
const LINK_SILENT: Duration = Duration::from_secs(10);

/// What every core needs to make and accept core links (all `Send`): this broker's id and
/// inter-broker address, its peers' addresses and the mutual TLS between them.
#[derive(Clone)]
pub struct LinkBoot {
    pub id: u64,
    pub peers: Vec<(u64, SocketAddr)>,
    pub listen: SocketAddr,
    pub tls: Option<PeerTls>,
}

/// One core's links to and from the cores of its peers.
pub struct Links {
    /// This broker's id.
    id: u64,
    listen: SocketAddr,
    addrs: BTreeMap<u64, SocketAddr>,
    tls: Option<PeerTls>,
    /// This core's outbound links, by (peer broker, its core).
    out: RefCell<BTreeMap<(u64, u16), Rc<Peer>>>,
    /// Hands a partition message from a peer to its replica (`ReplicaHost::raft_in`).
    deliver: Box<dyn Fn(PartitionMessage)>,
}

impl Links {
    /// This core's links (none made yet).
    pub fn new(boot: LinkBoot, deliver: Box<dyn Fn(PartitionMessage)>) -> Rc<Links> {
        Rc::new(Links {
            id: boot.id,
            listen: boot.listen,
            addrs: boot.peers.into_iter().collect(),
            tls: boot.tls,
            out: RefCell::new(BTreeMap::new()),
            deliver,
        })
    }

    /// Queues a partition message for core `core` of broker `to` on this core's link to it
    /// (made now if there is none); gives it back if `to` is no peer or declined the link.
    pub fn send(&self, to: u64, core: u16, m: PartitionMessage) -> Option<PartitionMessage> {
        match self.link(to, core) {
            Some(link) => {
                link.send(&Frame::Partition(m));
                None
            }
            None => Some(m),
        }
    }

    /// This core's link to core `core` of broker `to`, made now if there is none (or the one
    /// there closed, idle); `None` if `to` is no peer or declined the link.
    fn link(&self, to: u64, core: u16) -> Option<Rc<Peer>> {
        if let Some(l) = self.out.borrow().get(&(to, core)).filter(|l| !l.closed()) {
            return (!l.declined()).then(|| l.clone());
        }
        let &addr = self.addrs.get(&to)?;
        let tls = self
            .tls
            .as_ref()
            .and_then(|t| Some((t.connector.clone(), t.server_name(to)?)));
        let l = Peer::new(to, addr, self.listen, self.id, tls, Some(core));
        glommio::spawn_local(l.clone().run()).detach();
        self.out.borrow_mut().insert((to, core), l.clone());
        Some(l)
    }

    /// Serves a core link core 0 handed to this core (core 0 read its hello): answers the
    /// hello, authenticates the link and reads its frames. Anything but partition messages
    /// and keepalives closes it.
    pub async fn serve(self: Rc<Self>, fd: OwnedFd, addr: Option<SocketAddr>) {
        // SAFETY: `fd` is a connected TCP socket this core now owns.
        let mut stream = unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) };
        if let Err(e) = stream.write_all(&[LinkHello::FIRST]).await {
            return debug!(peer = ?addr, error = %e, "answering a core link's hello");
        }
        let Some(accepted) = authenticate(stream, self.tls.as_ref(), self.id).await else {
            return;
        };
        let links = self.clone();
        serve_frames(accepted, Some(LINK_SILENT), move |frame, _| match frame {
            Frame::Partition(m) => {
                if m.msg.to != links.id || !links.addrs.contains_key(&m.msg.from) {
                    return Err(format!(
                        "a partition message from broker {} to broker {} on a core link",
                        m.msg.from, m.msg.to
                    ));
                }
                (links.deliver)(m);
                Ok(())
            }
            Frame::Ping(_) => Ok(()),
            _ => Err("a frame other than a partition message or a keepalive on a core link".into()),
        })
        .await;
    }

    /// How many links this core has open (made, not closed idle, not declined by the peer).
    pub fn open(&self) -> usize {
        self.out
            .borrow()
            .values()
            .filter(|l| !l.closed() && !l.declined())
            .count()
    }

    /// Makes this core's links to `peer` again (core 0 took it to be down: `Peer::reconnect`
    /// says why).
    pub fn reconnect(&self, peer: u64) {
        for link in self
            .out
            .borrow()
            .range((peer, 0)..=(peer, u16::MAX))
            .map(|(_, l)| l)
        {
            link.reconnect();
        }
    }
}
