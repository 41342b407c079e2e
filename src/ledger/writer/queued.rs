//! Queued-bytes caps: the bytes of fair-share requests not yet finished (every state but
//! `done`, `failed` and `cancelled`: held, queued, accepted, submitted, running and riding), per
//! group and per user of a station, and the pure check a new request passes before it is
//! recorded. Caps are set per share-tree node (`[targets."path"] max_queued_bytes`, the sum of
//! the node's groups) and per user (`[limits] max_queued_bytes_per_user`, one tally per
//! (station, user): one station's `alice` is not another's). Priority classes are neither
//! counted nor capped: data taking is never refused for the backlog of analysis.
//!
//! A request counts from its acceptance to its end, whatever it does in between, so no move
//! between unfinished states changes a total: a rider counts although it takes no transfer of
//! its own (it could otherwise be promoted past the cap when its carrier is cancelled, with no
//! check, since it is acknowledged already), a request at the MSS counts as one waiting in the
//! broker, and a retry changes nothing. Issue 37 found the gap: riders, counted at their check
//! and never after, let one user queue 13 GB against a 3 GB cap by cancelling carriers.

use std::collections::HashMap;

use super::state::Txn;
use crate::domain::{GroupId, GroupKind, PolicySettings, RequestState};
use crate::ledger::QueuedCapRefused;

/// Whether a request in `state` is counted: not finished.
pub(super) fn counted(state: RequestState) -> bool {
    !state.is_terminal()
}

/// Whose bytes they are: the per-user cap is kept per user of a station.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Owner<'a> {
    pub station: &'a str,
    pub user: &'a str,
}

/// The tallies (bytes not finished) the caps are checked against. Wide: each size is up to
/// `limits.max_size_bytes` (i64::MAX), and with a cap unset (or lowered by a reload) a tally can
/// pass u64. Exact, so a rollback's journal (`Undo::Queued`) takes each change back exactly; a
/// u64 saturated there and lost what went past it.
#[derive(Default, Debug, Clone, PartialEq)]
pub(super) struct QueuedBytes {
    /// Per group id.
    pub by_group: Vec<u128>,
    /// Per station, then per user name (only users with bytes counted, only stations with such
    /// users).
    pub by_user: HashMap<String, HashMap<String, u128>>,
}

impl QueuedBytes {
    /// Add (`delta` > 0) or take away bytes of `owner` in group `g`.
    pub fn add(&mut self, g: GroupId, owner: Owner<'_>, delta: i128) {
        if delta == 0 {
            return;
        }
        if self.by_group.len() <= g.0 {
            self.by_group.resize(g.0 + 1, 0);
        }
        // Past u128 takes 2^65 requests of the largest size; below 0 only bytes never counted.
        let step = |v: u128| match u128::try_from(delta) {
            Ok(more) => v.saturating_add(more),
            Err(_) => v.saturating_sub(delta.unsigned_abs()),
        };
        self.by_group[g.0] = step(self.by_group[g.0]);
        let users = match self.by_user.get_mut(owner.station) {
            Some(users) => users,
            None => self.by_user.entry(owner.station.to_string()).or_default(),
        };
        let u = match users.get_mut(owner.user) {
            Some(u) => u,
            None => users.entry(owner.user.to_string()).or_default(),
        };
        *u = step(*u);
        if *u == 0 {
            users.remove(owner.user);
            if users.is_empty() {
                self.by_user.remove(owner.station);
            }
        }
    }

    fn group(&self, g: GroupId) -> u128 {
        self.by_group.get(g.0).copied().unwrap_or(0)
    }

    /// Bytes counted under tree node `node`.
    pub fn node(&self, policy: &PolicySettings, node: usize) -> u128 {
        (policy.tree.nodes[node].leaves.iter())
            .map(|&g| self.group(g))
            .fold(0u128, u128::saturating_add)
    }

    pub fn user(&self, owner: Owner<'_>) -> u128 {
        (self.by_user.get(owner.station))
            .and_then(|users| users.get(owner.user))
            .copied()
            .unwrap_or(0)
    }

    /// Every (station, user) with bytes counted, sorted (tests compare memory with the rows).
    #[cfg(test)]
    pub fn users_sorted(&self) -> Vec<(&str, &str, u128)> {
        let mut v: Vec<_> = (self.by_user.iter())
            .flat_map(|(s, users)| users.iter().map(move |(u, &b)| (s.as_str(), u.as_str(), b)))
            .collect();
        v.sort();
        v
    }
}

/// A tally as the refusal reports it (its message keeps the exact figure).
fn reported(queued: u128) -> u64 {
    u64::try_from(queued).unwrap_or(u64::MAX)
}

/// Whether a new request of `size` bytes by `owner` in group `g` would take a node or the user
/// past a cap (reaching it exactly is allowed). Nodes are checked from the top down, then the
/// user.
pub(super) fn check(
    policy: &PolicySettings,
    tally: &QueuedBytes,
    g: GroupId,
    owner: Owner<'_>,
    size: u64,
) -> Result<(), QueuedCapRefused> {
    let info = policy.group(g);
    if !matches!(info.kind, GroupKind::FairShare { .. }) {
        return Ok(());
    }
    for &n in &info.ancestors {
        let node = &policy.tree.nodes[n];
        if let Some(cap) = node.limits.max_queued_bytes {
            let queued = tally.node(policy, n);
            if queued.saturating_add(u128::from(size)) > u128::from(cap) {
                return Err(QueuedCapRefused {
                    field: format!("targets.\"{}\".max_queued_bytes", node.path),
                    message: format!(
                        "`{}` has {queued} bytes queued (in requests not finished); this \
                         request's {size} bytes would pass its max_queued_bytes of {cap}",
                        node.path
                    ),
                    queued: reported(queued),
                    cap,
                });
            }
        }
    }
    if let Some(cap) = policy.max_queued_bytes_per_user {
        let queued = tally.user(owner);
        if queued.saturating_add(u128::from(size)) > u128::from(cap) {
            let Owner { station, user } = owner;
            return Err(QueuedCapRefused {
                field: "limits.max_queued_bytes_per_user".to_string(),
                message: format!(
                    "user `{user}` of station `{station}` has {queued} bytes queued (in \
                     requests not finished); this request's {size} bytes would pass \
                     max_queued_bytes_per_user of {cap}"
                ),
                queued: reported(queued),
                cap,
            });
        }
    }
    Ok(())
}

impl Txn<'_, '_> {
    /// A request of the group at `path` moves from `from` (`None`: new) to `to`: its bytes enter
    /// the tallies when it is accepted and leave them when it ends.
    pub(super) fn queued_moved(
        &mut self,
        (path, owner, size): (&str, Owner<'_>, u64),
        from: Option<RequestState>,
        to: RequestState,
    ) {
        let Some(g) = self.policy.group_by_path(path) else {
            return;
        };
        if !matches!(self.policy.group(g).kind, GroupKind::FairShare { .. }) {
            return;
        }
        let counted = |s: Option<RequestState>| i128::from(s.is_some_and(counted));
        let delta = (counted(Some(to)) - counted(from)) * i128::from(size);
        self.st.queued_bytes(g, owner, delta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    const CONFIG: &str = r#"
[policy]
p_front = 20
p_back = 10
[shares]
"cms" = 1
"cms/a" = 1
"cms/b" = 1
"dune" = 1
[targets."cms"]
max_queued_bytes = 100
[limits]
max_queued_bytes_per_user = 70
[[priority_classes]]
access_mode = "daq"
mss_priority = 90
[mss]
adapter = "http"
url = "http://127.0.0.1:1"
"#;

    fn group(p: &PolicySettings, path: &str) -> GroupId {
        p.group_by_path(path).expect("configured group")
    }

    /// `user` of station `st1`.
    fn o(user: &str) -> Owner<'_> {
        Owner {
            station: "st1",
            user,
        }
    }

    /// A node's cap counts every group under it; reaching it exactly is allowed, one byte past
    /// is refused with the node's key and the amount queued.
    #[test]
    fn the_node_cap_holds_at_its_boundary_and_sums_its_groups() {
        let settings = Settings::parse(CONFIG, "test").expect("valid config");
        let p = &settings.policy;
        let (a, b) = (group(p, "cms/a"), group(p, "cms/b"));
        let mut t = QueuedBytes::default();
        t.add(a, o("u1"), 40);
        t.add(b, o("u2"), 50);
        assert_eq!(check(p, &t, a, o("u3"), 10), Ok(()));
        let refused = check(p, &t, b, o("u3"), 11).expect_err("one byte past the cap");
        assert_eq!(refused.field, "targets.\"cms\".max_queued_bytes");
        assert_eq!((refused.queued, refused.cap), (90, 100));
        assert!(
            refused.message.contains("90 bytes queued"),
            "{}",
            refused.message
        );
        // Another node's group is not under the cap.
        assert_eq!(check(p, &t, group(p, "dune"), o("u3"), 60), Ok(()));
        // Bytes that finish free the room again.
        t.add(b, o("u2"), -50);
        assert_eq!(check(p, &t, b, o("u3"), 60), Ok(()));
    }

    #[test]
    fn the_user_cap_holds_at_its_boundary_across_groups() {
        let settings = Settings::parse(CONFIG, "test").expect("valid config");
        let p = &settings.policy;
        let (a, dune) = (group(p, "cms/a"), group(p, "dune"));
        let mut t = QueuedBytes::default();
        t.add(a, o("alice"), 30);
        t.add(dune, o("alice"), 30);
        assert_eq!(check(p, &t, dune, o("alice"), 10), Ok(()));
        let refused = check(p, &t, dune, o("alice"), 11).expect_err("one byte past the cap");
        assert_eq!(refused.field, "limits.max_queued_bytes_per_user");
        assert_eq!((refused.queued, refused.cap), (60, 70));
        assert_eq!(check(p, &t, dune, o("bob"), 70), Ok(()));
        t.add(a, o("alice"), -30);
        t.add(dune, o("alice"), -30);
        assert!(
            t.by_user.is_empty(),
            "a user with nothing queued is forgotten, and a station with no such user"
        );
    }

    /// The user cap is per (station, user): one station's `alice` filling her cap leaves
    /// another station's `alice` her own, and the refusal names the station.
    #[test]
    fn the_user_cap_is_per_station() {
        let settings = Settings::parse(CONFIG, "test").expect("valid config");
        let p = &settings.policy;
        let dune = group(p, "dune");
        let (here, there) = (
            Owner {
                station: "st-a",
                user: "alice",
            },
            Owner {
                station: "st-b",
                user: "alice",
            },
        );
        let mut t = QueuedBytes::default();
        t.add(dune, here, 70);
        let refused = check(p, &t, dune, here, 1).expect_err("st-a's alice is at her cap");
        assert!(refused.message.contains("`st-a`"), "{}", refused.message);
        assert_eq!(check(p, &t, dune, there, 70), Ok(()));
        t.add(dune, there, 70);
        assert_eq!((t.user(here), t.user(there)), (70, 70));
        t.add(dune, here, -70);
        assert_eq!(t.users_sorted(), [("st-b", "alice", 70)]);
    }

    #[test]
    fn priority_classes_are_never_capped() {
        let settings = Settings::parse(CONFIG, "test").expect("valid config");
        let p = &settings.policy;
        let daq = p.priority_class("daq").expect("class");
        let mut t = QueuedBytes::default();
        t.add(group(p, "dune"), o("alice"), 70);
        assert_eq!(check(p, &t, daq, o("alice"), 1_000), Ok(()));
    }
}
