//! Typed values the rest of the broker can trust: built once from input by a `parse` constructor
//! and never wrong afterwards.
//!
//! Typed values and shared data every layer may read, depending on nothing in the crate. `domain.rs`
//! (`GroupPath`, `Fraction`, `RequestState`, `Class`: parsed once, then trusted; no OpenAPI schema
//! and no wire shape of their own: `RequestState` has no serde at all, `Class` keeps serde for the
//! share view document, and the API answers with its mirrors in `api/schemas.rs`), `tree.rs` (the
//! share tree and the groups: `ShareTree`, `ShareNode`, `NodeLimits`, `GroupId` -> `GroupInfo`,
//! priority classes first, then leaves depth first; each leaf knows its tree path `ancestors`, each
//! node its `leaves`; `ShareTree::standing`, the node a `"parent"` leaf is judged by),
//! `settings.rs` (`PolicySettings`, `Benefit`, `DeltaForm`, `Rule`, `UsageModel`, `RetrySettings`),
//! `order.rs` (the ordering policy's data: `OrderSettings`, `Algorithm`, `Release`, `Multifactor`,
//! `Qos`, `QueueParams`; their behaviour stays in `policy::order`, `policy::multifactor`,
//! `policy::fbsng`, which re-export them). The settings `config` builds for the modules above it
//! live here too, so that `config` imports none of them: `mss.rs` (`MssSettings`, the adapters'
//! tables), `server.rs` (`ServerSettings`, `IpNet`), `limits.rs` (`InputLimits`), `auth.rs` (roles,
//! `[[auth.x509]]` rules, `[[auth.issuers]]`).

pub mod auth;
pub mod limits;
pub mod mss;
pub mod order;
pub mod server;
pub mod settings;
pub mod tree;

pub use settings::{Benefit, DeltaForm, PolicySettings, RetrySettings, Rule, UsageModel};
pub use tree::{GroupId, GroupInfo, GroupKind, NodeLimits, ShareNode, ShareTree};

/// The largest byte offset on a volume a request or a trace may give (`offset_bytes`): 1 PB,
/// twenty times the largest cartridge made (IBM TS1170's 50 TB native); a larger figure is a
/// mistake of unit, not a place on a tape.
pub const MAX_OFFSET_BYTES: u64 = 1_000_000_000_000_000;

use std::fmt;

use serde::{Deserialize, Serialize};

/// A group path such as `analysis/higgs`: one or more segments of lower-case letters, digits,
/// `_`, `-` and `.`, joined by `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct GroupPath(String);

impl GroupPath {
    pub fn parse(s: &str) -> Result<GroupPath, String> {
        if s.is_empty() {
            return Err("a group path may not be empty".into());
        }
        if s.len() > 200 {
            return Err("a group path may be at most 200 characters".into());
        }
        for seg in s.split('/') {
            if seg.is_empty() {
                return Err(format!("group path `{s}` has an empty segment"));
            }
            let ok = seg
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b));
            if !ok {
                return Err(format!(
                    "group path `{s}` may only use a-z, 0-9, `_`, `-`, `.` between `/`"
                ));
            }
        }
        Ok(GroupPath(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path one level up, if any.
    pub fn parent(&self) -> Option<GroupPath> {
        self.0
            .rsplit_once('/')
            .map(|(p, _)| GroupPath(p.to_string()))
    }

    pub fn depth(&self) -> usize {
        self.0.split('/').count()
    }

    /// The last segment.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }
}

impl fmt::Display for GroupPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// An exact non-negative fraction `num / den` with `den > 0`, kept in lowest terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fraction {
    num: u128,
    den: u128,
}

impl Fraction {
    /// `None` when `den` is zero.
    pub fn new(num: u128, den: u128) -> Option<Fraction> {
        if den == 0 {
            return None;
        }
        let g = gcd(num, den).max(1);
        Some(Fraction {
            num: num / g,
            den: den / g,
        })
    }

    /// The exact value of a decimal number with at most `max_decimals` digits after the point,
    /// as written in a configuration file: 0.8 is 4/5, not the double nearest to it.
    pub fn from_decimal(v: f64, max_decimals: usize) -> Option<Fraction> {
        if !v.is_finite() || v < 0.0 {
            return None;
        }
        // Rust prints the shortest decimal that reads back as `v`: what the file said.
        let text = format!("{v}");
        let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
        if frac.len() > max_decimals {
            return None;
        }
        let den = 10u128.checked_pow(frac.len() as u32)?;
        let int: u128 = int.parse().ok()?;
        let frac: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        Fraction::new(int.checked_mul(den)?.checked_add(frac)?, den)
    }

    pub fn num(self) -> u128 {
        self.num
    }

    pub fn den(self) -> u128 {
        self.den
    }

    /// Product of two fractions, `None` on overflow.
    pub fn checked_mul(self, other: Fraction) -> Option<Fraction> {
        let a = gcd(self.num, other.den).max(1);
        let b = gcd(other.num, self.den).max(1);
        let num = (self.num / a).checked_mul(other.num / b)?;
        let den = (self.den / b).checked_mul(other.den / a)?;
        Fraction::new(num, den)
    }

    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Where a request stands. Terminal states never change again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestState {
    /// Committed, held by a feasibility cap: not charged, not submitted, until its group's
    /// usage falls below the cap.
    Held,
    /// Committed, waiting in the broker's own queue (held release mode) for room at the MSS:
    /// not charged, not decided until released.
    Queued,
    /// Committed, waiting to be submitted to the MSS (also after a retryable failure).
    Accepted,
    /// Queued at the MSS.
    Submitted,
    /// The MSS is transferring it.
    Running,
    /// Committed and charged, a read of a file another request (its carrier, `rides_on`) is
    /// already transferring: it takes no MSS transfer and settles with its carrier.
    Riding,
    Done,
    Failed,
    Cancelled,
}

impl RequestState {
    pub const ALL: [RequestState; 9] = [
        RequestState::Held,
        RequestState::Queued,
        RequestState::Accepted,
        RequestState::Submitted,
        RequestState::Running,
        RequestState::Riding,
        RequestState::Done,
        RequestState::Failed,
        RequestState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RequestState::Held => "held",
            RequestState::Queued => "queued",
            RequestState::Accepted => "accepted",
            RequestState::Submitted => "submitted",
            RequestState::Running => "running",
            RequestState::Riding => "riding",
            RequestState::Done => "done",
            RequestState::Failed => "failed",
            RequestState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<RequestState> {
        RequestState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RequestState::Done | RequestState::Failed | RequestState::Cancelled
        )
    }
}

/// How a request entered the MSS queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// A priority class (data taking): ahead of every fair-share request.
    Priority,
    /// Fair share, group under its share: front of the fair-share queue.
    Front,
    /// Fair share, group at or over its share: back of the queue.
    Back,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Priority => "priority",
            Class::Front => "front",
            Class::Back => "back",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        [Class::Priority, Class::Front, Class::Back]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_paths() {
        assert!(GroupPath::parse("analysis/higgs").is_ok());
        assert!(GroupPath::parse("mc").is_ok());
        for bad in ["", "a//b", "/a", "a/", "A", "a b", "a/é"] {
            assert!(GroupPath::parse(bad).is_err(), "{bad:?}");
        }
        let p = GroupPath::parse("a/b/c").unwrap();
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        assert_eq!(p.name(), "c");
        assert_eq!(p.depth(), 3);
    }

    #[test]
    fn fractions_reduce_and_multiply() {
        let a = Fraction::new(40, 100).unwrap();
        assert_eq!((a.num(), a.den()), (2, 5));
        let b = Fraction::new(3, 4).unwrap();
        let p = a.checked_mul(b).unwrap();
        assert_eq!((p.num(), p.den()), (3, 10));
        assert!(Fraction::new(1, 0).is_none());
    }

    #[test]
    fn decimals_are_read_exactly() {
        let f = |v, d| Fraction::from_decimal(v, d).map(|f| (f.num(), f.den()));
        assert_eq!(f(0.8, 6), Some((4, 5)));
        assert_eq!(f(0.5, 6), Some((1, 2)));
        assert_eq!(f(12.5, 4), Some((25, 2)));
        assert_eq!(f(1.0, 0), Some((1, 1)));
        assert_eq!(f(0.1234567, 6), None, "too many decimals");
        assert_eq!(f(-0.5, 6), None);
        assert_eq!(f(f64::NAN, 6), None);
    }
}
