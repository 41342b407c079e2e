//! The explanation stored with a decision (`requests.explain`), in the ledger's own versioned
//! format: a policy's [`Explain`] is converted into it ([`From`]) before it is written, and it is
//! what a record reads back ([`StoredExplain`], typed). Renaming a field of the policy's type
//! changes neither the stored rows nor what is read from them.
//!
//! Version 1 is a JSON object with named fields (the form the API shows); rows written before
//! the version field existed have none and read as version 1. Version 2, written since
//! 2026-11-26, holds the same figures by position in a JSON array, `[2, policy, release mode,
//! at_ms, mss_priority, waited_ms, starved, {detail}]`, about half the bytes: the text was most
//! of a request row, and version 2 made batch ingest 1.13 to 1.15 times faster (storing none at
//! all, 1.26: docs/benchmarks.md). Both versions are read. A row of a newer version, or one that does not parse, is a corrupt row
//! (an error), never a silent gap.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod packed;

use crate::policy::multifactor::Factors;
use crate::policy::order::{Detail, Explain};

/// The format this build writes (and the newest it reads).
pub const VERSION: u32 = 2;

fn v1() -> u32 {
    1
}

/// An explanation as stored: its format version and the explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredExplain {
    /// The format's version (absent in rows of older builds: 1).
    #[serde(default = "v1")]
    pub v: u32,
    #[serde(flatten)]
    pub explain: Explanation,
}

/// Why a request has its place: the policy, the release mode, the MSS priority, how long it had
/// waited, the starvation bound if it decided, and the policy's own figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    pub policy: String,
    pub release_mode: String,
    /// When this placement was computed (ms since the epoch).
    pub at_ms: i64,
    pub mss_priority: i64,
    pub waited_ms: i64,
    /// Present when the starvation bound decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starved: Option<Starved>,
    pub detail: PolicyDetail,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Starved {
    pub max_wait_ms: i64,
    pub starved_priority: i64,
}

/// The policy's own figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyDetail {
    PriorityClass {
        class_priority: i64,
    },
    Sam {
        group_usage: String,
        fair_total: String,
        request_benefit: String,
        share_with_request: Real,
        target: Real,
        front: bool,
    },
    FairTree {
        rank: u32,
        leaves: u32,
        fairshare: Real,
        band: [i64; 2],
    },
    Multifactor {
        factors: FactorValues,
        weighted: FactorValues,
        score: Real,
        total_weight: Real,
        band: [i64; 2],
    },
    Fbsng {
        queue_priority: i64,
        lowest_queue_priority: i64,
        section_priority: u32,
        band: [i64; 2],
    },
}

/// Multifactor's factors (or their weighted values).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FactorValues {
    pub wait: Real,
    pub fair_share: Real,
    pub qos: Real,
    pub queue: Real,
    pub size: Real,
    pub user: Real,
}

/// A figure as JSON holds it: a number, or `null` for one that is not finite (JSON has no NaN),
/// read back as NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Real(pub f64);

impl Serialize for Real {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // serde_json writes a non-finite f64 as null, as the policy's own type always did.
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Real {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Real(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN)))
    }
}

/// Why a stored explanation cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("stored explain does not parse: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("stored explain has version {0}, newer than this build knows ({VERSION})")]
    TooNew(u32),
    #[error("stored explain says version {0} in a form that version does not use")]
    WrongForm(u32),
}

impl StoredExplain {
    /// The stored text: version 2, whatever version this was read as.
    pub fn to_text(&self) -> String {
        packed::to_text(&self.explain)
    }

    /// Read a stored text of any version this build knows.
    pub fn parse(text: &str) -> Result<StoredExplain, ExplainError> {
        if text.trim_start().starts_with('[') {
            return packed::parse(text);
        }
        let stored: StoredExplain = serde_json::from_str(text)?;
        match stored.v {
            1 => Ok(stored),
            v if v > VERSION => Err(ExplainError::TooNew(v)),
            v => Err(ExplainError::WrongForm(v)),
        }
    }
}

impl From<&Explain> for StoredExplain {
    fn from(e: &Explain) -> Self {
        StoredExplain {
            v: VERSION,
            explain: Explanation::from(e),
        }
    }
}

impl From<&Explain> for Explanation {
    fn from(e: &Explain) -> Self {
        Explanation {
            policy: e.policy.to_string(),
            release_mode: e.release_mode.to_string(),
            at_ms: e.at_ms,
            mss_priority: e.mss_priority,
            waited_ms: e.waited_ms,
            starved: e.starved.map(|s| Starved {
                max_wait_ms: s.max_wait_ms,
                starved_priority: s.starved_priority,
            }),
            detail: PolicyDetail::from(&e.detail),
        }
    }
}

impl From<&Detail> for PolicyDetail {
    fn from(d: &Detail) -> Self {
        match d.clone() {
            Detail::PriorityClass { class_priority } => {
                PolicyDetail::PriorityClass { class_priority }
            }
            Detail::Sam {
                group_usage,
                fair_total,
                request_benefit,
                share_with_request,
                target,
                front,
            } => PolicyDetail::Sam {
                group_usage,
                fair_total,
                request_benefit,
                share_with_request: Real(share_with_request),
                target: Real(target),
                front,
            },
            Detail::FairTree {
                rank,
                leaves,
                fairshare,
                band,
            } => PolicyDetail::FairTree {
                rank,
                leaves,
                fairshare: Real(fairshare),
                band,
            },
            Detail::Multifactor {
                factors,
                weighted,
                score,
                total_weight,
                band,
            } => PolicyDetail::Multifactor {
                factors: FactorValues::from(&factors),
                weighted: FactorValues::from(&weighted),
                score: Real(score),
                total_weight: Real(total_weight),
                band,
            },
            Detail::Fbsng {
                queue_priority,
                lowest_queue_priority,
                section_priority,
                band,
            } => PolicyDetail::Fbsng {
                queue_priority,
                lowest_queue_priority,
                section_priority,
                band,
            },
        }
    }
}

impl From<&Factors> for FactorValues {
    fn from(f: &Factors) -> Self {
        FactorValues {
            wait: Real(f.wait),
            fair_share: Real(f.fair_share),
            qos: Real(f.qos),
            queue: Real(f.queue),
            size: Real(f.size),
            user: Real(f.user),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row as builds before the version field wrote it (the policy's `Explain` serialised).
    const OLD_ROW: &str = r#"{"policy":"multifactor","release_mode":"held","at_ms":1000,"mss_priority":37,"waited_ms":250,"starved":{"max_wait_ms":100,"starved_priority":60},"detail":{"multifactor":{"factors":{"wait":0.5,"fair_share":1.0,"qos":0.25,"queue":1.0,"size":0.0,"user":1.0},"weighted":{"wait":500.0,"fair_share":1000.0,"qos":250.0,"queue":100.0,"size":0.0,"user":1.0},"score":1851.0,"total_weight":3000.0,"band":[10,90]}}}"#;

    #[test]
    fn a_row_of_an_older_build_reads_as_version_1() {
        let s = StoredExplain::parse(OLD_ROW).unwrap();
        assert_eq!(s.v, 1);
        assert_eq!(s.explain.policy, "multifactor");
        assert_eq!(
            s.explain.starved,
            Some(Starved {
                max_wait_ms: 100,
                starved_priority: 60
            })
        );
        let PolicyDetail::Multifactor { weighted, band, .. } = &s.explain.detail else {
            panic!("{:?}", s.explain.detail);
        };
        assert_eq!((weighted.qos, *band), (Real(250.0), [10, 90]));
        // The explanation reads back as the same JSON the old row held (what the API shows).
        let old: serde_json::Value = serde_json::from_str(OLD_ROW).unwrap();
        assert_eq!(serde_json::to_value(&s.explain).unwrap(), old);
    }

    /// Every policy's detail, starved or not, written as version 2 and read back: the same
    /// explanation as the version-1 row, in well under two thirds of its bytes.
    #[test]
    fn every_policy_detail_round_trips_with_its_version() {
        let rows = [
            r#"{"policy":"sam","release_mode":"pass_through","at_ms":5,"mss_priority":20,"waited_ms":0,"detail":{"sam":{"group_usage":"10","fair_total":"40","request_benefit":"5","share_with_request":null,"target":0.25,"front":true}}}"#,
            r#"{"policy":"sam","release_mode":"held","at_ms":5,"mss_priority":100,"waited_ms":0,"detail":{"priority_class":{"class_priority":100}}}"#,
            r#"{"policy":"fair_tree","release_mode":"held","at_ms":5,"mss_priority":30,"waited_ms":7,"detail":{"fair_tree":{"rank":2,"leaves":3,"fairshare":0.5,"band":[10,50]}}}"#,
            r#"{"policy":"fbsng","release_mode":"held","at_ms":5,"mss_priority":30,"waited_ms":7,"detail":{"fbsng":{"queue_priority":3,"lowest_queue_priority":1,"section_priority":2,"band":[10,50]}}}"#,
            OLD_ROW,
        ];
        for row in rows {
            let s = StoredExplain::parse(row).unwrap();
            assert_eq!(s.v, 1);
            let written = s.to_text();
            assert!(written.starts_with("[2,"), "{written}");
            assert!(written.len() * 3 < row.len() * 2, "{written} against {row}");
            let again = StoredExplain::parse(&written).unwrap();
            assert_eq!(again.v, 2);
            let old: serde_json::Value = serde_json::from_str(row).unwrap();
            assert_eq!(serde_json::to_value(&again.explain).unwrap(), old, "{row}");
        }
    }

    proptest::proptest! {
        /// A figure reads back to the same bits, not one unit in the last place off (serde_json
        /// parses floats exactly only with its `float_roundtrip` feature).
        #[test]
        fn a_figure_reads_back_to_the_same_bits(
            x in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
        ) {
            let s = StoredExplain {
                v: VERSION,
                explain: Explanation {
                    policy: "fair_tree".into(),
                    release_mode: "held".into(),
                    at_ms: 1,
                    mss_priority: 2,
                    waited_ms: 3,
                    starved: None,
                    detail: PolicyDetail::FairTree { rank: 1, leaves: 2, fairshare: Real(x), band: [1, 2] },
                },
            };
            let back = StoredExplain::parse(&s.to_text()).unwrap();
            let PolicyDetail::FairTree { fairshare, .. } = back.explain.detail else {
                panic!("{:?}", back.explain.detail);
            };
            proptest::prop_assert_eq!(fairshare.0.to_bits(), x.to_bits(), "{}", x);
        }
    }

    /// Version 2 by hand: each figure in its place.
    #[test]
    fn a_version_2_row_reads_each_figure_from_its_place() {
        let row = r#"[2,"fair_tree","volumes",9,31,4,[100,60],{"t":[2,3,0.5,[10,50]]}]"#;
        let s = StoredExplain::parse(row).unwrap();
        let want = Explanation {
            policy: "fair_tree".into(),
            release_mode: "volumes".into(),
            at_ms: 9,
            mss_priority: 31,
            waited_ms: 4,
            starved: Some(Starved {
                max_wait_ms: 100,
                starved_priority: 60,
            }),
            detail: PolicyDetail::FairTree {
                rank: 2,
                leaves: 3,
                fairshare: Real(0.5),
                band: [10, 50],
            },
        };
        assert_eq!((s.v, &s.explain), (2, &want));
        assert_eq!(s.to_text(), row);
    }

    /// Each policy's version-2 text, exactly: every figure distinct, so a swap of two fields
    /// of the same type (which would still parse) shows. Rows written stay readable only if
    /// these texts never change.
    #[test]
    fn each_policy_detail_has_its_fixed_version_2_text() {
        let rows = [
            (
                r#"{"policy":"sam","release_mode":"pass_through","at_ms":5,"mss_priority":20,"waited_ms":1,"detail":{"sam":{"group_usage":"10","fair_total":"40","request_benefit":"5","share_with_request":0.125,"target":0.25,"front":true}}}"#,
                r#"[2,"sam","pass_through",5,20,1,null,{"s":["10","40","5",0.125,0.25,true]}]"#,
            ),
            (
                r#"{"policy":"sam","release_mode":"held","at_ms":5,"mss_priority":100,"waited_ms":2,"detail":{"priority_class":{"class_priority":101}}}"#,
                r#"[2,"sam","held",5,100,2,null,{"c":101}]"#,
            ),
            (
                OLD_ROW,
                concat!(
                    r#"[2,"multifactor","held",1000,37,250,[100,60],{"m":[[0.5,1.0,0.25,1.0,0.0,1.0],"#,
                    r#"[500.0,1000.0,250.0,100.0,0.0,1.0],1851.0,3000.0,[10,90]]}]"#
                ),
            ),
            (
                r#"{"policy":"fbsng","release_mode":"volumes","at_ms":5,"mss_priority":30,"waited_ms":7,"detail":{"fbsng":{"queue_priority":3,"lowest_queue_priority":1,"section_priority":2,"band":[10,50]}}}"#,
                r#"[2,"fbsng","volumes",5,30,7,null,{"b":[3,1,2,[10,50]]}]"#,
            ),
            (
                r#"{"policy":"multifactor","release_mode":"held","at_ms":9,"mss_priority":12,"waited_ms":3,"detail":{"multifactor":{"factors":{"wait":0.1,"fair_share":0.2,"qos":0.3,"queue":0.4,"size":0.5,"user":0.6},"weighted":{"wait":1.5,"fair_share":2.5,"qos":3.5,"queue":4.5,"size":5.5,"user":6.5},"score":24.0,"total_weight":30.0,"band":[11,19]}}}"#,
                r#"[2,"multifactor","held",9,12,3,null,{"m":[[0.1,0.2,0.3,0.4,0.5,0.6],[1.5,2.5,3.5,4.5,5.5,6.5],24.0,30.0,[11,19]]}]"#,
            ),
        ];
        for (named, positional) in rows {
            let s = StoredExplain::parse(named).unwrap();
            assert_eq!(s.to_text(), positional);
            let back = StoredExplain::parse(positional).unwrap();
            assert_eq!(back.explain, s.explain, "{positional}");
        }
    }

    #[test]
    fn a_newer_version_or_a_broken_row_is_an_error() {
        let newer = r#"{"v":3,"policy":"sam","release_mode":"held","at_ms":5,"mss_priority":100,"waited_ms":0,"detail":{"priority_class":{"class_priority":100}}}"#;
        assert!(matches!(
            StoredExplain::parse(newer),
            Err(ExplainError::TooNew(3))
        ));
        // A newer positional row, of this form or another.
        let same_form = r#"[3,"sam","held",5,100,0,null,{"c":100}]"#;
        let longer = r#"[3,"sam","held",5,100,0,null,{"c":100},"more"]"#;
        for row in [same_form, longer] {
            assert!(
                matches!(StoredExplain::parse(row), Err(ExplainError::TooNew(3))),
                "{row}"
            );
        }
        // Each version in its own form only: version 1 named, version 2 by position.
        let wrong = [
            (r#"[1,"sam","held",5,100,0,null,{"c":100}]"#, 1),
            (
                r#"{"v":2,"policy":"sam","release_mode":"held","at_ms":5,"mss_priority":100,"waited_ms":0,"detail":{"priority_class":{"class_priority":100}}}"#,
                2,
            ),
            (
                r#"{"v":0,"policy":"sam","release_mode":"held","at_ms":5,"mss_priority":100,"waited_ms":0,"detail":{"priority_class":{"class_priority":100}}}"#,
                0,
            ),
        ];
        for (row, v) in wrong {
            assert!(
                matches!(StoredExplain::parse(row), Err(ExplainError::WrongForm(w)) if w == v),
                "{row}"
            );
        }
        for broken in [
            r#"{"policy":"sam"}"#,
            r#"[2,"sam","held",5,100,0,null]"#,
            r#"[2,"sam","held",5,100,0,null,{"x":100}]"#,
            r#"[2,"sam","held",5,100,0,null,{"c":100},"more"]"#,
            "[",
        ] {
            assert!(
                matches!(StoredExplain::parse(broken), Err(ExplainError::Parse(_))),
                "{broken}"
            );
        }
    }
}
