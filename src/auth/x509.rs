//! Client certificates as callers: a verified certificate's subject, written as RFC 4514 says
//! (`CN=Jane Doe,OU=Users,DC=cern,DC=ch`: the last RDN first), is looked up in the
//! `[[auth.x509]]` rules: `subject` matches the whole DN, `subject_prefix` the RDNs a grid
//! DN begins with (`/DC=ch/DC=cern/OU=Users`), which RFC 4514 writes last. Rules may be written
//! in either form: one starting with `/` is the OpenSSL/grid form and is converted.
//! The first matching rule gives the role.

use x509_parser::prelude::*;

pub use crate::domain::auth::{normalise_rule_dn, SubjectMatch, X509Rule};

use super::Principal;

/// The caller a verified certificate's subject maps to, if any rule names it.
pub fn principal_for(rules: &[X509Rule], dn: &str) -> Option<Principal> {
    rules.iter().find(|r| r.matches(dn)).map(|r| Principal {
        name: format!("x509:{dn}"),
        role: r.role.clone(),
        scope: None,
    })
}

/// The subject of a DER certificate in RFC 4514 form.
pub fn subject_of(der: &[u8]) -> Result<String, String> {
    let (_, cert) = X509Certificate::from_der(der)
        .map_err(|e| format!("the client certificate cannot be parsed: {e}"))?;
    Ok(rfc4514(cert.subject()))
}

/// Whether a DER certificate is an RFC 3820 proxy certificate (it has a ProxyCertInfo
/// extension; the legacy and draft proxy OIDs too).
pub fn is_proxy(der: &[u8]) -> bool {
    const PROXY_OIDS: [&str; 2] = ["1.3.6.1.5.5.7.1.14", "1.3.6.1.4.1.3536.1.222"];
    X509Certificate::from_der(der).is_ok_and(|(_, c)| {
        c.extensions()
            .iter()
            .any(|e| PROXY_OIDS.contains(&e.oid.to_id_string().as_str()))
    })
}

/// The subject public key info (DER) of a proxy certificate; `None` for any other.
pub fn proxy_public_key(der: &[u8]) -> Option<Vec<u8>> {
    if !is_proxy(der) {
        return None;
    }
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(cert.public_key().raw.to_vec())
}

/// A name in RFC 4514 form: RDNs last to first, joined by `,`; multi-valued RDNs by `+`.
pub fn rfc4514(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let key = short_name(&oid).map_or(oid.clone(), str::to_string);
                    let value = atv
                        .as_str()
                        .map(escape)
                        .unwrap_or_else(|_| format!("#{}", hex(atv.attr_value().data)));
                    format!("{key}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// RFC 4514's short names (section 3) and those grid DNs use.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// RFC 4514 section 2.4's escaping.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    #[test]
    fn grid_dns_become_rfc4514_and_prefixes_match_whole_rdns() {
        assert_eq!(
            normalise_rule_dn("/DC=ch/DC=cern/OU=Users/CN=jdoe"),
            "CN=jdoe,OU=Users,DC=cern,DC=ch"
        );
        assert_eq!(normalise_rule_dn("CN=a, O=b"), "CN=a,O=b");
        let rule = X509Rule {
            subject: SubjectMatch::Prefix(normalise_rule_dn("/DC=ch/DC=cern/OU=Users")),
            role: Role::Reader,
        };
        assert!(rule.matches("CN=jdoe,OU=Users,DC=cern,DC=ch"));
        assert!(!rule.matches("CN=jdoe,OU=XUsers,DC=cern,DC=ch"));
        assert!(!rule.matches("CN=jdoe,OU=Users,DC=cern,DC=org"));
        assert_eq!(escape("a,b "), "a\\,b\\ ");
    }
}
