//! The API's JSON shapes of the domain's enums. The domain's types carry no OpenAPI schema: the
//! answers serialise these API-owned mirrors, built from the domain's values, and the mirrors'
//! schemas are the ones named `Class` and `RequestState` in the OpenAPI document (also where
//! the share view, a document shared with the CLI, names a domain `Class`).

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::{RefOr, Schema};

use crate::domain;

/// How a request entered the MSS queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = Class)]
pub enum ClassBody {
    Priority,
    Front,
    Back,
}

impl From<domain::Class> for ClassBody {
    fn from(c: domain::Class) -> Self {
        match c {
            domain::Class::Priority => ClassBody::Priority,
            domain::Class::Front => ClassBody::Front,
            domain::Class::Back => ClassBody::Back,
        }
    }
}

/// Where a request stands. Terminal states never change again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = RequestState)]
pub enum StateBody {
    Held,
    Queued,
    Accepted,
    Submitted,
    Running,
    Riding,
    Done,
    Failed,
    Cancelled,
}

impl From<domain::RequestState> for StateBody {
    fn from(s: domain::RequestState) -> Self {
        use domain::RequestState as S;
        match s {
            S::Held => StateBody::Held,
            S::Queued => StateBody::Queued,
            S::Accepted => StateBody::Accepted,
            S::Submitted => StateBody::Submitted,
            S::Running => StateBody::Running,
            S::Riding => StateBody::Riding,
            S::Done => StateBody::Done,
            S::Failed => StateBody::Failed,
            S::Cancelled => StateBody::Cancelled,
        }
    }
}

/// Which way a transfer goes: `read` stages a file from tape, `write` stores one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = Direction)]
pub enum DirectionBody {
    Read,
    Write,
}

/// The multifactor policy's QoS factor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = Qos)]
pub enum QosBody {
    Expedite,
    Normal,
    Standby,
}

/// Where a queued request's `explain.position` comes from. `GET /v1/requests/{id}` never waits
/// for a ranking of the queue: `ranking`, its place in the latest ranking (made at
/// `explain.ranked_at_ms`, so as old as that); `estimate`, queued after that ranking: where its
/// placement now falls among the requests it ranked (`waiting` counted now); `not_ranked`, no
/// ranking yet since the broker started (one is being made): `position` is `null`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = PositionBasis)]
pub enum PositionBasisBody {
    Ranking,
    Estimate,
    NotRanked,
}

impl PositionBasisBody {
    /// The API's spelling of the ledger's basis (`None` in the `volumes` mode, which ranks no
    /// single requests).
    pub fn of(basis: crate::ledger::PositionBasis) -> Option<PositionBasisBody> {
        use crate::ledger::PositionBasis as B;
        match basis {
            B::Ranking => Some(PositionBasisBody::Ranking),
            B::Estimate => Some(PositionBasisBody::Estimate),
            B::NotRanked => Some(PositionBasisBody::NotRanked),
            B::Volumes => None,
        }
    }
}

// The share view (`shares::view`) is a document of its own that names a domain `Class`; its
// schema is the API's mirror's.
impl utoipa::PartialSchema for domain::Class {
    fn schema() -> RefOr<Schema> {
        <ClassBody as utoipa::PartialSchema>::schema()
    }
}

impl utoipa::ToSchema for domain::Class {
    fn name() -> Cow<'static, str> {
        <ClassBody as utoipa::ToSchema>::name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mirrors say each value as the domain spells it (`as_str`, the stored spelling).
    #[test]
    fn mirrors_spell_values_as_the_domain_does() {
        let quoted = |s: &str| format!("\"{s}\"");
        for s in domain::RequestState::ALL {
            let text = serde_json::to_string(&StateBody::from(s)).unwrap();
            assert_eq!(text, quoted(s.as_str()));
        }
        for c in [
            domain::Class::Priority,
            domain::Class::Front,
            domain::Class::Back,
        ] {
            let text = serde_json::to_string(&ClassBody::from(c)).unwrap();
            assert_eq!(text, quoted(c.as_str()));
        }
    }

    /// The documented values of a request's `direction` and `qos` are the ones it takes.
    #[test]
    fn documented_values_are_the_ones_a_request_takes() {
        use crate::policy::multifactor::Qos;
        use mss_adapters::Direction;
        fn text(v: impl Serialize) -> String {
            serde_json::to_value(v)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        }
        let directions = [DirectionBody::Read, DirectionBody::Write].map(text);
        let parsed = directions.each_ref().map(|d| Direction::parse(d));
        assert_eq!(parsed, [Some(Direction::Read), Some(Direction::Write)]);
        let qos = [QosBody::Expedite, QosBody::Normal, QosBody::Standby].map(text);
        let parsed = qos.each_ref().map(|q| Qos::parse(q));
        assert_eq!(
            parsed,
            [Some(Qos::Expedite), Some(Qos::Normal), Some(Qos::Standby)]
        );
    }
}
