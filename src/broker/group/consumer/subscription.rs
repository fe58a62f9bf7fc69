//! What a consumer-protocol member subscribes to: topic names, a regular expression
//! (KIP-848's `SubscribedTopicRegex`), or both, and the topics that makes it read.
//!
//! Kafka compiles the regex with RE2J; the `regex` crate speaks the same RE2 syntax (no
//! look-around, no back-references; RE2J's `\Q...\E` quoting is the one form it lacks).
//! Like Kafka, the whole topic name must match, and internal topics are candidates too
//! (franz-go wraps its patterns in `.*` for that reason and adopts an internal topic it is
//! given). A regex is resolved for the whole group (`Regexes`) at each heartbeat of a member
//! that uses it, against the topics the broker has then, so a topic created later joins the
//! subscription of every member with that regex within a heartbeat interval; with the
//! authorizer on, only topics the heartbeating member's principal may DESCRIBE match (Kafka
//! 4's check; a group's members normally share a principal).

use std::collections::{BTreeMap, BTreeSet};

use regex::{Regex, RegexBuilder};

use super::{ConsumerGroup, Heartbeat, Topics};

/// Bounds the compiled program of a member's regex, as a request's bytes are bounded: a
/// pathological pattern is refused (INVALID_REGULAR_EXPRESSION) rather than given memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// The topic names it asked for.
    pub names: BTreeSet<String>,
    /// Its regex as sent, if any.
    pub regex: Option<String>,
}

/// Compiles a member's regex as Kafka matches it: the whole topic name.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            format!("SubscribedTopicRegex {pattern:?} is not a valid RE2 regular expression: {e}")
        })
}

/// A group's regexes, resolved: pattern → (compiled, the topics it matched last). Resolved
/// per group as Kafka does, not per member: when one member's heartbeat finds a new topic,
/// every member with that regex subscribes to it at once, so the assignor spreads it over all
/// of them instead of giving it to the first and revoking it later.
#[derive(Debug, Clone, Default)]
pub struct Regexes {
    resolved: BTreeMap<String, (Regex, BTreeSet<String>)>,
}

impl Regexes {
    /// Resolves `pattern` against `topics` (those `describable` lets it see; `None` = all);
    /// `compiled` is `pattern` already compiled, if at hand.
    pub fn resolve(
        &mut self,
        pattern: &str,
        compiled: Option<Regex>,
        topics: &Topics,
        describable: Option<&BTreeSet<String>>,
    ) {
        if !self.resolved.contains_key(pattern) {
            // A stored pattern was valid when taken; if it no longer compiles it matches nothing.
            let Some(re) = compiled.or_else(|| compile(pattern).ok()) else {
                return;
            };
            self.resolved
                .insert(pattern.to_string(), (re, BTreeSet::new()));
        }
        let (re, matched) = self.resolved.get_mut(pattern).expect("inserted above");
        *matched = topics
            .keys()
            .filter(|t| describable.is_none_or(|d| d.contains(*t)))
            .filter(|t| re.is_match(t))
            .cloned()
            .collect();
    }

    /// What `sub` reads: its names (existing or not: a named topic is assigned once it
    /// exists) and what its regex matched when last resolved.
    pub fn topics_of(&self, sub: &Subscription) -> BTreeSet<String> {
        let mut out = sub.names.clone();
        if let Some((_, matched)) = sub.regex.as_ref().and_then(|r| self.resolved.get(r)) {
            out.extend(matched.iter().cloned());
        }
        out
    }

    /// Whether `pattern` was resolved since the group was loaded (then it compiled).
    pub fn knows(&self, pattern: &str) -> bool {
        self.resolved.contains_key(pattern)
    }

    /// Forgets the patterns no member uses any more.
    pub fn retain_used<'a>(&mut self, used: impl Iterator<Item = &'a Subscription>) {
        let used: BTreeSet<&str> = used.filter_map(|s| s.regex.as_deref()).collect();
        self.resolved.retain(|p, _| used.contains(p.as_str()));
    }
}

impl ConsumerGroup {
    /// After member `id`'s heartbeat `hb` took its subscription: resolves its regex
    /// (`compiled` if the heartbeat brought a new one) for the group, and the subscribed topics
    /// of `id` and of every member with that regex; whether any member's changed.
    pub(super) fn resolve_subscriptions(
        &mut self,
        id: &str,
        hb: &Heartbeat,
        compiled: Option<Regex>,
        pattern_changed: bool,
        topics: &Topics,
    ) -> bool {
        let pattern = self
            .members
            .get(id)
            .and_then(|m| m.subscription.regex.clone());
        let pattern = pattern.as_deref();
        // A names-only member that sent no subscription keeps what it had: nothing to resolve.
        if pattern.is_none()
            && hb.subscribed_topic_names.is_none()
            && hb.subscribed_topic_regex.is_none()
        {
            return false;
        }
        if pattern_changed {
            self.regexes
                .retain_used(self.members.values().map(|m| &m.subscription));
        }
        if let Some(p) = pattern {
            self.regexes
                .resolve(p, compiled, topics, hb.describable.as_ref());
        }
        let mut changed = false;
        for m in self.members.values_mut() {
            if m.id == id || (pattern.is_some() && m.subscription.regex.as_deref() == pattern) {
                let subscribed = self.regexes.topics_of(&m.subscription);
                if subscribed != m.subscribed {
                    m.subscribed = subscribed;
                    changed = true;
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(names: &[&str]) -> Topics {
        names.iter().map(|n| (n.to_string(), 1)).collect()
    }

    fn sub(names: &[&str], regex: Option<&str>) -> Subscription {
        Subscription {
            names: names.iter().map(|n| n.to_string()).collect(),
            regex: regex.map(str::to_string),
        }
    }

    #[test]
    fn a_regex_matches_whole_names_and_only_describable_topics() {
        let all = topics(&["orders", "orders-v2", "old-orders", "__consumer_offsets"]);
        let mut r = Regexes::default();
        let s = sub(&[], Some("orders.*"));
        r.resolve("orders.*", None, &all, None);
        let got: Vec<String> = r.topics_of(&s).into_iter().collect();
        assert_eq!(got, ["orders", "orders-v2"], "the whole name must match");

        let visible: BTreeSet<String> = ["orders-v2".to_string()].into();
        r.resolve("orders.*", None, &all, Some(&visible));
        let got: Vec<String> = r.topics_of(&s).into_iter().collect();
        assert_eq!(got, ["orders-v2"]);

        r.resolve(".*offsets", None, &all, None);
        assert!(r
            .topics_of(&sub(&[], Some(".*offsets")))
            .contains("__consumer_offsets"));
        r.retain_used([&s].into_iter());
        assert!(!r.knows(".*offsets") && r.knows("orders.*"));
    }

    #[test]
    fn bad_and_oversized_patterns_are_refused() {
        assert!(compile("orders(").is_err());
        assert!(compile("(?<=a)b").is_err(), "look-behind is not RE2");
        assert!(compile("(a{1000}){1000}").is_err(), "past the size limit");
        assert!(compile("[a-z]+\\.events").is_ok());
    }

    #[test]
    fn names_and_a_regex_together() {
        let mut r = Regexes::default();
        let s = sub(&["named"], Some("t[0-9]"));
        assert_eq!(r.topics_of(&s).len(), 1, "unresolved: the names alone");
        r.resolve(
            "t[0-9]",
            None,
            &topics(&["t1", "t22", "named", "other"]),
            None,
        );
        let got: Vec<String> = r.topics_of(&s).into_iter().collect();
        assert_eq!(got, ["named", "t1"]);
    }
}
