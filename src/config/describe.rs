//! `check-config`'s human-readable view of validated settings.

use super::layers::Sourced;
use super::{mss, Settings};
use crate::domain::{Fraction, GroupKind, NodeLimits};

fn describe_limits(l: &NodeLimits) -> String {
    let pct = |f: Fraction| f.to_f64() * 100.0;
    let mut parts = Vec::new();
    if let Some(f) = l.floor {
        parts.push(format!("floor {}%", pct(f)));
    }
    if let Some(c) = l.cap {
        parts.push(format!("cap {}%", pct(c)));
    }
    if let Some(c) = l.feasibility_cap {
        parts.push(format!("holds at {c}"));
    }
    if let Some(c) = l.feasibility_cap_percent {
        parts.push(format!("holds at {}%", pct(c)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("  [{}]", parts.join(", "))
    }
}

/// A human-readable view of the validated tree for `check-config`.
pub fn describe(settings: &Settings) -> String {
    let p = &settings.policy;
    let mut out = format!("configuration {} is valid\n\n", settings.origin);
    out.push_str(&describe_database(&settings.database));
    out.push_str("priority classes (strictly ahead of all fair-share requests):\n");
    for g in &p.groups {
        if let GroupKind::Priority { mss_priority, .. } = g.kind {
            out.push_str(&format!("  {:<30} mss_priority {mss_priority}\n", g.path));
        }
    }
    out.push_str(&format!(
        "fair share: front at mss_priority {}, back at {}; benefit = {}\nusage: {}\n",
        p.p_front,
        p.p_back,
        p.benefit.name(),
        p.usage_model.describe()
    ));
    let o = &p.order;
    out.push_str(&format!(
        "ordering: policy {}, band {}..{}; release {}{}; starvation bound {}; re-prioritise {}\n\nshare tree (shares, fraction of all fair-share benefit):\n",
        o.algorithm.name(),
        o.band_low,
        o.band_high,
        o.release.mode.name(),
        if o.held() {
            format!(" (limit {} per library, slot_bytes {})", o.release.limit, o.release.slot_bytes)
        } else {
            String::new()
        },
        o.max_wait_ms.map_or("off".to_string(), |m| format!(
            "{} s (then mss_priority {})",
            m / 1000,
            o.starved_priority
        )),
        o.reprioritise
            .map_or("never".to_string(), |d| format!("every {} s", d.as_secs())),
    ));
    for node in p.tree.depth_first().into_iter().map(|i| &p.tree.nodes[i]) {
        let indent = "  ".repeat(node.path.depth());
        let label = format!("{indent}{}", node.path.name());
        let leaf = if node.is_leaf() { "  leaf" } else { "" };
        let shares = if node.use_parent {
            "parent".to_string()
        } else {
            node.shares.to_string()
        };
        out.push_str(&format!(
            "{label:<32} {shares:>6}  {:>8.4}%  ({}){leaf}{}\n",
            node.fraction.to_f64() * 100.0,
            node.fraction,
            describe_limits(&node.limits)
        ));
    }
    out.push_str(&format!(
        "\nclassification: {} rule(s), then access_mode/physics_group, then {}\n",
        p.rules.len(),
        match p.default_group {
            Some(g) => format!("default group {}", p.group(g).path),
            None => "refuse".to_string(),
        }
    ));
    out.push_str(&mss::describe(&settings.mss));
    if !settings.notes.is_empty() {
        out.push_str("\nnotes:\n");
        for n in &settings.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out
}

/// Where the ledger is, and on PostgreSQL whether the connection is TLS and that brokers on
/// it share one leadership (never the password or the query of the string).
fn describe_database(d: &super::DatabaseSettings) -> String {
    match &d.url {
        None => format!("database: SQLite {}\n\n", d.path.display()),
        Some(url) => format!(
            "database: PostgreSQL {url} ({}); every broker on it contends for the \
             leadership, one leads\n\n",
            match url.tls() {
                Some(_) => "TLS, server certificate and name checked",
                None => "plain text, this machine only",
            }
        ),
    }
}

/// Longest value `describe_sources` prints whole.
const VALUE_WIDTH: usize = 60;

/// `check-config`'s list of every value set, and where it came from (`file:PATH`, `env:VAR`,
/// `flag:--x`); keys not listed have their defaults.
pub fn describe_sources(sources: &[Sourced]) -> String {
    let mut out = String::from("\nvalues set (every other key has its default):\n");
    let width = sources.iter().map(|s| s.key.len()).max().unwrap_or(0);
    for s in sources {
        // An `mss.url` (or any URL) is shown without its password and query string.
        let mut value = mss_adapters::redact::urls(&s.value.to_string()).into_owned();
        if value.chars().count() > VALUE_WIDTH {
            value = value.chars().take(VALUE_WIDTH - 3).collect::<String>() + "...";
        }
        out.push_str(&format!("  {:<width$} = {value}  <- {}\n", s.key, s.source));
    }
    out
}
