//! A broker whose data directory was lost rejoins its Raft groups without breaking Raft's
//! promises (docs/replication.md, "A replaced disk"; issue 40).
//!
//! Raft assumes a member never forgets what it acknowledged: the entries it stored (each
//! counted toward a commit) and the vote it gave in a term. A broker started on an empty data
//! directory — a new disk, a wiped one — has forgotten both, yet keeps its node id and its
//! place among the voters. Three things keep that safe here:
//!
//! - **The broker knows.** `DATA_DIR/meta.properties` (as Kafka's: `node.id`, `directory.id`)
//!   is written when a directory first holds this broker's state. A broker that finds neither
//!   it nor any state writes `DATA_DIR/rejoining` first (`Identity::establish`): until that
//!   marker is removed, every Raft group replica it opens is *unsure*. A new cluster's brokers
//!   all start this way, which costs them nothing (below).
//! - **An unsure replica does not count.** It grants a (pre-)vote only to a candidate whose
//!   log is empty too (a group being born: no entry can be lost), or in a group of one or an
//!   even number of voters, where any two quorums share a second member besides it (so the
//!   entries and the vote it forgot are vouched for by another). It campaigns only while its
//!   own log is empty, and declines a leadership handed to it. It becomes sure once it holds
//!   — committed — the commit index of the first leader it heard from (everything that
//!   leader could have counted it for), or once it is elected leader.
//! - **The leader stops believing it.** raft-rs keeps the highest index a follower ever
//!   acknowledged (`matched`) and ignores a rejection below it as stale, so it would keep
//!   sending the wiped follower entries past its end and a heartbeat carrying a commit index
//!   past its log — raft-rs panics there (`to_commit … is out of range`). A rejection whose
//!   hint is below `matched` is a follower that lost entries: the leader forgets `matched`
//!   and probes it again from its real end (`before_step`), and a follower clamps such a
//!   heartbeat's commit index to its own log end.
//!
//! A replica that becomes sure records it in its directory (`REJOINED`), so a restart keeps
//! it sure. When the metadata group and every partition replica on the broker are sure, core 0
//! removes the marker (`Node::watch_rejoin`).

use std::cell::Cell;
use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use raft::prelude::{Message, MessageType};
use raft::{Raft, StateRole, Storage};
use tracing::{debug, info, warn};

/// The marker a broker started on an empty data directory keeps until every replica it has
/// caught up.
pub const MARKER: &str = "rejoining";
/// In a replica's directory (the metadata group's: `DATA_DIR`, as `metadata.rejoined`): the
/// replica caught up while its broker rejoined.
pub const REJOINED: &str = "rejoined";
/// The data directory's identity, as Kafka's.
pub const META_PROPERTIES: &str = "meta.properties";

/// What the broker knows about its data directory, shared by the cores.
#[derive(Default)]
pub struct Shared {
    /// The marker's path while it exists (`None`: this directory's state is whole).
    marker: Option<PathBuf>,
    /// Whether the replicas opened now start unsure (the marker still exists).
    active: AtomicBool,
    /// Replicas on any core that are unsure now.
    unsure: AtomicUsize,
}

impl Shared {
    pub fn new(rejoining: Option<PathBuf>) -> Shared {
        Shared {
            active: AtomicBool::new(rejoining.is_some()),
            marker: rejoining,
            unsure: AtomicUsize::new(0),
        }
    }

    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    pub fn unsure(&self) -> usize {
        self.unsure.load(Ordering::Acquire)
    }

    /// Where the metadata group's replica records that it caught up (`DATA_DIR`).
    pub fn metadata_sure_file(&self) -> PathBuf {
        let dir = self.marker.as_deref().and_then(Path::parent);
        dir.unwrap_or(Path::new("."))
            .join(format!("metadata.{REJOINED}"))
    }

    /// A replica being opened: unsure while the broker rejoins, unless it caught up in an
    /// earlier life (its file `sure_file`, written by `Rejoin::record`, exists).
    pub fn open(&self, sure_file: PathBuf) -> Rejoin {
        let unsure = self.active() && !sure_file.exists();
        if unsure {
            self.unsure.fetch_add(1, Ordering::AcqRel);
        }
        Rejoin {
            sure: Cell::new(!unsure),
            target: Cell::new(None),
            refused: Cell::new(0),
            sure_file: unsure.then_some(sure_file),
        }
    }

    /// A replica closed (or become sure): no longer counted.
    pub fn done(&self, r: &Rejoin) {
        if !r.sure.replace(true) {
            self.unsure.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Removes the marker (core 0, once every replica is sure): replicas opened from now on
    /// are sure, and so is a restart.
    pub fn finish(&self) -> Result<(), String> {
        if let Some(path) = &self.marker {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
            if let Some(dir) = path.parent() {
                std::fs::File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
            }
        }
        self.active.store(false, Ordering::Release);
        Ok(())
    }
}

/// One replica's standing in its group (`Shared::open`).
pub struct Rejoin {
    sure: Cell<bool>,
    /// The commit index of the first leader heard from while unsure.
    target: Cell<Option<u64>>,
    /// Votes refused so far (logged once, then at debug).
    refused: Cell<u64>,
    /// Where an unsure replica records that it caught up (in its group's directory), so that
    /// a restart while the broker still rejoins does not make it unsure again — which, for
    /// a new cluster stopped whole within seconds of its start, would leave every replica
    /// waiting for another's vote.
    sure_file: Option<PathBuf>,
}

impl Rejoin {
    pub fn is_sure(&self) -> bool {
        self.sure.get()
    }

    /// Looks at message `m` before it is stepped into `raft` (`what` names the group in log
    /// lines). Returns false when it is to be dropped.
    pub fn before_step<S: Storage>(
        &self,
        raft: &mut Raft<S>,
        m: &mut Message,
        what: &dyn Display,
    ) -> bool {
        let last = raft.raft_log.last_index();
        if m.get_msg_type() == MessageType::MsgHeartbeat && m.commit > last {
            // Only a leader that still believes this replica holds entries it lost sends
            // this: raft-rs would panic committing past the log's end. Stepped as an append
            // at that index instead, it is rejected with this log's real end, which tells
            // the leader (`forget_lost_progress`) — an idle group sends nothing else.
            debug!(group = %what, commit = m.commit, last_index = last,
                "a heartbeat's commit index past this replica's log: answered as a rejected append");
            if !self.sure.get() {
                self.raise_target(m.commit);
            }
            m.set_msg_type(MessageType::MsgAppend);
            m.index = m.commit;
            m.log_term = m.term.max(1);
            m.commit = last;
            m.entries.clear();
            m.context.clear();
        }
        let kind = m.get_msg_type();
        if kind == MessageType::MsgAppendResponse && m.reject && raft.state == StateRole::Leader {
            forget_lost_progress(raft, m, what);
        }
        if self.sure.get() {
            return true;
        }
        match kind {
            MessageType::MsgAppend if m.term >= raft.term => {
                self.raise_target(m.commit);
            }
            MessageType::MsgSnapshot if m.term >= raft.term => {
                let index = m.get_snapshot().get_metadata().index;
                self.raise_target(index);
            }
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote => {
                let voters = raft.prs().conf().voters().ids().len();
                let empty_candidate = m.index == 0 && m.log_term == 0;
                if !(empty_candidate || voters == 1 || voters.is_multiple_of(2)) {
                    let n = self.refused.get() + 1;
                    self.refused.set(n);
                    if n == 1 {
                        info!(group = %what, candidate = m.from, candidate_last_index = m.index,
                            "rejoining after a lost data directory: not voting until this replica \
                             has caught up with a leader");
                    } else {
                        debug!(group = %what, candidate = m.from, "rejoining: vote withheld");
                    }
                    return false;
                }
            }
            MessageType::MsgTimeoutNow => {
                debug!(group = %what, from = m.from, "rejoining: a leadership offered declined");
                return false;
            }
            _ => {}
        }
        true
    }

    /// After stepping: whether this replica just became sure (the caller counts it done with
    /// `Shared::done` and logs it).
    pub fn became_sure<S: Storage>(&self, raft: &Raft<S>) -> bool {
        if self.sure.get() {
            return false;
        }
        let leader = raft.state == StateRole::Leader;
        let caught_up = self
            .target
            .get()
            .is_some_and(|t| raft.raft_log.committed >= t);
        leader || caught_up
    }

    /// Records durably that this replica caught up (after `became_sure`; blocking: run off
    /// the reactor).
    fn record(&self) -> impl FnOnce() -> Result<(), String> + Send + 'static {
        let file = self.sure_file.clone();
        move || match file {
            Some(f) => write_synced(
                &f,
                b"this replica caught up after its broker's data directory was replaced\n",
            ),
            None => Ok(()),
        }
    }

    /// The leader's commit this replica must hold before it is sure: the highest heard.
    fn raise_target(&self, index: u64) {
        self.target
            .set(Some(self.target.get().unwrap_or(0).max(index)));
    }

    /// Records in the background (off the reactor) that this replica caught up; `what`
    /// names it if that fails.
    pub fn record_in_background(&self, what: String) {
        let record = self.record();
        glommio::spawn_local(async move {
            if let Err(e) = weir_storage::io::off_reactor(record).await {
                warn!(replica = %what, error = %e,
                    "recording that the replica caught up failed (it rejoins again after a restart)");
            }
        })
        .detach();
    }

    pub fn target(&self) -> Option<u64> {
        self.target.get()
    }

    /// Before a tick: an unsure replica whose log is not empty does not start an election
    /// (its election clock is held at zero).
    pub fn hold_election<S: Storage>(&self, raft: &mut Raft<S>) {
        if !self.sure.get() && !self.may_campaign(raft) && raft.state != StateRole::Leader {
            raft.election_elapsed = 0;
        }
    }

    pub fn may_campaign<S: Storage>(&self, raft: &Raft<S>) -> bool {
        self.sure.get() || raft.raft_log.last_index() == 0
    }
}

/// On a leader: follower `m.from` rejected an append at `m.index` holding only up to
/// `m.reject_hint`, below what it had acknowledged — it lost its log. Its progress starts over
/// from its real end (raft-rs would otherwise ignore the rejection as stale and never repair
/// the follower).
fn forget_lost_progress<S: Storage>(raft: &mut Raft<S>, m: &Message, what: &dyn Display) {
    let Some(pr) = raft.mut_prs().get_mut(m.from) else {
        return;
    };
    if m.reject_hint >= pr.matched {
        return;
    }
    warn!(group = %what, follower = m.from, acknowledged = pr.matched, holds = m.reject_hint,
        "a follower lost entries it had acknowledged (a replaced or wiped disk): it is caught \
         up again from its log's end, and counts toward commits only for what it holds");
    pr.matched = 0;
    pr.become_probe();
    pr.next_idx = m.index + 1;
}

/// The data directory's identity (`DATA_DIR/meta.properties`), established before the cores
/// start.
pub struct Identity {
    pub directory_id: String,
    /// `Some(marker)`: the broker rejoins (the directory was new or replaced).
    pub rejoining: Option<PathBuf>,
}

impl Identity {
    /// Reads or writes `DATA_DIR/meta.properties` for broker `node_id`. `had_state`: whether
    /// the directory holds a cluster broker's state already (an older weir's directory, which
    /// gets its identity now and is whole).
    pub fn establish(data_dir: &Path, node_id: u64, had_state: bool) -> Result<Identity, String> {
        let props = data_dir.join(META_PROPERTIES);
        let marker = data_dir.join(MARKER);
        let ctx = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        match std::fs::read_to_string(&props) {
            Ok(text) => {
                let field = |k: &str| property(&text, k);
                let owner = field("node.id").and_then(|v| v.parse::<u64>().ok());
                if owner != Some(node_id) {
                    return Err(format!(
                        "{} belongs to broker {}, not to broker {node_id}: a data directory \
                         cannot move between brokers",
                        props.display(),
                        owner.map_or("?".to_string(), |o| o.to_string())
                    ));
                }
                let directory_id = field("directory.id")
                    .ok_or_else(|| format!("{}: no directory.id", props.display()))?;
                let rejoining = marker.exists().then_some(marker);
                if rejoining.is_some() {
                    warn!(%directory_id, "the data directory is still rejoining (a restart before every replica caught up): each replica votes only once it has");
                }
                return Ok(Identity {
                    directory_id,
                    rejoining,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ctx(&props, e)),
        }
        // 128 random-enough bits, as a topic id's.
        let directory_id = weir::metadata::new_topic_id();
        let rejoining = if had_state {
            info!(%directory_id, "data directory identified (meta.properties written)");
            None
        } else {
            // The marker first: a crash between the two leaves a directory that still
            // rejoins, never one that claims to be whole.
            write_synced(
                &marker,
                b"this broker's data directory was new: its replicas rejoin their Raft groups\n",
            )?;
            warn!(%directory_id, data_dir = %data_dir.display(),
                "the data directory holds no state: new, or replaced after a lost disk. This broker \
                 joins as a rejoining member: in each Raft group it votes only once it has caught \
                 up with a leader (in a new cluster that is at once)");
            Some(marker)
        };
        let text = format!(
            "# weir data directory\nnode.id={node_id}\ndirectory.id={directory_id}\nversion=1\n"
        );
        write_synced(&props, text.as_bytes())?;
        Ok(Identity {
            directory_id,
            rejoining,
        })
    }
}

/// A broker started without a cluster (no `node.id`) on `data_dir`: refused if the directory
/// belongs to a cluster broker (its `meta.properties`, or an older weir's metadata group log).
/// Its partitions are placed on brokers and replicated: served standalone they would take
/// writes their other replicas never see, and the broker could not rejoin its cluster after.
pub fn refuse_cluster_dir_standalone(data_dir: &Path, metadata_log: &Path) -> Result<(), String> {
    let props = data_dir.join(META_PROPERTIES);
    let owner = std::fs::read_to_string(&props)
        .ok()
        .map(|text| property(&text, "node.id").unwrap_or_else(|| "?".to_string()));
    let owner = match owner {
        Some(o) => o,
        None if metadata_log.exists() => "?".to_string(),
        None => return Ok(()),
    };
    Err(format!(
        "{} is the data directory of broker {owner} of a cluster: start it with --node-id \
         {owner} and --peers (controller.quorum.voters) as before, or give a standalone broker \
         a data directory of its own",
        data_dir.display()
    ))
}

/// The value of `key` in a properties file's `text` (`key=value` lines).
fn property(text: &str, key: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_string())
}

/// Writes `path` whole and durably (a temporary file renamed over it, the directory synced).
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let ctx = |e: std::io::Error| format!("{}: {e}", path.display());
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(ctx)?;
    f.write_all(bytes).map_err(ctx)?;
    f.sync_all().map_err(ctx)?;
    std::fs::rename(&tmp, path).map_err(ctx)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(ctx)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use raft::prelude::{ConfState, Entry, Message, MessageType};
    use raft::storage::MemStorage;
    use raft::{Raft, StateRole};

    use super::Shared;

    fn node(id: u64, voters: &[u64]) -> Raft<MemStorage> {
        let storage = MemStorage::new_with_conf_state(ConfState::from((voters.to_vec(), vec![])));
        let config = raft::Config {
            id,
            election_tick: 10,
            heartbeat_tick: 1,
            ..Default::default()
        };
        Raft::new(&config, storage, &crate::broker::raft::raft_logger()).unwrap()
    }

    fn msg(kind: MessageType, from: u64, to: u64, term: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.from = from;
        m.to = to;
        m.term = term;
        m
    }

    fn rejoining() -> Shared {
        Shared::new(Some(std::path::PathBuf::from("/nonexistent/rejoining")))
    }

    /// The wiped follower's panic: a leader that still believes it holds index 5 sends a
    /// heartbeat committing 5. It is answered with a rejection naming the real end (0).
    #[test]
    fn a_heartbeat_past_the_log_end_is_rejected_not_a_panic() {
        let mut f = node(2, &[1, 2, 3]);
        let shared = Shared::default();
        let r = shared.open("/nonexistent/rejoined".into());
        let mut hb = msg(MessageType::MsgHeartbeat, 1, 2, 3);
        hb.commit = 5;
        assert!(r.before_step(&mut f, &mut hb, &"t-0"));
        f.step(hb).unwrap();
        let answer = f
            .msgs
            .iter()
            .find(|m| m.to == 1)
            .expect("an answer to the leader");
        assert_eq!(answer.get_msg_type(), MessageType::MsgAppendResponse);
        assert!(answer.reject);
        assert_eq!(answer.reject_hint, 0);
        assert_eq!(f.raft_log.committed, 0);
    }

    /// The leader's side: a rejection below what the follower had acknowledged resets its
    /// progress, so the leader sends it the log from its real end.
    #[test]
    fn a_leader_forgets_what_a_follower_lost_and_sends_it_again() {
        let mut l = node(1, &[1, 2, 3]);
        l.become_candidate();
        l.become_leader();
        let mut es: Vec<Entry> = (0..4).map(|_| Entry::default()).collect();
        assert!(l.append_entry(&mut es));
        let last = l.raft_log.last_index();
        l.mut_prs().get_mut(2).unwrap().matched = last;
        l.mut_prs().get_mut(2).unwrap().next_idx = last + 1;
        l.msgs.clear();
        let mut rej = msg(MessageType::MsgAppendResponse, 2, 1, l.term);
        rej.reject = true;
        rej.index = last;
        rej.reject_hint = 0;
        let r = Shared::default().open("/nonexistent/rejoined".into());
        assert!(r.before_step(&mut l, &mut rej, &"t-0"));
        assert_eq!(l.prs().get(2).unwrap().matched, 0);
        l.step(rej).unwrap();
        let resend = l
            .msgs
            .iter()
            .find(|m| m.to == 2)
            .expect("the log sent again");
        assert_eq!(resend.get_msg_type(), MessageType::MsgAppend);
        assert_eq!(resend.index, 0, "sent from the follower's real end");
        assert_eq!(resend.entries[0].index, 1, "beginning with the first entry");
    }

    /// An unsure replica votes only where it cannot help elect a replica that lacks what it
    /// forgot, and becomes sure once it holds its first leader's commit.
    #[test]
    fn an_unsure_replica_withholds_its_vote_until_caught_up() {
        let shared = rejoining();
        let mut f = node(2, &[1, 2, 3]);
        let r = shared.open("/nonexistent/rejoined".into());
        assert_eq!(shared.unsure(), 1);
        let mut vote = msg(MessageType::MsgRequestPreVote, 3, 2, 2);
        vote.index = 10;
        vote.log_term = 1;
        assert!(
            !r.before_step(&mut f, &mut vote, &"t-0"),
            "a candidate with a log"
        );
        let mut born = msg(MessageType::MsgRequestVote, 3, 2, 1);
        assert!(
            r.before_step(&mut f, &mut born, &"t-0"),
            "a group being born"
        );
        let mut handed = msg(MessageType::MsgTimeoutNow, 1, 2, 1);
        assert!(!r.before_step(&mut f, &mut handed, &"t-0"));

        let mut even = node(2, &[1, 2]);
        let r2 = shared.open("/nonexistent/rejoined".into());
        let mut vote2 = vote.clone();
        assert!(
            r2.before_step(&mut even, &mut vote2, &"t-1"),
            "two voters: the other vouches"
        );

        // The leader's first append commits 1; once the replica holds it, it is sure.
        let mut append = msg(MessageType::MsgAppend, 1, 2, 1);
        append.commit = 1;
        let e = Entry {
            index: 1,
            term: 1,
            ..Default::default()
        };
        append.entries = vec![e].into();
        assert!(r.before_step(&mut f, &mut append, &"t-0"));
        assert_eq!(r.target(), Some(1));
        assert!(!r.became_sure(&f));
        f.step(append).unwrap();
        assert!(r.became_sure(&f));
        shared.done(&r);
        assert_eq!(shared.unsure(), 1, "the other replica is still unsure");
        assert!(
            r.before_step(&mut f, &mut vote.clone(), &"t-0"),
            "sure: votes as any"
        );
        assert_eq!(f.state, StateRole::Follower);
    }
}
