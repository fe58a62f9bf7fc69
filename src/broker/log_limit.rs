//! Rate-limited log lines: what an unauthenticated or misbehaving peer can make the broker log
//! (refused connections, failed logins, accept errors at the open-file limit) is logged at
//! most once per interval, with the count of the lines left out since.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// One kind of log line, at most once per `every` (per core: it is not `Sync`).
pub struct LogLimit {
    every: Duration,
    last: Cell<Option<Instant>>,
    suppressed: Cell<u64>,
}

impl LogLimit {
    pub const fn new(every: Duration) -> LogLimit {
        LogLimit {
            every,
            last: Cell::new(None),
            suppressed: Cell::new(0),
        }
    }

    /// `Some(n)` when the line may be logged now (`n`: lines left out since the last one);
    /// `None` when it is to be left out.
    pub fn allow(&self) -> Option<u64> {
        let now = Instant::now();
        if self.last.get().is_some_and(|t| now - t < self.every) {
            self.suppressed.set(self.suppressed.get() + 1);
            return None;
        }
        self.last.set(Some(now));
        Some(self.suppressed.replace(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_left_out() {
        let l = LogLimit::new(Duration::from_secs(3600));
        assert_eq!(l.allow(), Some(0));
        assert_eq!(l.allow(), None);
        assert_eq!(l.allow(), None);
        l.last.set(Some(Instant::now() - Duration::from_secs(3601)));
        assert_eq!(l.allow(), Some(2));
    }
}
