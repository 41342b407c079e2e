//! Who may call the broker, as configured: the roles, and the `[[auth.x509]]` and
//! `[[auth.issuers]]` rules, validated by `config` and applied by `auth` (which verifies
//! tokens and certificates against them). Here, below both, so that `config` does not import
//! `auth`.

use std::path::PathBuf;

/// What a caller may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Station(String),
    Mss,
    Reader,
    Operator,
}

impl Role {
    /// The role without its station: what an endpoint's `require` names.
    pub fn kind(&self) -> RoleKind {
        match self {
            Role::Station(_) => RoleKind::Station,
            Role::Mss => RoleKind::Mss,
            Role::Reader => RoleKind::Reader,
            Role::Operator => RoleKind::Operator,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
}

/// A role as the token file's `role` names it, parsed once when the file is loaded, so a
/// misspelt role is a load error and a misspelt `require` does not compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    Station,
    Mss,
    Reader,
    Operator,
}

impl RoleKind {
    pub const ALL: [RoleKind; 4] = [
        RoleKind::Station,
        RoleKind::Mss,
        RoleKind::Reader,
        RoleKind::Operator,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RoleKind::Station => "station",
            RoleKind::Mss => "mss",
            RoleKind::Reader => "reader",
            RoleKind::Operator => "operator",
        }
    }

    /// The role the token file's `role` string names, if any.
    pub fn parse(s: &str) -> Option<RoleKind> {
        RoleKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// The role a `role` string and an optional `station` name, as the token file and
/// `[[auth.x509]]` write them; the refusal names the field (`role` or `station`).
pub fn role_of(role: &str, station: Option<String>) -> Result<Role, (&'static str, String)> {
    let kind = RoleKind::parse(role).ok_or_else(|| {
        (
            "role",
            format!("`{role}` is not one of station, mss, reader, operator"),
        )
    })?;
    match (kind, station) {
        (RoleKind::Station, Some(s)) if !s.is_empty() => Ok(Role::Station(s)),
        (RoleKind::Station, _) => Err(("station", "a station entry names its station".into())),
        (_, Some(_)) => Err(("station", "only station entries name a station".into())),
        (RoleKind::Mss, None) => Ok(Role::Mss),
        (RoleKind::Reader, None) => Ok(Role::Reader),
        (RoleKind::Operator, None) => Ok(Role::Operator),
    }
}

/// `[[auth.x509]]` and `[[auth.issuers]]`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthSettings {
    pub x509: Vec<X509Rule>,
    pub issuers: Vec<IssuerSettings>,
}

/// How a rule matches a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubjectMatch {
    /// The whole DN.
    Exact(String),
    /// The DN ends with these RDNs (RFC 4514 order), i.e. the grid DN begins with them.
    Prefix(String),
}

/// One `[[auth.x509]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X509Rule {
    pub subject: SubjectMatch,
    pub role: Role,
}

impl X509Rule {
    pub fn matches(&self, dn: &str) -> bool {
        match &self.subject {
            SubjectMatch::Exact(s) => dn == s,
            SubjectMatch::Prefix(p) => {
                dn == p
                    || dn
                        .strip_suffix(p.as_str())
                        .is_some_and(|h| h.ends_with(','))
            }
        }
    }
}

/// A DN as a rule writes it, in RFC 4514 form: a grid DN (`/DC=ch/DC=cern/CN=x`) is reversed
/// and joined by commas; spaces after commas are dropped.
pub fn normalise_rule_dn(s: &str) -> String {
    let s = s.trim();
    if let Some(grid) = s.strip_prefix('/') {
        let mut rdns: Vec<&str> = grid.split('/').filter(|r| !r.is_empty()).collect();
        rdns.reverse();
        return rdns.join(",");
    }
    s.split(',').map(str::trim).collect::<Vec<_>>().join(",")
}

/// One `[[auth.issuers]]` entry, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerSettings {
    pub iss: String,
    pub audience: Option<String>,
    pub ca_file: Option<PathBuf>,
    /// `wlcg.groups` entries and the roles they give.
    pub groups: Vec<(String, RoleKind)>,
    /// The claim naming a station token's station.
    pub station_claim: String,
}
