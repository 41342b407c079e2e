use super::*;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Read a request given as a JSON value, with a prefix for its field names.
fn parse(v: &Value, limits: &InputLimits, prefix: &str) -> Result<RequestInput, ApiError> {
    RequestInput::from_slice_at(&serde_json::to_vec(v).unwrap(), limits, prefix)
}

fn limits() -> InputLimits {
    InputLimits {
        station_rate_per_sec: 100,
        station_burst: 100,
        max_body_bytes: 1 << 20,
        max_batch: 10,
        max_size_bytes: 1 << 40,
        max_string_len: 16,
        max_path_len: 64,
        max_report_buckets: 100,
        max_bodies_in_memory_bytes: 1 << 24,
    }
}

fn good() -> Value {
    json!({"client_request_id": "c1", "station": "s", "user": "u", "file": "/f",
           "size_bytes": 10, "access_mode": "mc", "physics_group": "top"})
}

/// Both places may be given: the sequence number and the offset are kept apart, each as given;
/// the largest offset taken is the stated bound.
#[test]
fn an_offset_reads_beside_the_sequence_number() {
    let mut g = good();
    g["position"] = json!(12);
    g["offset_bytes"] = json!(MAX_OFFSET_BYTES);
    let r = parse(&g, &limits(), "").unwrap();
    assert_eq!(
        (r.extras.position, r.extras.offset_bytes),
        (Some(12), Some(MAX_OFFSET_BYTES))
    );
    let r = parse(&good(), &limits(), "").unwrap();
    assert_eq!((r.extras.position, r.extras.offset_bytes), (None, None));
}

fn field_of(v: Value) -> String {
    parse(&v, &limits(), "").unwrap_err().field.unwrap()
}

#[test]
fn parses_a_good_request() {
    let r = parse(&good(), &limits(), "").unwrap();
    assert_eq!(r.size_bytes, 10);
    assert_eq!(r.direction, Direction::Read);
    assert_eq!(r.volume, None);
}

#[test]
fn every_refusal_names_its_field() {
    let with = |k: &str, v: Value| {
        let mut g = good();
        g[k] = v;
        g
    };
    let without = |k: &str| {
        let mut g = good();
        g.as_object_mut().unwrap().remove(k);
        g
    };
    assert_eq!(field_of(without("station")), "station");
    assert_eq!(field_of(with("size_bytes", json!(0))), "size_bytes");
    assert_eq!(field_of(with("size_bytes", json!(-5))), "size_bytes");
    assert_eq!(field_of(with("size_bytes", json!(1.5))), "size_bytes");
    assert_eq!(field_of(with("size_bytes", json!("10"))), "size_bytes");
    assert_eq!(
        field_of(with("size_bytes", json!(1u64 << 41))),
        "size_bytes"
    );
    assert_eq!(field_of(with("user", json!(""))), "user");
    assert_eq!(field_of(with("user", json!("a\u{7}b"))), "user");
    assert_eq!(field_of(with("user", json!("x".repeat(17)))), "user");
    assert_eq!(field_of(with("file", json!(7))), "file");
    assert_eq!(field_of(with("direction", json!("sideways"))), "direction");
    assert_eq!(field_of(with("bogus", json!(1))), "bogus");
    let e = parse(&good(), &limits(), "requests[2].");
    assert!(e.is_ok());
    let e = parse(&with("user", json!(null)), &limits(), "requests[2].").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("requests[2].user"));
}

fn batch(v: Value) -> Result<usize, ApiError> {
    batch_items(&serde_json::to_vec(&v).unwrap(), &limits()).map(|items| items.len())
}

#[test]
fn batch_bounds() {
    assert_eq!(batch(json!({"requests": [good(), 1]})).unwrap(), 2);
    assert!(batch(json!({"requests": []})).is_err());
    let many = json!({"requests": vec![good(); 11]});
    assert_eq!(batch(many).unwrap_err().status.as_u16(), 413);
    let field = |v: Value| batch(v).unwrap_err().field.unwrap();
    assert_eq!(field(json!({"requests": 1})), "requests");
    assert_eq!(field(json!({"requests": {"a": 1}})), "requests");
    assert_eq!(field(json!({"requests": null})), "requests");
    assert_eq!(field(json!({})), "requests");
    assert_eq!(field(json!({"x": []})), "x");
    assert_eq!(field(json!([good()])), "body");
    let e = batch_items(b"{\"requests\": [{}, ", &limits()).unwrap_err();
    assert_eq!((e.status.as_u16(), e.field.as_deref()), (400, Some("body")));
    let twice = br#"{"requests": [{}], "requests": [{}]}"#;
    let e = batch_items(twice, &limits()).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("requests"));
}

#[test]
fn the_batch_is_counted_while_it_is_read() {
    // The 11th item is refused before the rest of the body is even looked at: what
    // follows it is not valid JSON, and the answer is still the 413.
    let mut body = br#"{"requests": ["#.to_vec();
    body.extend(b"{},".repeat(11));
    body.extend(b"!!! not json");
    let e = batch_items(&body, &limits()).unwrap_err();
    assert_eq!(
        (e.status.as_u16(), e.field.as_deref()),
        (413, Some("requests"))
    );
}

#[test]
fn a_repeated_key_is_refused_by_both_passes() {
    let body = br#"{"client_request_id": "c1", "station": "s", "user": "u", "file": "/f",
        "size_bytes": 10, "access_mode": "mc", "physics_group": "top", "user": "v"}"#;
    let e = RequestInput::from_slice(body, &limits()).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("user"));
    let e = RequestInput::from_slice_at(body, &limits(), "requests[4].").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("requests[4].user"));
}

#[test]
fn hidden_characters_and_blank_names_are_refused() {
    let with = |k: &str, v: &str| {
        let mut g = good();
        g[k] = json!(v);
        g
    };
    for (k, v) in [
        ("user", "   "),
        ("user", "\u{3000}"),
        ("station", "a\u{2028}b"),
        ("station", "a\u{2029}b"),
        ("physics_group", "top\u{202e}"),
        ("client_request_id", "c\u{200b}1"),
        ("user", "\u{feff}u"),
        ("file", "/f\u{202e}"),
    ] {
        assert_eq!(field_of(with(k, v)), k, "{k} = {v:?}");
        let bytes = serde_json::to_vec(&with(k, v)).unwrap();
        let e = RequestInput::from_slice(&bytes, &limits()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(k), "{k} = {v:?}");
    }
    // Letters of any script are names.
    assert!(parse(&with("user", "Łukasz Müller"), &limits(), "").is_ok());
}

#[test]
fn operands_cannot_be_options_or_climb_out() {
    for (k, v) in [
        ("file", "--library=EVIL"),
        ("file", "--get-bfid"),
        ("file", "-"),
        ("file", "/pnfs/cms/x/.."),
        ("file", "/pnfs/./x"),
        ("file", "/"),
        ("file", "/pnfs/cms/"),
        ("file", "pnfs/cms/x.dat"),
        ("file", "x.dat"),
        ("local_file", "-o"),
        ("local_file", "/data/stage/../etc/f"),
        ("bfid", "--verbose"),
        ("bfid", ".."),
    ] {
        let mut g = good();
        g[k] = json!(v);
        assert_eq!(field_of(g.clone()), k, "{k} = {v:?}");
        let bytes = serde_json::to_vec(&g).unwrap();
        let e = RequestInput::from_slice(&bytes, &limits()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(k), "{k} = {v:?}");
    }
    let mut g = good();
    g["file"] = json!("/pnfs/cms/a-b/.hidden/x..y");
    assert!(parse(&g, &limits(), "").is_ok());
}

proptest! {
    /// Arbitrary bytes never panic the parser and every refusal names a field.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = RequestInput::from_slice(&bytes, &limits()) {
            prop_assert!(e.field.is_some());
            if serde_json::from_slice::<Value>(&bytes).is_err() {
                prop_assert_eq!(e.field.as_deref(), Some("body"));
            }
        }
    }

    /// Whatever a body is changed to, the one reader either gives a request within every
    /// bound, or refuses naming a field of the request (or an unknown one it was given).
    #[test]
    fn a_request_is_within_bounds_or_refused_by_field(
        mutations in proptest::collection::vec((0usize..15, prop_oneof![
            Just(None), Just(Some(Value::Null)), any::<bool>().prop_map(|b| Some(Value::Bool(b))),
            (0u64..1 << 42).prop_map(|i| Some(json!(i))), any::<i64>().prop_map(|i| Some(json!(i))),
            "[a-z/]{0,20}".prop_map(|s| Some(Value::String(s))), ".{0,20}".prop_map(|s| Some(Value::String(s))),
            Just(Some(json!("read"))), Just(Some(json!("write"))), Just(Some(json!(2.5))),
            Just(Some(json!("expedite"))), (-1.0f64..2.0).prop_map(|f| Some(json!(f))),
        ]), 0..4),
    ) {
        let mut v = good();
        let obj = v.as_object_mut().unwrap();
        for (i, value) in mutations {
            let key = FIELDS.get(i).copied().unwrap_or("extra");
            match value {
                None => { obj.remove(key); }
                Some(x) => { obj.insert(key.to_string(), x); }
            }
        }
        let l = limits();
        match parse(&v, &l, "") {
            Ok(r) => {
                for (name, text, max) in [
                    ("client_request_id", Some(&r.client_request_id), l.max_string_len),
                    ("station", Some(&r.station), l.max_string_len),
                    ("user", Some(&r.user), l.max_string_len),
                    ("file", Some(&r.file), l.max_path_len),
                    ("access_mode", Some(&r.access_mode), l.max_string_len),
                    ("physics_group", Some(&r.physics_group), l.max_string_len),
                    ("volume", r.volume.as_ref(), l.max_string_len),
                    // '' is the default library, one not given.
                    (
                        "library",
                        Some(&r.extras.library).filter(|t| !t.is_empty()),
                        l.max_string_len,
                    ),
                    ("local_file", r.extras.local_file.as_ref(), l.max_path_len),
                    ("bfid", r.extras.bfid.as_ref(), l.max_string_len),
                ] {
                    if let Some(t) = text {
                        prop_assert!(check_value(name, t, max).is_ok(), "{} = {:?}", name, t);
                        prop_assert_eq!(Some(&Value::String(t.clone())), v.get(name));
                    }
                }
                let library_not_given = v.get("library").is_none_or(Value::is_null);
                prop_assert_eq!(r.extras.library.is_empty(), library_not_given);
                prop_assert!(r.size_bytes > 0 && r.size_bytes <= l.max_size_bytes);
                prop_assert!(r.extras.user_factor.is_none_or(|u| (0.0..=1.0).contains(&u)));
                prop_assert!(!(r.extras.bfid.is_some() && r.direction == Direction::Write));
            }
            Err(e) => {
                let field = e.field.unwrap_or_default();
                prop_assert!(FIELDS.contains(&field.as_str()) || field == "extra", "{}", field);
                prop_assert_eq!(e.status.as_u16(), 422);
            }
        }
    }

    /// Arbitrary JSON objects with the right keys but random values never panic.
    #[test]
    fn arbitrary_values_never_panic(
        values in proptest::collection::vec(prop_oneof![
            Just(Value::Null), any::<bool>().prop_map(Value::Bool), any::<i64>().prop_map(|i| json!(i)),
            any::<f64>().prop_map(|f| json!(f)), ".{0,20}".prop_map(Value::String),
        ], 9)
    ) {
        let obj: Map<String, Value> = FIELDS.iter().map(|f| f.to_string()).zip(values).collect();
        if let Err(e) = parse(&Value::Object(obj), &limits(), "") {
            prop_assert!(FIELDS.contains(&e.field.as_deref().unwrap_or("")));
        }
    }
}

/// The wording of refusals is the API's: not serde's, and without serde_json's position.
#[test]
fn refusals_are_worded_as_the_api_words_them() {
    let said = |body: &[u8]| {
        let e = RequestInput::from_slice_at(body, &limits(), "requests[1].").unwrap_err();
        (e.field.unwrap_or_default(), e.message)
    };
    let with = |k: &str, v: Value| {
        let mut g = good();
        g[k] = v;
        serde_json::to_vec(&g).unwrap()
    };
    let without = |k: &str| {
        let mut g = good();
        g.as_object_mut().unwrap().remove(k);
        serde_json::to_vec(&g).unwrap()
    };
    let cases: [(Vec<u8>, &str, &str); 17] = [
        (without("user"), "user", "is required"),
        (with("user", json!(null)), "user", "is required"),
        (with("user", json!(4)), "user", "must be a string, got a number"),
        (with("volume", json!([1])), "volume", "must be a string, got an array"),
        (with("size_bytes", json!("1")), "size_bytes", "must be an integer, got a string"),
        (with("size_bytes", json!(-1)), "size_bytes", "must be greater than 0"),
        (with("size_bytes", json!(1.5)), "size_bytes", "must be a whole number of bytes"),
        (with("direction", json!(1)), "direction", DIRECTION_VALUES),
        (with("qos", json!("fast")), "qos", QOS_VALUES),
        (with("user_factor", json!({})), "user_factor", "must be a number, got an object"),
        (br#"{"user": 1, "user": 2}"#.to_vec(), "user", "`user` is given more than once"),
        (with("bogus", json!(1)), "bogus", "unknown field `bogus`; known fields: client_request_id, station, user, file, size_bytes, access_mode, physics_group, volume, direction, library, qos, user_factor, local_file, bfid, position, offset_bytes"),
        (with("offset_bytes", json!(-1)), "offset_bytes", "must be 0 or more (bytes)"),
        (with("offset_bytes", json!("7")), "offset_bytes", "must be an integer, got a string"),
        (with("offset_bytes", json!(1.5)), "offset_bytes", "must be a whole number of bytes"),
        (
            with("offset_bytes", json!(MAX_OFFSET_BYTES + 1)),
            "offset_bytes",
            "may be at most 1000000000000000 (1 PB), got 1000000000000001",
        ),
        (
            {
                let mut g = good();
                g["direction"] = json!("write");
                g["offset_bytes"] = json!(0);
                serde_json::to_vec(&g).unwrap()
            },
            "offset_bytes",
            "only a read names an offset (a write goes to the volume's end of data)",
        ),
    ];
    for (body, field, message) in cases {
        assert_eq!(
            said(&body),
            (format!("requests[1].{field}"), message.to_string())
        );
    }
    assert_eq!(
        said(b"[1]"),
        (
            "requests[1]".to_string(),
            "must be a JSON object".to_string()
        )
    );
}

/// The CLI sends a request by serialising the same type: what it sends reads back as itself.
#[test]
fn a_serialised_request_reads_back() {
    let raw = SubmitRequest {
        client_request_id: Some("c1".into()),
        station: Some("s".into()),
        user: Some("u".into()),
        file: Some("/f".into()),
        size_bytes: Some(10),
        access_mode: Some("mc".into()),
        physics_group: Some("top".into()),
        direction: Some("write".into()),
        ..Default::default()
    };
    let bytes = serde_json::to_vec(&raw).unwrap();
    assert!(!String::from_utf8_lossy(&bytes).contains("null"));
    assert_eq!(
        serde_json::from_slice::<SubmitRequest>(&bytes).unwrap(),
        raw
    );
}

/// A body with several faults is answered with the same one always: an unknown field (the
/// first by name), else the first field in `FIELDS` order that is missing, of the wrong JSON
/// type or out of bounds, wherever it stands in the body.
#[test]
fn of_several_faults_the_first_in_field_order_is_named() {
    let field = |changes: Value| {
        let mut g = good();
        for (k, v) in changes.as_object().unwrap() {
            match v {
                Value::String(s) if s == "DELETE" => {
                    g.as_object_mut().unwrap().remove(k);
                }
                v => g[k] = v.clone(),
            }
        }
        parse(&g, &limits(), "").unwrap_err().field.unwrap()
    };
    assert_eq!(
        field(json!({"size_bytes": "x", "station": "DELETE"})),
        "station"
    );
    assert_eq!(field(json!({"local_file": [1], "file": ""})), "file");
    assert_eq!(field(json!({"qos": 1.5, "direction": "up"})), "direction");
    assert_eq!(field(json!({"bfid": {}, "zz": 1, "aa": 1})), "aa");
    assert_eq!(
        field(json!({"user_factor": "x", "size_bytes": 0})),
        "size_bytes"
    );
    assert_eq!(field(json!({"user": 1, "size_bytes": 0})), "user");
}

#[test]
fn only_an_object_is_a_request() {
    // serde's derived reading takes the required fields' values, in field order, as the same
    // request.
    let array = Value::Array(FIELDS[..7].iter().map(|k| good()[*k].clone()).collect());
    for prefix in ["", "requests[2]."] {
        let e = parse(&array, &limits(), prefix).unwrap_err();
        let want = if prefix.is_empty() {
            "body"
        } else {
            "requests[2]"
        };
        assert_eq!(
            (e.field.as_deref(), e.message.as_str()),
            (Some(want), "must be a JSON object")
        );
    }
    let spaced = format!(" \n\t{}", serde_json::to_string(&good()).unwrap());
    let r = RequestInput::from_slice_at(spaced.as_bytes(), &limits(), "").unwrap();
    assert_eq!(r.size_bytes, 10, "whitespace before the object");
}

#[test]
fn a_string_that_is_not_utf8_is_named_for_it() {
    let mut body = serde_json::to_vec(&good()).unwrap();
    let at = body.windows(4).position(|w| w == b"\"c1\"").unwrap();
    body.splice(at + 1..at + 2, [0xff, 0xfe]);
    let e = RequestInput::from_slice_at(&body, &limits(), "").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("body"));
    assert_eq!(
        e.message,
        format!("body is not valid UTF-8: invalid byte at offset {}", at + 1)
    );
    assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
}
