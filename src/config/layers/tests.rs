use std::ffi::OsString;

use super::*;

fn base() -> String {
    include_str!("../../../tests/fixtures/base.toml").to_string()
        + "\n[mss]\nadapter = \"http\"\nurl = \"http://127.0.0.1:7070\"\n"
}

fn env(vars: &[(&str, &str)]) -> Layers {
    Layers::from_env(
        vars.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    )
    .unwrap()
}

fn load_text(text: &str, layers: &Layers) -> Result<Loaded, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broker.toml");
    std::fs::write(&path, text).unwrap();
    load(Some(&path), layers)
}

fn source_of<'a>(loaded: &'a Loaded, key: &str) -> &'a Source {
    &(loaded.sources.iter())
        .find(|s| s.key == key)
        .unwrap()
        .source
}

#[test]
fn values_are_toml_when_they_parse_and_strings_otherwise() {
    assert_eq!(parse_value("512"), toml::Value::Integer(512));
    assert_eq!(parse_value("true"), toml::Value::Boolean(true));
    assert_eq!(parse_value("\"512\""), toml::Value::String("512".into()));
    assert_eq!(
        parse_value("127.0.0.1:9000"),
        toml::Value::String("127.0.0.1:9000".into())
    );
    // A second key smuggled after a newline is not a value: the whole text is a string.
    assert_eq!(
        parse_value("1\nother = 2"),
        toml::Value::String("1\nother = 2".into())
    );
}

#[test]
fn the_environment_overrides_the_file_and_a_flag_overrides_both() {
    let text = base() + "[server]\nlisten = \"127.0.0.1:7001\"\nmax_connections = 100\n";
    let mut layers = env(&[
        ("MSSBROKER__SERVER__LISTEN", "127.0.0.1:7002"),
        ("MSSBROKER__SERVER__MAX_CONNECTIONS", "200"),
        ("MSSBROKER__MSS__SIMULATOR__DRIVES", "3"),
        ("MSSBROKER_URL", "http://ignored"),
        ("PATH", "/usr/bin"),
    ]);
    let loaded = load_text(&text, &layers).unwrap();
    assert_eq!(loaded.settings.server.listen.to_string(), "127.0.0.1:7002");
    assert_eq!(loaded.settings.server.max_connections, 200);
    assert_eq!(
        source_of(&loaded, "server.listen"),
        &Source::Env("MSSBROKER__SERVER__LISTEN".into())
    );
    assert!(matches!(
        source_of(&loaded, "policy.p_front"),
        Source::File(_)
    ));
    layers.flag("--listen", "server.listen", "127.0.0.1:7003");
    let loaded = load_text(&text, &layers).unwrap();
    assert_eq!(loaded.settings.server.listen.to_string(), "127.0.0.1:7003");
    assert_eq!(
        source_of(&loaded, "server.listen"),
        &Source::Flag("--listen")
    );
    let keys: Vec<&str> = loaded.sources.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys.iter().filter(|k| **k == "server.listen").count(), 1);
    assert!(keys.contains(&"shares.\"analysis/higgs\""), "{keys:?}");
}

#[test]
fn an_unknown_key_or_a_wrong_type_from_the_environment_is_refused_naming_the_variable() {
    let e = load_text(&base(), &env(&[("MSSBROKER__SERVER__LISEN", "x")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("server.lisen") && e.contains("env:MSSBROKER__SERVER__LISEN"),
        "{e}"
    );
    let e = load_text(
        &base(),
        &env(&[("MSSBROKER__SERVER__MAX_CONNECTIONS", "many")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("server.max_connections")
            && e.contains("env:MSSBROKER__SERVER__MAX_CONNECTIONS"),
        "{e}"
    );
    let e = load_text(&base(), &env(&[("MSSBROKER__POLICY__P_FRONT__X", "1")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("policy.p_front is a integer, not a table"),
        "{e}"
    );
    let e = Layers::from_env([(
        OsString::from("MSSBROKER__SERVER____LISTEN"),
        OsString::from("x"),
    )])
    .unwrap_err()
    .to_string();
    assert!(e.contains("MSSBROKER__SERVER____LISTEN"), "{e}");
}

#[test]
fn a_problem_in_the_file_keeps_its_line() {
    let text = base() + "[server]\nlisten = \"127.0.0.1:7001\"\nbogus = 1\n";
    let e = load_text(&text, &env(&[("MSSBROKER__SERVER__MAX_CONNECTIONS", "5")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("bogus") && e.contains("line"), "{e}");
}

#[test]
fn a_token_file_from_the_file_is_next_to_it_and_one_from_the_environment_as_given() {
    let text = base() + "[auth]\ntoken_file = \"tokens.toml\"\n";
    let loaded = load_text(&text, &Layers::default()).unwrap();
    let file = loaded.settings.token_file.unwrap();
    assert!(
        file.is_absolute() && file.ends_with("tokens.toml"),
        "{file:?}"
    );
    let loaded = load_text(&text, &env(&[("MSSBROKER__AUTH__TOKEN_FILE", "mine.toml")])).unwrap();
    assert_eq!(loaded.settings.token_file.unwrap(), Path::new("mine.toml"));
}

#[test]
fn every_unknown_key_is_reported_with_its_line_or_layer_and_the_rest_still_validated() {
    let text = base()
        + "[server]\nlisen = \"127.0.0.1:7001\"\nmax_conections = 5\n\
           [[classification.rules]]\nstation = \"s\"\ngroup = \"mc\"\ngrop = \"mc\"\n";
    let text = text.replacen("p_back = 10", "p_back = 50", 1);
    let line = |needle: &str| {
        text.lines()
            .position(|l| l.starts_with(needle))
            .map(|i| i + 1)
            .unwrap()
    };
    let e = load_text(&text, &env(&[("MSSBROKER__USAGE__HALF_LIFE", "7")])).unwrap_err();
    let ConfigError::Invalid { issues, .. } = &e else {
        panic!("not a list of issues: {e}");
    };
    let said: Vec<String> = issues.iter().map(|i| i.to_string()).collect();
    for (key, place) in [
        ("server.lisen", format!("(line {})", line("lisen"))),
        (
            "server.max_conections",
            format!("(line {})", line("max_conections")),
        ),
        (
            "classification.rules[0].grop",
            format!("(line {})", line("grop")),
        ),
        (
            "usage.half_life",
            "(set by env:MSSBROKER__USAGE__HALF_LIFE)".into(),
        ),
    ] {
        assert!(
            said.iter()
                .any(|s| s.starts_with(&format!("{key}: unknown field")) && s.ends_with(&place)),
            "{key} {place}: {said:?}"
        );
    }
    // The file's other keys were still read and validated.
    assert!(
        said.iter().any(|s| s.starts_with("policy.p_back")),
        "{said:?}"
    );
    let unknown = said.iter().filter(|s| s.contains("unknown field")).count();
    assert_eq!(unknown, 4, "{said:?}");
}
