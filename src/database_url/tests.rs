use super::*;

const SECRET: &str = "s3cr3t-pw";

/// Every way a `DatabaseUrl` or its error can be shown.
fn shown(text: &str) -> Vec<String> {
    match DatabaseUrl::parse(text) {
        Ok(url) => vec![url.to_string(), format!("{url:?}"), format!("{url:#?}")],
        Err(e) => vec![e.to_string(), format!("{e:?}")],
    }
}

fn assert_hidden(text: &str) {
    for s in shown(text) {
        assert!(!s.contains(SECRET), "{text:?} showed its password: {s}");
        assert!(!s.contains('?'), "{text:?} showed its query: {s}");
        assert!(!s.contains("read-write"), "{text:?} showed its query: {s}");
    }
}

#[test]
fn a_password_in_the_url_is_never_shown() {
    let text = format!("postgresql://broker:{SECRET}@db1:5432/mss?target_session_attrs=read-write");
    let url = DatabaseUrl::parse(&text).expect("a valid url");
    assert_eq!(url.config().get_password(), Some(SECRET.as_bytes()));
    assert_eq!(url.to_string(), "postgresql://broker@db1:5432/mss");
    assert_hidden(&text);
}

#[test]
fn a_password_in_the_query_is_never_shown() {
    let text = format!("postgresql://broker@db1/mss?password={SECRET}&sslmode=disable");
    let url = DatabaseUrl::parse(&text).expect("a valid url");
    assert_eq!(url.config().get_password(), Some(SECRET.as_bytes()));
    assert_hidden(&text);
}

#[test]
fn a_password_is_never_shown_by_an_error() {
    // Each is refused, and none of the refusals quotes the password.
    for text in [
        format!("postgresql://broker:{SECRET}@db1/mss?port=notaport"),
        format!("postgresql://broker:{SECRET}@db1/mss?frobnicate=1"),
        format!("postgresql://broker:{SECRET}@/mss"),
        format!("postgresql://:{SECRET}@db1/mss"),
        format!("postgresql://broker:{SECRET}@db1"),
        format!("postgresql://broker@db1/mss?password={SECRET}&sslmode=require"),
        format!("host=db1 user=broker dbname=mss password='{SECRET}"),
        format!("host=db1 user=broker password={SECRET} dbname"),
        format!("host=db1 user=broker password={SECRET} port=1,2,3 dbname=mss"),
        format!(
            "host=db1 sslmode=verify-full sslrootcert='/etc/ca.pem password={SECRET} dbname=mss"
        ),
    ] {
        assert!(DatabaseUrl::parse(&text).is_err(), "{text} was accepted");
        assert_hidden(&text);
    }
}

#[test]
fn each_refusal_names_what_is_wrong() {
    let cases = [
        ("postgresql://broker@db1/mss?port=x", "`port`"),
        ("postgresql://broker@db1/mss?frobnicate=1", "frobnicate"),
        ("postgresql://broker@/mss", "no host"),
        ("postgresql://db1/mss", "no user"),
        ("postgresql://broker@db1", "no database"),
        ("host=a,b,c port=1,2 user=u dbname=d", "3 hosts but 2 ports"),
        ("postgresql://u@h/d?sslmode=require", "sslmode=require"),
        ("postgresql://u@h/d?sslmode=verify-ca", "sslmode=verify-ca"),
        ("host=h user=u dbname=d sslmode=allow", "sslmode=allow"),
        (
            "postgresql://u@h/d?sslmode=verify-full",
            "needs sslrootcert",
        ),
        (
            "postgresql://u@h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "sslrootcert `/nonexistent/ca.pem`",
        ),
        (
            "postgresql://u@h/d?sslmode=verify-full&sslrootcert=system",
            "sslrootcert=system is not taken",
        ),
        (
            "postgresql://u@h/d?sslrootcert=/etc/ca.pem",
            "only with sslmode=verify-full",
        ),
        ("host='unterminated", "not a libpq connection string"),
        (
            "postgresql://u@h/d?tcp_user_timeout=10000",
            "tcp_user_timeout=10000 is read as seconds",
        ),
    ];
    for (text, named) in cases {
        let e = DatabaseUrl::parse(text).expect_err(text).to_string();
        assert!(e.contains(named), "{text}: {e} does not name {named}");
    }
}

#[test]
fn several_hosts_and_a_socket_directory_are_read_and_shown() {
    let url = DatabaseUrl::parse(
        "postgresql://broker@db1:5432,db2:5433/mss?target_session_attrs=read-write",
    )
    .expect("several hosts");
    assert_eq!(url.config().get_hosts().len(), 2);
    assert_eq!(
        url.config().get_target_session_attrs(),
        tokio_postgres::config::TargetSessionAttrs::ReadWrite
    );
    assert_eq!(url.to_string(), "postgresql://broker@db1:5432,db2:5433/mss");

    let socket = DatabaseUrl::parse("host=/run/postgresql user=broker dbname=mss port=5432")
        .expect("a socket directory");
    assert!(matches!(
        url_host(&socket),
        Host::Unix(dir) if dir == std::path::Path::new("/run/postgresql")
    ));
    assert_eq!(
        socket.to_string(),
        "postgresql://broker@%2Frun%2Fpostgresql:5432/mss"
    );
}

fn url_host(url: &DatabaseUrl) -> Host {
    url.config().get_hosts()[0].clone()
}

#[test]
fn the_timeouts_are_set_unless_the_string_sets_its_own() {
    let url = DatabaseUrl::parse("postgresql://broker@db1/mss").expect("valid");
    let c = url.config();
    assert_eq!(c.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
    assert_eq!(c.get_tcp_user_timeout(), Some(&TCP_USER_TIMEOUT));
    assert!(c.get_keepalives());
    assert_eq!(c.get_keepalives_idle(), KEEPALIVES_IDLE);
    assert_eq!(c.get_keepalives_interval(), Some(KEEPALIVES_INTERVAL));
    assert_eq!(c.get_keepalives_retries(), Some(KEEPALIVES_RETRIES));
    assert_eq!(c.get_application_name(), Some("mssbroker"));

    let own = DatabaseUrl::parse(
        "postgresql://broker@db1/mss?connect_timeout=2&tcp_user_timeout=3&keepalives_idle=7&application_name=x",
    )
    .expect("valid");
    let c = own.config();
    assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(2)));
    assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_secs(3)));
    assert_eq!(c.get_keepalives_idle(), Duration::from_secs(7));
    assert_eq!(c.get_application_name(), Some("x"));
}

#[test]
fn the_tls_settings_are_taken_out_of_either_form_and_the_rest_left_as_written() {
    let (rest, taken) = tls::taken_keys(
        "postgresql://u:pw@db1/mss?sslmode=verify-full&target_session_attrs=read-write&sslrootcert=%2Fetc%2Fca.pem",
    );
    assert_eq!(
        rest,
        "postgresql://u:pw@db1/mss?target_session_attrs=read-write"
    );
    assert_eq!(
        taken,
        [
            ("sslmode".to_string(), "verify-full".to_string()),
            ("sslrootcert".to_string(), "/etc/ca.pem".to_string())
        ]
    );
    let (rest, taken) = tls::taken_keys(
        "host=db1 sslrootcert = '/etc/my ca.pem' user=u password='a b\\'c' sslmode=verify-full dbname=mss sslcert=/c.pem sslkey=/k.pem",
    );
    assert_eq!(rest, "host=db1 user=u password='a b\\'c' dbname=mss");
    assert_eq!(
        taken,
        [
            ("sslmode".to_string(), "verify-full".to_string()),
            ("sslrootcert".to_string(), "/etc/my ca.pem".to_string()),
            ("sslcert".to_string(), "/c.pem".to_string()),
            ("sslkey".to_string(), "/k.pem".to_string())
        ]
    );
    let (rest, taken) = tls::taken_keys("postgresql://u@db1/mss?sslmode=verify-full");
    assert_eq!(rest, "postgresql://u@db1/mss");
    assert_eq!(taken.len(), 1);
}

/// A CA certificate written to a temporary file (what `sslrootcert` names).
fn a_ca_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).expect("a CA");
    let path = dir.path().join("ca.pem");
    std::fs::write(&path, ca.pem()).expect("written");
    (dir, path)
}

#[test]
fn with_verify_full_any_host_is_taken_and_plain_text_is_never_left_to_chance() {
    let (_dir, ca) = a_ca_file();
    let ca = ca.display().to_string();
    for text in [
        format!("postgresql://broker:{SECRET}@db.example.org/mss?sslmode=verify-full&sslrootcert={ca}"),
        format!("host=db1.example.org,db2.example.org user=broker dbname=mss sslmode=verify-full sslrootcert={ca} target_session_attrs=read-write"),
    ] {
        let url = DatabaseUrl::parse(&text).expect(&text);
        assert!(url.tls().is_some(), "{text}");
        assert!(url.only_loopback().is_ok(), "{text}");
        // What tokio-postgres connects with: TLS required, never a fallback to plain text.
        assert_eq!(url.config().get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        assert_hidden(&text);
        assert!(!url.to_string().contains("ca.pem"), "{url}");
    }
    let plain = DatabaseUrl::parse("postgresql://broker@db.example.org/mss").expect("parsed");
    assert!(plain.tls().is_none());
    let e = plain
        .only_loopback()
        .expect_err("plain text beyond loopback");
    assert!(e.to_string().contains("sslmode=verify-full"), "{e}");
}

/// Nothing in the rest of a string can take TLS away once it asked for `verify-full`: TLS is
/// required on the parsed settings, not by text an escape could swallow; a raw `?` in a
/// password does not move the query; a quote left open is refused; a unix socket (where
/// PostgreSQL offers no TLS) is refused rather than failing at connect.
#[test]
fn verify_full_is_kept_whatever_the_rest_of_the_string_holds() {
    let (_dir, ca) = a_ca_file();
    let ca = ca.display().to_string();
    let trailing_escape = format!(
        "host=db1.example.org user=u dbname=mss sslmode=verify-full sslrootcert={ca} password=abc\\"
    );
    match DatabaseUrl::parse(&trailing_escape) {
        Ok(url) => {
            assert!(url.tls().is_some());
            assert_eq!(
                url.config().get_ssl_mode(),
                tokio_postgres::config::SslMode::Require
            );
        }
        Err(e) => assert!(!e.to_string().contains("abc"), "{e}"),
    }
    let raw_question_mark =
        format!("postgresql://u:pa?ss@db1.example.org/mss?sslmode=verify-full&sslrootcert={ca}");
    let url = DatabaseUrl::parse(&raw_question_mark).expect("a raw ? in the password");
    assert!(url.tls().is_some());
    assert_eq!(url.config().get_password(), Some(&b"pa?ss"[..]));
    assert_eq!(url.config().get_dbname(), Some("mss"));
    assert_eq!(
        url.config().get_ssl_mode(),
        tokio_postgres::config::SslMode::Require
    );

    let open_quote = format!("host=db1 sslmode=verify-full sslrootcert='{ca} password={SECRET}");
    let e = DatabaseUrl::parse(&open_quote)
        .expect_err("an open quote")
        .to_string();
    assert!(e.contains("never closed") && !e.contains(SECRET), "{e}");

    let socket =
        format!("host=/run/postgresql user=u dbname=mss sslmode=verify-full sslrootcert={ca}");
    let e = DatabaseUrl::parse(&socket)
        .expect_err("TLS on a socket")
        .to_string();
    assert!(e.contains("unix socket"), "{e}");
}
