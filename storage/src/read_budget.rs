//! The byte budget for read chunks shared by every log of a core (owned by its
//! [`BatchCache`](crate::BatchCache), filled by each log's `reader::ReadCache`): a FIFO of
//! strong references to the chunks, oldest evicted first whatever log it belongs to, and
//! chunks idle for 30 s released by the retention tick.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// One read chunk: its data once read (or the read's error), the readers waiting for it.
#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) data: RefCell<Option<std::result::Result<Bytes, String>>>,
    pub(crate) waiters: RefCell<Vec<Waker>>,
    /// File position up to which this chunk's data is valid.
    pub(crate) valid_to: u64,
    /// Bytes of this chunk counted as read ahead and not yet asked for by a reader
    /// (`ReadBudget::ahead_bytes`); 0 once a reader took it, or if one asked for it.
    pub(crate) ahead: Cell<usize>,
}

impl Slot {
    /// Sets the chunk's data (or its read's error) and wakes the readers waiting for it.
    pub(crate) fn fill(&self, data: std::result::Result<Bytes, String>) {
        *self.data.borrow_mut() = Some(data);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        waiters.into_iter().for_each(Waker::wake);
    }

    /// The chunk's data once its read has ended (or the read's error).
    pub(crate) async fn wait(&self) -> std::result::Result<Bytes, String> {
        std::future::poll_fn(|cx| {
            if let Some(r) = self.data.borrow().as_ref() {
                return std::task::Poll::Ready(r.clone());
            }
            self.waiters.borrow_mut().push(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }
}

/// Chunks unused for this long are released by [`ReadBudget::expire`].
const IDLE_CHUNK: Duration = Duration::from_secs(30);

/// The read chunks of every log of a core, under one byte budget: a FIFO of strong
/// references, oldest evicted first.
pub(crate) struct ReadBudget {
    capacity_bytes: usize,
    used_bytes: Cell<usize>,
    /// Of `used_bytes`, what was read ahead and no reader has asked for yet. Read-ahead stops
    /// at half the capacity: with many partitions read at once (8 per core at 16 MiB each
    /// filled the whole budget), the window of one would evict the chunks the others were
    /// about to take, and every chunk was read twice or more.
    ahead_bytes: Cell<usize>,
    chunks: RefCell<VecDeque<(Rc<Slot>, usize, Instant)>>,
}

impl ReadBudget {
    pub(crate) fn new(capacity_bytes: usize) -> ReadBudget {
        ReadBudget {
            capacity_bytes,
            used_bytes: Cell::new(0),
            ahead_bytes: Cell::new(0),
            chunks: RefCell::new(VecDeque::new()),
        }
    }

    pub(crate) fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    pub(crate) fn used_bytes(&self) -> usize {
        self.used_bytes.get()
    }

    /// Takes a chunk in (`ahead`: read ahead, not asked for), evicting the oldest past the
    /// capacity.
    pub(crate) fn admit(&self, slot: Rc<Slot>, len: usize, ahead: bool) {
        if ahead {
            slot.ahead.set(len);
            self.ahead_bytes.set(self.ahead_bytes.get() + len);
        }
        let mut chunks = self.chunks.borrow_mut();
        chunks.push_back((slot, len, Instant::now()));
        self.used_bytes.set(self.used_bytes.get() + len);
        while self.used_bytes.get() > self.capacity_bytes {
            let Some((old, old_len, _)) = chunks.pop_front() else {
                break;
            };
            self.taken(&old);
            self.used_bytes.set(self.used_bytes.get() - old_len);
        }
    }

    /// Lets go of a chunk whose read failed (it holds no data): its bytes no longer count.
    pub(crate) fn release(&self, slot: &Rc<Slot>) {
        let mut chunks = self.chunks.borrow_mut();
        if let Some(i) = chunks.iter().position(|(s, _, _)| Rc::ptr_eq(s, slot)) {
            if let Some((old, len, _)) = chunks.remove(i) {
                self.taken(&old);
                self.used_bytes.set(self.used_bytes.get() - len);
            }
        }
    }

    /// A reader asked for this chunk (or it left the budget): it no longer counts as read
    /// ahead.
    pub(crate) fn taken(&self, slot: &Slot) {
        let ahead = slot.ahead.replace(0);
        self.ahead_bytes.set(self.ahead_bytes.get() - ahead);
    }

    /// May another chunk be read ahead?
    pub(crate) fn ahead_room(&self) -> bool {
        self.ahead_bytes.get() < self.capacity_bytes / 2
    }

    /// Releases the chunks read more than [`IDLE_CHUNK`] ago (readers still holding slices
    /// of them keep those alive until they are sent).
    pub(crate) fn expire(&self, now: Instant) {
        let mut chunks = self.chunks.borrow_mut();
        while let Some((slot, len, at)) = chunks.front() {
            if now.saturating_duration_since(*at) < IDLE_CHUNK {
                break;
            }
            self.taken(slot);
            self.used_bytes.set(self.used_bytes.get() - len);
            chunks.pop_front();
        }
    }
}
