//! `[targets."path"]`: floors and caps set on nodes of the share tree.

use std::collections::BTreeMap;

use super::raw::RawTarget;
use super::Issues;
use crate::domain::{Fraction, NodeLimits, ShareTree};

pub(super) fn validate_targets(
    raw: &BTreeMap<String, RawTarget>,
    tree: &mut ShareTree,
    issues: &mut Issues,
) {
    for (path, t) in raw {
        let key = format!("targets.\"{path}\"");
        let Some(i) = tree.nodes.iter().position(|n| n.path.as_str() == path) else {
            issues.add(
                key,
                "is not a node of [shares] (floors and caps apply to fair-share groups)",
            );
            continue;
        };
        let percent = |v: Option<f64>, name: &str, issues: &mut Issues| -> Option<Fraction> {
            let v = v?;
            match Fraction::from_decimal(v, 4).and_then(|f| Fraction::new(f.num(), f.den() * 100)) {
                Some(f) if v > 0.0 && v <= 100.0 => Some(f),
                _ => {
                    issues.add(format!("{key}.{name}"), format!("must be a percentage above 0 and at most 100 with at most 4 decimals, got {v}"));
                    None
                }
            }
        };
        let limits = NodeLimits {
            floor: percent(t.floor_percent, "floor_percent", issues),
            cap: percent(t.cap_percent, "cap_percent", issues),
            feasibility_cap_percent: percent(
                t.feasibility_cap_percent,
                "feasibility_cap_percent",
                issues,
            ),
            feasibility_cap: match t.feasibility_cap {
                Some(v) if v <= 0 => {
                    issues.add(
                        format!("{key}.feasibility_cap"),
                        format!("must be a positive amount of benefit, got {v}"),
                    );
                    None
                }
                v => v.map(|v| v as u64),
            },
            max_volumes: match t.max_volumes {
                Some(v) if v <= 0 || v > i64::from(u32::MAX) => {
                    issues.add(
                        format!("{key}.max_volumes"),
                        format!("must be a positive number of volumes, got {v}"),
                    );
                    None
                }
                v => v.map(|v| v as u32),
            },
            max_queued_bytes: match t.max_queued_bytes {
                Some(v) if v <= 0 => {
                    issues.add(
                        format!("{key}.max_queued_bytes"),
                        format!("must be a positive number of bytes, got {v}"),
                    );
                    None
                }
                v => v.map(|v| v as u64),
            },
        };
        if let (Some(f), Some(c)) = (limits.floor, limits.cap) {
            if f.num() * c.den() > c.num() * f.den() {
                issues.add(
                    format!("{key}.floor_percent"),
                    "must not be above cap_percent",
                );
            }
        }
        if limits.is_empty() {
            issues.add(key, "sets nothing: give floor_percent, cap_percent, feasibility_cap, feasibility_cap_percent, max_volumes or max_queued_bytes");
        }
        tree.nodes[i].limits = limits;
    }
}
