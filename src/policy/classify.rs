//! Classification: which accounting group a request is charged to.

use crate::domain::{GroupId, PolicySettings, Rule};

/// The request fields classification looks at.
#[derive(Debug, Clone, Copy)]
pub struct RequestFields<'a> {
    pub access_mode: &'a str,
    pub physics_group: &'a str,
    pub station: &'a str,
    pub user: &'a str,
    pub file: &'a str,
}

/// No group takes the request and no default group is configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no group for access_mode `{access_mode}` and physics_group `{physics_group}`: no classification rule matches, `{access_mode}/{physics_group}` is not a share leaf and no default group is configured")]
pub struct ClassifyError {
    pub access_mode: String,
    pub physics_group: String,
}

/// Find the request's group: its priority class, else the first matching rule, else the leaf
/// `access_mode/physics_group` (or `access_mode` alone when that is a leaf), else the default.
pub fn classify(policy: &PolicySettings, r: &RequestFields<'_>) -> Result<GroupId, ClassifyError> {
    if let Some(class) = policy.priority_class(r.access_mode) {
        return Ok(class);
    }
    if let Some(rule) = policy.rules.iter().find(|rule| matches(rule, r)) {
        return Ok(rule.group);
    }
    let natural = format!("{}/{}", r.access_mode, r.physics_group);
    let natural = policy
        .group_by_path(&natural)
        .or_else(|| policy.group_by_path(r.access_mode));
    natural
        .or(policy.default_group)
        .ok_or_else(|| ClassifyError {
            access_mode: r.access_mode.to_string(),
            physics_group: r.physics_group.to_string(),
        })
}

fn matches(rule: &Rule, r: &RequestFields<'_>) -> bool {
    let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    eq(&rule.access_mode, r.access_mode)
        && eq(&rule.physics_group, r.physics_group)
        && eq(&rule.station, r.station)
        && eq(&rule.user, r.user)
        && rule
            .path_prefix
            .as_deref()
            .is_none_or(|p| r.file.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::TestConfig;

    fn policy(extra: &str) -> std::sync::Arc<PolicySettings> {
        let shares =
            "[shares]\nanalysis = 1\n\"analysis/higgs\" = 1\n\"analysis/top\" = 1\nmc = 1\n";
        TestConfig::new()
            .with(&format!("{shares}{extra}"))
            .settings()
            .policy
    }

    fn req<'a>(mode: &'a str, group: &'a str) -> RequestFields<'a> {
        RequestFields {
            access_mode: mode,
            physics_group: group,
            station: "st",
            user: "u",
            file: "/pnfs/x",
        }
    }

    fn path(p: &PolicySettings, r: RequestFields<'_>) -> Result<String, ClassifyError> {
        classify(p, &r).map(|g| p.group(g).path.to_string())
    }

    #[test]
    fn natural_mapping_priority_class_and_refusal() {
        let p = policy("");
        assert_eq!(
            path(&p, req("analysis", "higgs")).unwrap(),
            "analysis/higgs"
        );
        assert_eq!(path(&p, req("mc", "anything")).unwrap(), "mc");
        assert_eq!(path(&p, req("datataking", "higgs")).unwrap(), "datataking");
        let e = path(&p, req("analysis", "susy")).unwrap_err();
        assert_eq!(e.physics_group, "susy");
    }

    #[test]
    fn first_matching_rule_wins_then_default() {
        let p = policy(
            r#"
[classification]
default_group = "mc"
[[classification.rules]]
path_prefix = "/pnfs/top/"
group = "analysis/top"
[[classification.rules]]
station = "st"
access_mode = "analysis"
group = "analysis/higgs"
"#,
        );
        let mut r = req("analysis", "top");
        assert_eq!(
            path(&p, r).unwrap(),
            "analysis/higgs",
            "rule 2 beats natural"
        );
        r.file = "/pnfs/top/f";
        assert_eq!(path(&p, r).unwrap(), "analysis/top", "rule 1 first");
        assert_eq!(path(&p, req("reco", "x")).unwrap(), "mc", "default");
        // Rules never override a priority class.
        let mut d = req("datataking", "x");
        d.file = "/pnfs/top/f";
        assert_eq!(path(&p, d).unwrap(), "datataking");
    }
}
