//! `[usage]` validated into the [`UsageModel`].

use super::raw::RawUsage;
use super::Issues;
use crate::domain::Fraction;
use crate::shares::model::{UsageModel, MAX_WINDOW_UNIT};

/// A number of seconds from 1 to 100 years, in milliseconds.
fn secs_ms(v: i64, key: &str, issues: &mut Issues) -> i64 {
    if v <= 0 || v > 100 * 365 * 86_400 {
        issues.add(
            key,
            format!("must be a number of seconds from 1 to 100 years, got {v}"),
        );
        return 1_000;
    }
    v * 1_000
}

/// Refuse a key `given` for another model than the one it belongs to.
fn unused(given: bool, key: &str, issues: &mut Issues) {
    if given {
        issues.add(
            key,
            format!(
                "only used with usage.model = \"{}\"",
                if key == "usage.half_life_secs" {
                    "half_life"
                } else {
                    "windows"
                }
            ),
        );
    }
}

pub(super) fn validate_usage(raw: &RawUsage, issues: &mut Issues) -> Option<UsageModel> {
    match raw.model.as_str() {
        "none" | "half_life" => {
            unused(raw.interval_secs.is_some(), "usage.interval_secs", issues);
            unused(raw.depth.is_some(), "usage.depth", issues);
            unused(raw.decay.is_some(), "usage.decay", issues);
            if raw.model == "none" {
                unused(raw.half_life_secs.is_some(), "usage.half_life_secs", issues);
                return Some(UsageModel::Cumulative);
            }
            Some(UsageModel::HalfLife {
                half_life_ms: secs_ms(
                    raw.half_life_secs.unwrap_or(7 * 86_400),
                    "usage.half_life_secs",
                    issues,
                ),
            })
        }
        "windows" => windows(raw, issues),
        other => {
            issues.add(
                "usage.model",
                format!("`{other}` is not one of none, half_life, windows"),
            );
            None
        }
    }
}

/// `usage.model = "windows"`: Maui's FSINTERVAL, FSDEPTH and FSDECAY, exact.
fn windows(raw: &RawUsage, issues: &mut Issues) -> Option<UsageModel> {
    unused(raw.half_life_secs.is_some(), "usage.half_life_secs", issues);
    let interval_ms = secs_ms(
        raw.interval_secs.unwrap_or(12 * 3_600),
        "usage.interval_secs",
        issues,
    );
    let depth = raw.depth.unwrap_or(8);
    if !(1..=64).contains(&depth) {
        issues.add(
            "usage.depth",
            format!("must be 1 to 64 windows, got {depth}"),
        );
        return None;
    }
    let decay_value = raw.decay.unwrap_or(1.0);
    let decay = match Fraction::from_decimal(decay_value, 6) {
        Some(d) if d.num() > 0 && d.num() <= d.den() => d,
        _ => {
            issues.add(
                "usage.decay",
                format!(
                    "must be above 0 and at most 1, with at most 6 decimals, got {decay_value}"
                ),
            );
            return None;
        }
    };
    let model = UsageModel::Windows {
        interval_ms,
        depth: depth as usize,
        decay,
    };
    let exact_unit = (1..depth).try_fold(1u128, |acc, _| acc.checked_mul(decay.den()));
    match exact_unit {
        Some(u) if u <= MAX_WINDOW_UNIT => Some(model),
        _ => {
            issues.add(
                "usage.decay",
                format!("decay {decay_value} ({decay}) over depth {depth} needs more precision than exact sums allow: use fewer decimals or a smaller depth"),
            );
            None
        }
    }
}
