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
