//! Failed SASL logins per client address, per core (`sasl.rs` counts and consults them).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Failed logins per client address on one core: past `LIMIT` within `WINDOW`, the address's
/// next logins fail without their password being checked (no CPU spent on PBKDF2 for a
/// guesser) until the window passes. Bounded: at most `MAX_ADDRESSES` addresses are tracked
/// (the oldest window is forgotten first).
pub struct LoginFailures {
    by_address: RefCell<HashMap<String, (Instant, u32)>>,
}

impl LoginFailures {
    const LIMIT: u32 = 10;
    const WINDOW: Duration = Duration::from_secs(10);
    const MAX_ADDRESSES: usize = 10_000;

    pub fn new() -> LoginFailures {
        LoginFailures {
            by_address: Default::default(),
        }
    }

    pub fn failed(&self, ip: &str) {
        let now = Instant::now();
        let mut m = self.by_address.borrow_mut();
        if m.len() >= Self::MAX_ADDRESSES && !m.contains_key(ip) {
            m.retain(|_, (since, _)| now - *since < Self::WINDOW);
            if m.len() >= Self::MAX_ADDRESSES {
                let oldest = m
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    m.remove(&k);
                }
            }
        }
        let e = m.entry(ip.to_string()).or_insert((now, 0));
        if now - e.0 >= Self::WINDOW {
            *e = (now, 0);
        }
        e.1 += 1;
    }

    pub fn throttled(&self, ip: &str) -> bool {
        self.by_address
            .borrow()
            .get(ip)
            .is_some_and(|(since, n)| *n >= Self::LIMIT && since.elapsed() < Self::WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_throttled_after_its_limit_and_others_are_not() {
        let f = LoginFailures::new();
        for _ in 0..LoginFailures::LIMIT - 1 {
            f.failed("10.0.0.1");
        }
        assert!(!f.throttled("10.0.0.1"));
        f.failed("10.0.0.1");
        assert!(f.throttled("10.0.0.1"));
        assert!(!f.throttled("10.0.0.2"));
    }
}
