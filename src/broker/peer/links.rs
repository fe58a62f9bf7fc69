//! Core links (docs/replication.md §5.2): a partition group's Raft messages go from the core
//! of one replica straight to the core of another, over a connection of that pair of cores,
//! instead of through core 0 at both ends.
//!
//! Every core keeps its own outbound connections, one per (peer broker, peer core) it has
//! sent to, made on first use and written by a sender task each (`net::Peer`, as core 0's
//! control connection is, with its keepalives). Each opens with a `LinkHello` naming the core
//! it is for, before any TLS byte. The peer's core 0 accepts it on the one inter-broker port,
//! peeks at the hello and hands the socket to that core (`inbound`, `PeerHooks::link`), which
//! answers the hello with its first byte, authenticates the link as core 0 would and reads
//! its frames (`Links::serve`). A core link carries
//! partition messages and keepalives, nothing else: the metadata group, forwarded requests
//! and calls stay on core 0's connections.
//!
//! Whether a peer is up is still core 0's to say (`liveness`). A core watches its own links:
//! a peer that stops being heard on the links into this core has its links from this core
//! made again, for the reason `Peer::reconnect` gives.
//!
//! Used only towards peers that registered `peer_links` (`BrokerInfo`): an older broker's
//! partition messages keep going through core 0 (`Shard::send_raft`), as do those of a link
//! whose hello got no answer (a peer downgraded to a weir without core links still has the
//! registration of the newer one).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;
use std::time::Instant;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use tracing::{debug, info};
use weir::protocol::peer::{LinkHello, PartitionMessage};

use super::inbound::{authenticate, serve_frames};
use super::liveness::PEER_SILENT;
use super::net::{Frame, Peer, KEEPALIVE};
use super::peer_tls::PeerTls;

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
    /// When each peer was last heard from on a link into this core (cleared once it is taken
    /// to be silent, until it is heard again).
    heard: RefCell<BTreeMap<u64, Instant>>,
    /// Hands a partition message from a peer to its replica (`Shard::raft_in`).
    deliver: Box<dyn Fn(PartitionMessage)>,
}

impl Links {
    /// This core's links; `start` begins watching them.
    pub fn new(boot: LinkBoot, deliver: Box<dyn Fn(PartitionMessage)>) -> Rc<Links> {
        Rc::new(Links {
            id: boot.id,
            listen: boot.listen,
            addrs: boot.peers.into_iter().collect(),
            tls: boot.tls,
            out: RefCell::new(BTreeMap::new()),
            heard: RefCell::new(BTreeMap::new()),
            deliver,
        })
    }

    pub fn start(self: &Rc<Self>) {
        glommio::spawn_local(self.clone().watch()).detach();
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

    /// This core's link to core `core` of broker `to`, made now if there is none; `None` if
    /// `to` is no peer or declined the link.
    fn link(&self, to: u64, core: u16) -> Option<Rc<Peer>> {
        if let Some(l) = self.out.borrow().get(&(to, core)) {
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

    /// Serves a core link core 0 handed to this core: reads its hello (core 0 peeked at it)
    /// and answers it, authenticates the link and reads its frames. Anything but partition
    /// messages and keepalives closes it.
    pub async fn serve(self: Rc<Self>, fd: OwnedFd, addr: Option<SocketAddr>) {
        // SAFETY: `fd` is a connected TCP socket this core now owns.
        let mut stream = unsafe { TcpStream::from_raw_fd(fd.into_raw_fd()) };
        let mut hello = [0u8; LinkHello::LEN];
        let answered = async {
            stream.read_exact(&mut hello).await?;
            stream.write_all(&[LinkHello::FIRST]).await
        };
        if let Err(e) = answered.await {
            return debug!(peer = ?addr, error = %e, "answering a core link's hello");
        }
        let Some(accepted) = authenticate(stream, self.tls.as_ref(), self.id).await else {
            return;
        };
        let links = self.clone();
        serve_frames(accepted, move |frame, from| {
            match frame {
                Frame::Partition(m) => {
                    if m.msg.to != links.id || !links.addrs.contains_key(&m.msg.from) {
                        return Err(format!(
                            "a partition message from broker {} to broker {} on a core link",
                            m.msg.from, m.msg.to
                        ));
                    }
                    (links.deliver)(m);
                }
                Frame::Ping(_) => {}
                _ => {
                    return Err(
                        "a frame other than a partition message or a keepalive on a core link"
                            .into(),
                    )
                }
            }
            if let Some(peer) = from.filter(|p| links.addrs.contains_key(p)) {
                links.heard.borrow_mut().insert(peer, Instant::now());
            }
            Ok(())
        })
        .await;
    }

    /// Every `KEEPALIVE`: a peer not heard on the links into this core for `PEER_SILENT`
    /// has this core's links to it made again.
    async fn watch(self: Rc<Self>) {
        loop {
            glommio::timer::sleep(KEEPALIVE).await;
            let now = Instant::now();
            let silent: Vec<u64> = self
                .heard
                .borrow()
                .iter()
                .filter(|(_, &at)| now.duration_since(at) > PEER_SILENT)
                .map(|(&p, _)| p)
                .collect();
            for peer in silent {
                self.heard.borrow_mut().remove(&peer);
                let made_again = self.reconnect(peer);
                if made_again > 0 {
                    info!(
                        peer,
                        links = made_again,
                        "peer silent on this core's links: connecting again"
                    );
                }
            }
        }
    }

    /// Makes this core's links to `peer` again (a peer silent on them, or taken to be down
    /// or up again by core 0: `Peer::reconnect` says why); how many.
    pub fn reconnect(&self, peer: u64) -> usize {
        let out = self.out.borrow();
        let links = out.range((peer, 0)..=(peer, u16::MAX));
        links.map(|(_, link)| link.reconnect()).count()
    }
}
