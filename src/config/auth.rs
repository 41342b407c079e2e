//! `[auth]` validated: the token file, `[[auth.x509]]` and `[[auth.issuers]]`.

use std::path::{Path, PathBuf};

use super::raw::RawAuth;
use super::Issues;
use crate::domain::auth::{
    normalise_rule_dn, role_of, AuthSettings, IssuerSettings, RoleKind, SubjectMatch, X509Rule,
};

/// The token file (relative as written: `Settings::load` puts it next to the configuration)
/// and the certificate and issuer rules; every refusal names its key.
pub(super) fn validate_auth(
    raw: RawAuth,
    base: &Path,
    issues: &mut Issues,
) -> (Option<PathBuf>, AuthSettings) {
    let token_file = match raw.token_file {
        Some(f) if f.is_empty() => {
            issues.add(
                "auth.token_file",
                "may not be empty (remove [auth] to turn authentication off)",
            );
            None
        }
        Some(f) => Some(PathBuf::from(f)),
        None => None,
    };
    if token_file.is_none() && raw.x509.is_empty() && raw.issuers.is_empty() {
        issues.add(
            "auth",
            "names no token_file, [[auth.x509]] or [[auth.issuers]] (remove [auth] to turn authentication off)",
        );
    }
    let mut x509 = Vec::new();
    for (i, r) in raw.x509.into_iter().enumerate() {
        let key = format!("auth.x509[{i}]");
        let subject = match (r.subject, r.subject_prefix) {
            (Some(s), None) if !s.trim().is_empty() => SubjectMatch::Exact(normalise_rule_dn(&s)),
            (None, Some(p)) if !p.trim().is_empty() => SubjectMatch::Prefix(normalise_rule_dn(&p)),
            _ => {
                issues.add(
                    format!("{key}.subject"),
                    "give one of subject (a whole DN) or subject_prefix, not empty",
                );
                continue;
            }
        };
        match role_of(&r.role, r.station) {
            Ok(role) => x509.push(X509Rule { subject, role }),
            Err((field, message)) => issues.add(format!("{key}.{field}"), message),
        }
    }
    let mut issuers = Vec::new();
    for (i, r) in raw.issuers.into_iter().enumerate() {
        let key = format!("auth.issuers[{i}]");
        if !r.iss.starts_with("https://") {
            issues.add(
                format!("{key}.iss"),
                format!("`{}` is not an https:// address", r.iss),
            );
            continue;
        }
        let mut groups = Vec::new();
        for (group, role) in r.groups {
            match RoleKind::parse(&role) {
                Some(kind) => groups.push((group, kind)),
                None => issues.add(
                    format!("{key}.groups"),
                    format!(
                        "`{role}` (for `{group}`) is not one of station, mss, reader, operator"
                    ),
                ),
            }
        }
        issuers.push(IssuerSettings {
            iss: r.iss,
            audience: r.audience.filter(|a| !a.is_empty()),
            ca_file: r.ca_file.map(|f| base.join(f)),
            groups,
            station_claim: r.station_claim.unwrap_or_else(|| "sub".into()),
        });
    }
    (token_file, AuthSettings { x509, issuers })
}
