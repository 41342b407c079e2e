//! Usage given by hand (`mssbroker shares --usage FILE`): what-if figures without a database.
//!
//! `{"usage": {"<group path>": <amount> | [<window 0>, <window 1>, ...]}}`: a plain number for
//! the `none` and `half_life` models (the usage at `--at`, already decayed), a list of windows,
//! current first, for `windows`. Amounts are non-negative with at most 6 decimals and are kept
//! exactly (in millionths).

use serde_json::Value;

use super::book::Effective;
use super::model::UsageModel;
use crate::domain::{GroupKind, PolicySettings};

/// Why a usage file cannot be used; names the entry at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{key}: {message}")]
pub struct UsageFileError {
    pub key: String,
    pub message: String,
}

fn err(key: impl Into<String>, message: impl Into<String>) -> UsageFileError {
    UsageFileError {
        key: key.into(),
        message: message.into(),
    }
}

/// Amounts are held in millionths, so decimal amounts are exact.
const SCALE: u128 = 1_000_000;

fn amount(v: &Value, key: &str) -> Result<u128, UsageFileError> {
    let bad = || {
        err(
            key,
            format!("must be a non-negative number with at most 6 decimals, got {v}"),
        )
    };
    let n = v.as_number().ok_or_else(bad)?;
    if let Some(i) = n.as_u64() {
        return Ok(u128::from(i) * SCALE);
    }
    let f = n.as_f64().ok_or_else(bad)?;
    let exact = crate::domain::Fraction::from_decimal(f, 6).ok_or_else(bad)?;
    // den divides 10^6.
    Ok(exact.num() * (SCALE / exact.den()))
}

/// Read a usage document against `policy`.
pub fn effective_from_json(
    policy: &PolicySettings,
    doc: &Value,
) -> Result<Effective, UsageFileError> {
    let usage = doc.get("usage").and_then(Value::as_object).ok_or_else(|| {
        err(
            "usage",
            "the file must be {\"usage\": {\"<group path>\": ...}}",
        )
    })?;
    if let Some(other) = doc
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "usage"))
    {
        return Err(err(other.as_str(), "unknown key (only \"usage\" is read)"));
    }
    let model = &policy.usage_model;
    let windowed = matches!(model, UsageModel::Windows { .. });
    let mut e = zero_usage(policy);
    for (path, v) in usage {
        let key = format!("usage.\"{path}\"");
        let g = policy.group_by_path(path).ok_or_else(|| {
            err(
                &key,
                "is not a group (a leaf of [shares] or a priority class)",
            )
        })?;
        let amounts = entry_amounts(model, &key, v)?;
        let i = g.0;
        e.values[i] = amounts
            .iter()
            .enumerate()
            .map(|(w, a)| a * model.window_weight(w))
            .sum();
        e.measures[i] = amounts.first().copied().unwrap_or(0) / SCALE;
        e.cumulative[i] = amounts.iter().sum::<u128>() / SCALE;
        if windowed {
            for (w, a) in amounts.iter().enumerate() {
                e.windows[i][w] = a / SCALE;
            }
        }
    }
    Ok(e)
}

/// Every group at zero, shaped for the policy's usage model.
fn zero_usage(policy: &PolicySettings) -> Effective {
    let n = policy.groups.len();
    let model = &policy.usage_model;
    Effective {
        values: vec![0; n],
        measures: vec![0; n],
        cumulative: vec![0; n],
        fair: policy
            .groups
            .iter()
            .map(|g| matches!(g.kind, GroupKind::FairShare { .. }))
            .collect(),
        unit: model.unit() * SCALE,
        windows: if matches!(model, UsageModel::Windows { .. }) {
            vec![vec![0; model.depth()]; n]
        } else {
            Vec::new()
        },
    }
}

/// One entry's amounts in millionths: one number, or under the windows model a list of at most
/// `depth` windows, current first.
fn entry_amounts(model: &UsageModel, key: &str, v: &Value) -> Result<Vec<u128>, UsageFileError> {
    let windowed = matches!(model, UsageModel::Windows { .. });
    let depth = model.depth();
    match (v, windowed) {
        (Value::Array(list), true) => {
            if list.len() > depth {
                return Err(err(
                    key,
                    format!("lists {} windows; usage.depth is {depth}", list.len()),
                ));
            }
            list.iter()
                .enumerate()
                .map(|(i, x)| amount(x, &format!("{key}[{i}]")))
                .collect()
        }
        (Value::Array(_), false) => Err(err(
            key,
            format!(
                "a list of windows is only for usage.model = \"windows\" (this is \"{}\"): give one number",
                model.name()
            ),
        )),
        (_, true) => Err(err(
            key,
            "usage.model = \"windows\" needs a list of windows, current first",
        )),
        (x, false) => Ok(vec![amount(x, key)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::shares::UsageLookup;
    use serde_json::json;

    fn policy(usage: &str) -> std::sync::Arc<PolicySettings> {
        let text = format!(
            "[policy]\np_front = 20\np_back = 10\n[usage]\n{usage}\n[shares]\njohn = 1\nothers = 3\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:1\"\n"
        );
        Settings::parse(&text, "t").unwrap().policy
    }

    #[test]
    fn john_from_a_file() {
        let p = policy("model = \"windows\"\ninterval_secs = 43200\ndepth = 4\ndecay = 0.5");
        let doc = json!({"usage": {"john": [60, 0, 10, 50], "others": [50, 125, 90, 100]}});
        let e = effective_from_json(&p, &doc).unwrap();
        let john = p.group_by_path("john").unwrap();
        assert_eq!(e.value(john) as f64 / e.unit() as f64, 68.75);
        assert_eq!(e.fair_total() as f64 / e.unit() as f64, 216.25);
        assert_eq!(e.measure(john), 60);
        assert_eq!(e.windows[john.0], [60, 0, 10, 50]);
    }

    #[test]
    fn entries_are_checked_and_named() {
        let p = policy("model = \"half_life\"");
        let e = |doc: Value| effective_from_json(&p, &doc).unwrap_err().to_string();
        assert!(e(json!({"usage": {"nobody": 1}})).starts_with("usage.\"nobody\": is not a group"));
        assert!(
            e(json!({"usage": {"john": [1, 2]}})).contains("only for usage.model = \"windows\"")
        );
        assert!(e(json!({"usage": {"john": -1}})).contains("non-negative"));
        assert!(e(json!({"usage": {"john": 0.1234567}})).contains("6 decimals"));
        assert!(e(json!({"usage": {}, "extra": 1})).starts_with("extra: unknown key"));
        assert!(e(json!({"groups": {}})).starts_with("usage:"));
        let ok = effective_from_json(&p, &json!({"usage": {"john": 68.75}})).unwrap();
        assert_eq!(ok.value(p.group_by_path("john").unwrap()), 68_750_000);
    }
}
