//! Version 2 of the stored explain: [`Explanation`]'s figures by position in a JSON array,
//! the policy's detail under a one-letter tag. The same numbers and strings as version 1 (the
//! floats written the same way), without its field names.

use serde::{Deserialize, Serialize};

use super::{ExplainError, Explanation, FactorValues, PolicyDetail, Real, Starved};
use super::{StoredExplain, VERSION};

/// This form's version.
const V2: u32 = 2;

/// (version, policy, release mode, at_ms, mss_priority, waited_ms, (max_wait_ms,
/// starved_priority) when starved, detail).
type Row<S> = (u32, S, S, i64, i64, i64, Option<(i64, i64)>, Detail<S>);

/// [`FactorValues`] by position: wait, fair share, QoS, queue, size, user.
type Factors = (Real, Real, Real, Real, Real, Real);

/// [`PolicyDetail`] by position, each field in the order it is declared there.
#[derive(Serialize, Deserialize)]
enum Detail<S> {
    #[serde(rename = "c")]
    PriorityClass(i64),
    #[serde(rename = "s")]
    Sam(S, S, S, Real, Real, bool),
    #[serde(rename = "t")]
    FairTree(u32, u32, Real, [i64; 2]),
    #[serde(rename = "m")]
    Multifactor(Factors, Factors, Real, Real, [i64; 2]),
    #[serde(rename = "b")]
    Fbsng(i64, i64, u32, [i64; 2]),
}

/// The version-2 text of `e`.
pub(super) fn to_text(e: &Explanation) -> String {
    let starved = e.starved.map(|s| (s.max_wait_ms, s.starved_priority));
    let row: Row<&str> = (
        V2,
        &e.policy,
        &e.release_mode,
        e.at_ms,
        e.mss_priority,
        e.waited_ms,
        starved,
        detail_of(&e.detail),
    );
    // Strings, integers, bools and floats (a non-finite one as null): cannot fail.
    serde_json::to_string(&row).unwrap_or_default()
}

/// Read a version-2 text (or say which newer version an unreadable array claims to be).
pub(super) fn parse(text: &str) -> Result<StoredExplain, ExplainError> {
    let row: Row<String> = match serde_json::from_str(text) {
        Ok(row) => row,
        Err(e) => return Err(newer(text).map_or(e.into(), ExplainError::TooNew)),
    };
    match row.0 {
        V2 => Ok(StoredExplain {
            v: V2,
            explain: explanation(row),
        }),
        v if v > VERSION => Err(ExplainError::TooNew(v)),
        v => Err(ExplainError::WrongForm(v)),
    }
}

/// The version an array claims first, when it is newer than this build's.
fn newer(text: &str) -> Option<u32> {
    let items: Vec<serde_json::Value> = serde_json::from_str(text).ok()?;
    let v = u32::try_from(items.first()?.as_u64()?).ok()?;
    (v > VERSION).then_some(v)
}

fn detail_of(d: &PolicyDetail) -> Detail<&str> {
    match d {
        PolicyDetail::PriorityClass { class_priority } => Detail::PriorityClass(*class_priority),
        PolicyDetail::Sam {
            group_usage,
            fair_total,
            request_benefit,
            share_with_request,
            target,
            front,
        } => Detail::Sam(
            group_usage,
            fair_total,
            request_benefit,
            *share_with_request,
            *target,
            *front,
        ),
        PolicyDetail::FairTree {
            rank,
            leaves,
            fairshare,
            band,
        } => Detail::FairTree(*rank, *leaves, *fairshare, *band),
        PolicyDetail::Multifactor {
            factors,
            weighted,
            score,
            total_weight,
            band,
        } => Detail::Multifactor(
            tuple(factors),
            tuple(weighted),
            *score,
            *total_weight,
            *band,
        ),
        PolicyDetail::Fbsng {
            queue_priority,
            lowest_queue_priority,
            section_priority,
            band,
        } => Detail::Fbsng(
            *queue_priority,
            *lowest_queue_priority,
            *section_priority,
            *band,
        ),
    }
}

fn explanation(row: Row<String>) -> Explanation {
    let (_, policy, release_mode, at_ms, mss_priority, waited_ms, starved, detail) = row;
    Explanation {
        policy,
        release_mode,
        at_ms,
        mss_priority,
        waited_ms,
        starved: starved.map(|(max_wait_ms, starved_priority)| Starved {
            max_wait_ms,
            starved_priority,
        }),
        detail: policy_detail(detail),
    }
}

fn policy_detail(d: Detail<String>) -> PolicyDetail {
    match d {
        Detail::PriorityClass(class_priority) => PolicyDetail::PriorityClass { class_priority },
        Detail::Sam(
            group_usage,
            fair_total,
            request_benefit,
            share_with_request,
            target,
            front,
        ) => PolicyDetail::Sam {
            group_usage,
            fair_total,
            request_benefit,
            share_with_request,
            target,
            front,
        },
        Detail::FairTree(rank, leaves, fairshare, band) => PolicyDetail::FairTree {
            rank,
            leaves,
            fairshare,
            band,
        },
        Detail::Multifactor(factors, weighted, score, total_weight, band) => {
            PolicyDetail::Multifactor {
                factors: values(factors),
                weighted: values(weighted),
                score,
                total_weight,
                band,
            }
        }
        Detail::Fbsng(queue_priority, lowest_queue_priority, section_priority, band) => {
            PolicyDetail::Fbsng {
                queue_priority,
                lowest_queue_priority,
                section_priority,
                band,
            }
        }
    }
}

fn tuple(f: &FactorValues) -> Factors {
    (f.wait, f.fair_share, f.qos, f.queue, f.size, f.user)
}

fn values((wait, fair_share, qos, queue, size, user): Factors) -> FactorValues {
    FactorValues {
        wait,
        fair_share,
        qos,
        queue,
        size,
        user,
    }
}
