//! Whether each peer broker is up, as far as this broker can tell (docs/replication.md,
//! "Hibernating partition groups"): the time a frame from it last arrived. Every connection
//! carries a keepalive when it has nothing else to send (`net::KEEPALIVE`), so a peer is heard
//! from even while every partition group between the two brokers hibernates and sends
//! nothing. A peer silent for `PEER_SILENT` is taken to be down, and heard from again, up;
//! each change wakes the hibernating groups with a replica on it (`PeerHooks::peer_changed`):
//! their followers then elect a new leader as Raft would without hibernation, and a peer
//! back up gets its leaders' heartbeats at once. A silent peer's connection is also made
//! again (`Peer::reconnect`): one that carried frames into a cut link would stay mute for
//! seconds after the link heals, behind TCP's retransmission backoff.

use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::info;

use super::net::KEEPALIVE;
use super::Peers;

/// How long a peer may stay silent before it is taken to be down: ten keepalives, the
/// partition groups' shortest election timeout (a broker busy creating many partitions at
/// once went silent for half a second).
pub const PEER_SILENT: Duration = Duration::from_secs(1);

impl Peers {
    /// A frame from `peer` arrived (on core 0, where the connections are read).
    pub(super) fn heard_from(&self, peer: u64) {
        let Some(p) = self.peers.get(&peer) else {
            return;
        };
        p.heard.set(Some(Instant::now()));
        if !p.up.replace(true) {
            info!(peer, "peer broker up");
            (self.hooks.peer_changed)(peer, true);
        }
    }

    /// Takes a silent peer to be down: checked every `KEEPALIVE`.
    pub(super) async fn watch_peers(self: Rc<Self>) {
        loop {
            glommio::timer::sleep(KEEPALIVE).await;
            let now = Instant::now();
            for p in self.peers.values() {
                let silent = p
                    .heard
                    .get()
                    .map_or(Duration::MAX, |at| now.duration_since(at));
                if p.up.get() && silent > PEER_SILENT {
                    p.up.set(false);
                    info!(
                        peer = p.id,
                        silent_ms = silent.as_millis() as u64,
                        "peer broker silent: taken to be down"
                    );
                    p.reconnect();
                    (self.hooks.peer_changed)(p.id, false);
                }
            }
        }
    }
}
