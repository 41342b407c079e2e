//! Queued-bytes caps: the bytes of fair-share requests not yet at the MSS (states `held`,
//! `queued`, `accepted`; a retry back in `accepted` counts again), per group and per user, and
//! the pure check a new request passes before it is recorded. Caps are set per share-tree node
//! (`[targets."path"] max_queued_bytes`, the sum of the node's groups) and per user (`[limits]
//! max_queued_bytes_per_user`). Priority classes are neither counted nor capped: data taking is
//! never refused for the backlog of analysis.

use std::collections::HashMap;

use super::state::Txn;
use crate::domain::{GroupId, GroupKind, PolicySettings, RequestState};
use crate::ledger::QueuedCapRefused;

/// Whether a request in `state` is counted: in the broker, not yet at the MSS.
pub(super) fn before_mss(state: RequestState) -> bool {
    matches!(
        state,
        RequestState::Held | RequestState::Queued | RequestState::Accepted
    )
}

/// The tallies (bytes not yet at the MSS) the caps are checked against. Wide: each size is up
/// to `limits.max_size_bytes` (i64::MAX), and retries bring back before the MSS requests
/// accepted while others were at the MSS, so a tally can pass u64 with every acceptance under
/// its cap. Exact, so a rollback's journal (`Undo::Queued`) takes each change back exactly;
/// a u64 saturated there and lost what went past it.
#[derive(Default, Debug, Clone, PartialEq)]
pub(super) struct QueuedBytes {
    /// Per group id.
    pub by_group: Vec<u128>,
    /// Per user name (only users with bytes counted).
    pub by_user: HashMap<String, u128>,
}

impl QueuedBytes {
    /// Add (`delta` > 0) or take away bytes of `user` in group `g`.
    pub fn add(&mut self, g: GroupId, user: &str, delta: i128) {
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
        let u = self.by_user.entry(user.to_string()).or_default();
        *u = step(*u);
        if *u == 0 {
            self.by_user.remove(user);
        }
    }

    fn group(&self, g: GroupId) -> u128 {
        self.by_group.get(g.0).copied().unwrap_or(0)
    }

    /// Bytes queued under tree node `node`.
    pub fn node(&self, policy: &PolicySettings, node: usize) -> u128 {
        (policy.tree.nodes[node].leaves.iter())
            .map(|&g| self.group(g))
            .fold(0u128, u128::saturating_add)
    }

    pub fn user(&self, user: &str) -> u128 {
        self.by_user.get(user).copied().unwrap_or(0)
    }
}

/// A tally as the refusal reports it (its message keeps the exact figure).
fn reported(queued: u128) -> u64 {
    u64::try_from(queued).unwrap_or(u64::MAX)
}

/// Whether a new request of `size` bytes by `user` in group `g` would take a node or the user
/// past a cap (reaching it exactly is allowed). Nodes are checked from the top down, then the
/// user.
pub(super) fn check(
    policy: &PolicySettings,
    tally: &QueuedBytes,
    g: GroupId,
    user: &str,
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
                        "`{}` has {queued} bytes queued before the MSS; this request's {size} \
                         bytes would pass its max_queued_bytes of {cap}",
                        node.path
                    ),
                    queued: reported(queued),
                    cap,
                });
            }
        }
    }
    if let Some(cap) = policy.max_queued_bytes_per_user {
        let queued = tally.user(user);
        if queued.saturating_add(u128::from(size)) > u128::from(cap) {
            return Err(QueuedCapRefused {
                field: "limits.max_queued_bytes_per_user".to_string(),
                message: format!(
                    "user `{user}` has {queued} bytes queued before the MSS; this request's \
                     {size} bytes would pass max_queued_bytes_per_user of {cap}"
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
    /// or leave the tallies as it enters or leaves the states before the MSS.
    pub(super) fn queued_moved(
        &mut self,
        (path, user, size): (&str, &str, u64),
        from: Option<RequestState>,
        to: RequestState,
    ) {
        let Some(g) = self.policy.group_by_path(path) else {
            return;
        };
        if !matches!(self.policy.group(g).kind, GroupKind::FairShare { .. }) {
            return;
        }
        let counted = |s: Option<RequestState>| i128::from(s.is_some_and(before_mss));
        let delta = (counted(Some(to)) - counted(from)) * i128::from(size);
        self.st.queued_bytes(g, user, delta);
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

    /// A node's cap counts every group under it; reaching it exactly is allowed, one byte past
    /// is refused with the node's key and the amount queued.
    #[test]
    fn the_node_cap_holds_at_its_boundary_and_sums_its_groups() {
        let settings = Settings::parse(CONFIG, "test").expect("valid config");
        let p = &settings.policy;
        let (a, b) = (group(p, "cms/a"), group(p, "cms/b"));
        let mut t = QueuedBytes::default();
        t.add(a, "u1", 40);
        t.add(b, "u2", 50);
        assert_eq!(check(p, &t, a, "u3", 10), Ok(()));
        let refused = check(p, &t, b, "u3", 11).expect_err("one byte past the cap");
        assert_eq!(refused.field, "targets.\"cms\".max_queued_bytes");
        assert_eq!((refused.queued, refused.cap), (90, 100));
        assert!(
            refused.message.contains("90 bytes queued"),
            "{}",
            refused.message
        );
        // Another node's group is not under the cap.
        assert_eq!(check(p, &t, group(p, "dune"), "u3", 60), Ok(()));
        // Bytes that reach the MSS (or finish) free the room again.
        t.add(b, "u2", -50);
        assert_eq!(check(p, &t, b, "u3", 60), Ok(()));
    }

    #[test]
    fn the_user_cap_holds_at_its_boundary_across_groups() {
        let settings = Settings::parse(CONFIG, "test").expect("valid config");
        let p = &settings.policy;
        let (a, dune) = (group(p, "cms/a"), group(p, "dune"));
        let mut t = QueuedBytes::default();
        t.add(a, "alice", 30);
        t.add(dune, "alice", 30);
        assert_eq!(check(p, &t, dune, "alice", 10), Ok(()));
        let refused = check(p, &t, dune, "alice", 11).expect_err("one byte past the cap");
        assert_eq!(refused.field, "limits.max_queued_bytes_per_user");
        assert_eq!((refused.queued, refused.cap), (60, 70));
        assert_eq!(check(p, &t, dune, "bob", 70), Ok(()));
        t.add(a, "alice", -30);
        t.add(dune, "alice", -30);
        assert!(
            t.by_user.is_empty(),
            "a user with nothing queued is forgotten"
        );
    }

    #[test]
    fn priority_classes_are_never_capped() {
        let settings = Settings::parse(CONFIG, "test").expect("valid config");
        let p = &settings.policy;
        let daq = p.priority_class("daq").expect("class");
        let mut t = QueuedBytes::default();
        t.add(group(p, "dune"), "alice", 70);
        assert_eq!(check(p, &t, daq, "alice", 1_000), Ok(()));
    }
}
