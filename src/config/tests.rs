use super::*;
use crate::domain::GroupKind;

fn base() -> String {
    r#"
[policy]
p_front = 20
p_back = 10

[[priority_classes]]
access_mode = "datataking"
mss_priority = 100

[shares]
analysis = 40
"analysis/higgs" = 1
"analysis/top" = 3
reprocessing = 30
mc = 30

[mss]
adapter = "http"
url = "http://127.0.0.1:7070"
"#
    .to_string()
}

fn issues(text: &str) -> Vec<String> {
    match Settings::parse(text, "test") {
        Ok(_) => vec![],
        Err(ConfigError::Invalid { issues, .. }) => issues.iter().map(|i| i.to_string()).collect(),
        Err(e) => vec![e.to_string()],
    }
}

#[test]
fn shipped_config_is_valid() {
    let s = Settings::parse(SHIPPED, "embedded").expect("shipped config must validate");
    assert!(!s.policy.groups.is_empty());
}

/// The simulator's default retries (`RetrySettings::default`, for runs without a configuration)
/// are `[mss]`'s defaults, and the shipped file sets the same.
#[test]
fn retry_defaults_agree_with_the_mss_defaults() {
    let parsed = Settings::parse(&base(), "test").expect("valid");
    assert_eq!(parsed.mss.retry, crate::domain::RetrySettings::default());
    let shipped = Settings::parse(SHIPPED, "embedded").expect("valid");
    assert_eq!(shipped.mss.retry, crate::domain::RetrySettings::default());
}

#[test]
fn a_weight_that_could_overflow_a_request_benefit_is_refused() {
    let with = |weight: i64, max_size: i64| {
        base().replace(
            "p_back = 10",
            &format!(
                "p_back = 10\nbenefit = \"weighted_bytes\"\n\
                 [policy.benefit_weights]\nreprocessing = {weight}\n\
                 [limits]\nmax_size_bytes = {max_size}"
            ),
        )
    };
    // 10^14 bytes (the shipped maximum): 92233 * 10^14 < 2^63 <= 92234 * 10^14.
    assert_eq!(
        issues(&with(92_233, 100_000_000_000_000)),
        Vec::<String>::new()
    );
    let found = issues(&with(92_234, 100_000_000_000_000));
    assert!(
        found
            .iter()
            .any(|i| i.starts_with("policy.benefit_weights.reprocessing:")
                && i.contains("at most 92233")),
        "{found:?}"
    );
    assert_eq!(issues(&with(1, i64::MAX)), Vec::<String>::new());
    assert_eq!(issues(&with(2, i64::MAX)).len(), 1);
}

#[test]
fn leaf_fractions_are_products_down_the_path() {
    let s = Settings::parse(&base(), "t").unwrap();
    let frac = |p: &str| match s.policy.group(s.policy.group_by_path(p).unwrap()).kind {
        GroupKind::FairShare { share } => (share.num(), share.den()),
        _ => panic!("not fair share"),
    };
    assert_eq!(frac("analysis/higgs"), (1, 10));
    assert_eq!(frac("analysis/top"), (3, 10));
    assert_eq!(frac("mc"), (3, 10));
    assert!(s.policy.group_by_path("analysis").is_none(), "inner node");
}

#[test]
fn server_limits_out_of_range_are_refused_naming_the_key() {
    let t = format!(
        "[server]\nmax_connections = 0\nheader_read_timeout_ms = 0\n\
         idle_timeout_ms = -5\nbody_timeout_ms = 99999999999\n{}",
        base()
    );
    let found = issues(&t);
    for key in [
        "server.max_connections:",
        "server.header_read_timeout_ms:",
        "server.idle_timeout_ms:",
        "server.body_timeout_ms:",
    ] {
        assert!(found.iter().any(|i| i.starts_with(key)), "{key} {found:?}");
    }
    let t = format!(
        "[server]\nheader_read_timeout_ms = 5000\nidle_timeout_ms = 1000\n{}",
        base()
    );
    assert!(issues(&t)
        .iter()
        .any(|i| i.starts_with("server.idle_timeout_ms: may not be below")));
    let s = Settings::parse(&base(), "t").unwrap();
    assert_eq!(s.server.max_connections, 512);
}

#[test]
fn priorities_must_be_ordered() {
    let t = base().replace("p_front = 20", "p_front = 100");
    let found = issues(&t);
    assert!(
        found.iter().any(|i| i.starts_with("policy.p_front:")),
        "{found:?}"
    );
    let t = base().replace("p_back = 10", "p_back = 20");
    assert!(issues(&t).iter().any(|i| i.starts_with("policy.p_back:")));
}

#[test]
fn errors_name_their_keys() {
    let t = base()
        .replace("\"analysis/top\" = 3", "\"analysis/top\" = -3\n\"x/y\" = 1")
        .replace("url = \"http://127.0.0.1:7070\"", "url = \"ftp://x\"");
    let found = issues(&t);
    assert!(
        found
            .iter()
            .any(|i| i.starts_with("shares.\"analysis/top\":")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|i| i.starts_with("shares.\"x/y\": its parent")),
        "{found:?}"
    );
    assert!(found.iter().any(|i| i.starts_with("mss.url:")), "{found:?}");
}

#[test]
fn unknown_keys_are_refused() {
    let t = base().replace("[policy]", "[policy]\nfrobnicate = 1");
    let found = issues(&t);
    assert!(found.iter().any(|i| i.contains("frobnicate")), "{found:?}");
}

#[test]
fn rules_must_name_a_leaf() {
    let t = format!(
        "{}\n[[classification.rules]]\nstation = \"s\"\ngroup = \"analysis\"\n",
        base()
    );
    let found = issues(&t);
    assert!(
        found
            .iter()
            .any(|i| i.starts_with("classification.rules[0].group:")),
        "{found:?}"
    );
}

mod fuzz {
    use super::super::*;
    use proptest::prelude::*;

    fn check(text: &str) -> Result<(), TestCaseError> {
        match Settings::parse(text, "fuzz") {
            Ok(_) => {}
            Err(ConfigError::Invalid { issues, .. }) => {
                prop_assert!(!issues.is_empty());
                for i in issues {
                    prop_assert!(!i.key.is_empty() && !i.message.is_empty(), "{:?}", i);
                }
            }
            Err(ConfigError::Syntax { message, .. }) => prop_assert!(!message.is_empty()),
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
        Ok(())
    }

    proptest! {
        /// Arbitrary text never panics the parser.
        #[test]
        fn arbitrary_text(text in "\\PC{0,400}") {
            check(&text)?;
        }

        /// The shipped config with random values put in place of its numbers is either valid
        /// or refused with every problem naming its key.
        #[test]
        fn shipped_config_with_random_numbers(
            values in proptest::collection::vec(prop_oneof![
                any::<i64>().prop_map(|v| v.to_string()),
                (-3i64..3).prop_map(|v| v.to_string()),
                any::<f64>().prop_map(|v| format!("{v:?}")),
                Just("\"text\"".to_string()),
            ], 40)
        ) {
            let mut values = values.into_iter();
            let text: String = SHIPPED
                .lines()
                .map(|line| {
                    let is_number = line.split_once(" = ").is_some_and(|(_, v)| v.parse::<f64>().is_ok());
                    match (is_number, line.split_once(" = ")) {
                        (true, Some((k, _))) => format!("{k} = {}", values.next().unwrap_or_default()),
                        _ => line.to_string(),
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            check(&text)?;
        }
    }
}

/// `[server.tls]`, `plain_http`, `trusted_proxies`, `[[auth.x509]]` and `[[auth.issuers]]`:
/// each refusal names its key.
#[test]
fn secure_deployment_keys_are_refused_by_name() {
    let server = |extra: &str| format!("[server]\n{extra}\n{}", base());
    for (text, key) in [
        (server("plain_http = \"open\""), "server.plain_http"),
        (
            server("plain_http = \"behind_proxy\"\ntrusted_proxies = [\"10.0.0.0/33\"]"),
            "server.trusted_proxies[0]",
        ),
        (
            server("trusted_proxies = [\"10.0.0.1\"]"),
            "server.trusted_proxies",
        ),
        (server("[server.tls]\ncert = \"c.pem\""), "server.tls.key"),
        (
            server("[server.tls]\nclient_ca = \"ca\""),
            "server.tls.cert",
        ),
        (
            base() + "[auth]\n[[auth.x509]]\nsubject = \"CN=a\"\nrole = \"reader\"\n",
            "auth.x509",
        ),
        (
            server("[server.tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"")
                + "[auth]\n[[auth.x509]]\nrole = \"reader\"\n",
            "auth.x509[0].subject",
        ),
        (
            server("[server.tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"")
                + "[auth]\n[[auth.x509]]\nsubject = \"CN=a\"\nrole = \"station\"\n",
            "auth.x509[0].station",
        ),
        (
            base() + "[auth]\n[[auth.issuers]]\niss = \"http://iam.example.org/\"\n",
            "auth.issuers[0].iss",
        ),
        (
            base()
                + "[auth]\n[[auth.issuers]]\niss = \"https://iam.example.org/\"\n\
                   groups = { \"/cms\" = \"king\" }\n",
            "auth.issuers[0].groups",
        ),
        (base() + "[auth]\n", "auth"),
    ] {
        let found = issues(&text);
        assert!(
            found.iter().any(|i| i.starts_with(&format!("{key}:"))),
            "{key}: {found:?}"
        );
    }
    let ok = server(
        "plain_http = \"behind_proxy\"\ntrusted_proxies = [\"10.0.0.0/24\", \"::1\"]\n\
         [server.tls]\nclient_ca = \"/etc/grid-security/certificates\"",
    ) + "[auth]\n[[auth.x509]]\nsubject_prefix = \"/DC=ch/DC=cern/OU=Users\"\nrole = \"reader\"\n";
    let s = Settings::parse(&ok, "test").expect("valid");
    assert_eq!(s.server.trusted_proxies.len(), 2);
    assert!(s.server.trusted_proxies[0].contains("10.0.0.7".parse().unwrap()));
    assert!(!s.server.trusted_proxies[0].contains("10.0.1.7".parse().unwrap()));
    assert!(s.token_file.is_none() && s.auth.x509.len() == 1);
}

/// `[database] url`: a loopback or unix-socket PostgreSQL is taken and shown without its
/// password; an unreadable string, one missing a part, or a host beyond loopback is refused
/// naming `database.url`, never quoting the password.
#[test]
fn a_database_url_is_checked_naming_the_key_and_never_shown_with_its_password() {
    let with = |url: &str| format!("{}\n[database]\nurl = \"{url}\"\n", base());
    let ok = Settings::parse(
        &with("postgresql://broker:s3cret@127.0.0.1:5432/mss?target_session_attrs=read-write"),
        "test",
    )
    .expect("a loopback url");
    let url = ok.database.url.as_ref().expect("the url kept");
    assert_eq!(url.to_string(), "postgresql://broker@127.0.0.1:5432/mss");
    assert!(!format!("{ok:?}").contains("s3cret"), "{ok:?}");
    let socket = Settings::parse(
        &with("host=/run/postgresql user=broker dbname=mss password=s3cret"),
        "test",
    )
    .expect("a unix socket");
    assert!(socket.database.url.is_some());
    assert!(Settings::parse(&base(), "test")
        .unwrap()
        .database
        .url
        .is_none());

    for (url, says) in [
        (
            "postgresql://broker:s3cret@db.example.org/mss",
            "db.example.org",
        ),
        ("postgresql://broker:s3cret@127.0.0.1/", "no database name"),
        (
            "postgresql://broker:s3cret@127.0.0.1/mss?bogus=1",
            "unknown option",
        ),
        ("postgresql://broker:s3cret@[::1/mss", ""),
    ] {
        let got = issues(&with(url));
        assert_eq!(got.len(), 1, "{url}: {got:?}");
        assert!(got[0].starts_with("database.url: "), "{url}: {got:?}");
        assert!(got[0].contains(says), "{url}: {got:?}");
        assert!(!got[0].contains("s3cret"), "{url}: {got:?}");
    }
}
