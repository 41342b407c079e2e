use super::*;

const GOOD: &str = r#"{"t":0.5,"client_request_id":"r1","station":"fnal-cms","user":"u","file":"/pnfs/a/1.dat","volume":"VR000001","position":7,"size_bytes":100,"access_mode":"analysis","physics_group":"higgs"}"#;

fn record() -> TraceRecord {
    TraceRecord {
        t: 0.5,
        client_request_id: "r1".into(),
        station: "fnal-cms".into(),
        user: "u".into(),
        file: "/pnfs/a/1.dat".into(),
        volume: Some("VR000001".into()),
        position: Some(7),
        offset_bytes: None,
        size_bytes: 100,
        access_mode: "analysis".into(),
        physics_group: "higgs".into(),
        direction: Direction::Read,
        cancelled_t: None,
    }
}

fn invalid(text: &str) -> (usize, String, String) {
    match read_trace(text.as_bytes()) {
        Err(TraceError::Invalid {
            line,
            field,
            message,
        }) => (line, field, message),
        other => panic!("expected an invalid line, got {other:?}"),
    }
}

#[test]
fn a_record_reads_and_writes_as_its_line() {
    let records = read_trace(format!("{GOOD}\n\n{GOOD}\n").as_bytes()).expect("reads");
    assert_eq!(records, vec![record(), record()]);
    let mut out = Vec::new();
    write_record(&record(), &mut out).expect("writes");
    assert_eq!(String::from_utf8(out).expect("utf-8"), format!("{GOOD}\n"));
}

#[test]
fn direction_is_written_only_for_writes() {
    let mut r = record();
    r.direction = Direction::Write;
    let mut out = Vec::new();
    write_record(&r, &mut out).expect("writes");
    let line = String::from_utf8(out).expect("utf-8");
    assert!(line.ends_with("\"direction\":\"write\"}\n"), "{line}");
    assert_eq!(read_trace(line.as_bytes()).expect("reads"), vec![r]);
}

#[test]
fn an_unknown_field_is_refused_naming_line_and_field() {
    let text = format!(
        "{GOOD}\n{}\n",
        GOOD.replace("\"t\":0.5", "\"t\":0.5,\"colour\":\"red\"")
    );
    let (line, field, message) = invalid(&text);
    assert_eq!((line, field.as_str()), (2, "colour"), "{message}");
}

#[test]
fn a_missing_field_is_refused_naming_it() {
    let text = GOOD.replace("\"station\":\"fnal-cms\",", "");
    let (line, field, _) = invalid(&text);
    assert_eq!((line, field.as_str()), (1, "station"));
}

/// Issue 37, item 7: `volume` and `position` may be left out, as a request leaves them out;
/// the line reads as a record without them and is written back without them. A blank volume is
/// refused, as `POST /v1/requests` refuses one.
#[test]
fn a_line_without_volume_or_position_is_a_record_without_them() {
    let bare = GOOD
        .replace("\"volume\":\"VR000001\",", "")
        .replace("\"position\":7,", "");
    let records = read_trace(bare.as_bytes()).expect("reads");
    let want = TraceRecord {
        volume: None,
        position: None,
        ..record()
    };
    assert_eq!(records, std::slice::from_ref(&want));
    let mut out = Vec::new();
    write_record(&want, &mut out).expect("writes");
    assert_eq!(String::from_utf8(out).expect("utf-8"), format!("{bare}\n"));
    let no_position = GOOD.replace("\"position\":7,", "");
    assert_eq!(
        read_trace(no_position.as_bytes()).expect("reads")[0]
            .volume
            .as_deref(),
        Some("VR000001")
    );
    let (line, field, _) = invalid(&GOOD.replace("\"VR000001\"", "\" \""));
    assert_eq!((line, field.as_str()), (1, "volume"));
}

/// Issue 38: a byte offset reads beside the sequence number and is written back after it; one
/// past 1 PB, or on a write, is refused naming `offset_bytes`, as `POST /v1/requests` refuses it.
#[test]
fn a_byte_offset_reads_beside_the_position_and_is_bounded() {
    let offset = GOOD.replace(
        "\"position\":7,",
        "\"position\":7,\"offset_bytes\":5000000000,",
    );
    let records = read_trace(offset.as_bytes()).expect("reads");
    let want = TraceRecord {
        offset_bytes: Some(5_000_000_000),
        ..record()
    };
    assert_eq!(records, std::slice::from_ref(&want));
    let mut out = Vec::new();
    write_record(&want, &mut out).expect("writes");
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        format!("{offset}\n")
    );
    let too_far = GOOD.replace("\"position\":7,", "\"offset_bytes\":1000000000000001,");
    let (line, field, _) = invalid(&too_far);
    assert_eq!((line, field.as_str()), (1, "offset_bytes"));
    let negative = GOOD.replace("\"position\":7,", "\"offset_bytes\":-1,");
    assert_eq!(invalid(&negative).1, "offset_bytes");
    let write = offset.replace("}", ",\"direction\":\"write\"}");
    assert_eq!(invalid(&write).1, "offset_bytes");
}

#[test]
fn a_wrong_type_names_its_field() {
    let text = format!(
        "{GOOD}\n{GOOD}\n{}",
        GOOD.replace("\"position\":7", "\"position\":-7")
    );
    let (line, field, _) = invalid(&text);
    assert_eq!((line, field.as_str()), (3, "position"));
    let (_, field, _) = invalid(&GOOD.replace("\"size_bytes\":100", "\"size_bytes\":\"100\""));
    assert_eq!(field, "size_bytes");
}

#[test]
fn a_decreasing_t_is_refused() {
    let text = format!("{GOOD}\n{}\n", GOOD.replace("\"t\":0.5", "\"t\":0.25"));
    let (line, field, message) = invalid(&text);
    assert_eq!((line, field.as_str()), (2, "t"), "{message}");
    // Equal times are fine.
    assert_eq!(
        read_trace(format!("{GOOD}\n{GOOD}").as_bytes())
            .expect("reads")
            .len(),
        2
    );
}

#[test]
fn a_negative_t_and_a_zero_size_are_refused() {
    let (line, field, _) = invalid(&GOOD.replace("\"t\":0.5", "\"t\":-1"));
    assert_eq!((line, field.as_str()), (1, "t"));
    let (_, field, _) = invalid(&GOOD.replace("\"size_bytes\":100", "\"size_bytes\":0"));
    assert_eq!(field, "size_bytes");
}

/// A `t` or a size so large the simulator's clock or drive times would overflow, or a transfer
/// it would step through for ever, is refused naming the field; the bounds themselves pass.
#[test]
fn a_t_or_a_size_past_its_bound_is_refused() {
    let (line, field, message) = invalid(&GOOD.replace("\"t\":0.5", "\"t\":1e14"));
    assert_eq!((line, field.as_str()), (1, "t"), "{message}");
    let (_, field, _) = invalid(&GOOD.replace("\"t\":0.5", "\"t\":1000000000.5"));
    assert_eq!(field, "t");
    let huge = GOOD.replace("\"size_bytes\":100", "\"size_bytes\":18446744073709551615");
    assert_eq!(invalid(&huge).1, "size_bytes");
    let over = GOOD.replace("\"size_bytes\":100", "\"size_bytes\":1000000000000001");
    assert_eq!(invalid(&over).1, "size_bytes");
    let at_bounds = GOOD
        .replace("\"t\":0.5", "\"t\":1000000000")
        .replace("\"size_bytes\":100", "\"size_bytes\":1000000000000000");
    let r = read_trace(at_bounds.as_bytes()).expect("the bounds are valid");
    assert_eq!((r[0].t, r[0].size_bytes), (1e9, MAX_SIZE_BYTES));
}

#[test]
fn garbage_and_trailing_text_are_refused_on_their_line() {
    let (line, _, _) = invalid(&format!("{GOOD}\nnot json\n"));
    assert_eq!(line, 2);
    let (line, field, _) = invalid(&format!("{GOOD} {{}}\n"));
    assert_eq!((line, field.as_str()), (1, "(record)"));
}

/// The format's second version: a cancelled request carries `cancelled_t`, written last and
/// read back; a first-version line (no such field) reads as a request never cancelled, and is
/// written back byte for byte; a cancel before the request's `t` is refused naming the field.
#[test]
fn a_cancel_is_read_after_its_request_and_old_traces_read_as_before() {
    assert_eq!(read_trace(GOOD.as_bytes()).expect("reads"), vec![record()]);
    let mut out = Vec::new();
    write_record(&record(), &mut out).expect("writes");
    assert_eq!(String::from_utf8(out).expect("utf-8"), format!("{GOOD}\n"));
    let cancelled = GOOD.replace('}', ",\"cancelled_t\":2.25}");
    let want = TraceRecord {
        cancelled_t: Some(2.25),
        ..record()
    };
    assert_eq!(
        read_trace(cancelled.as_bytes()).expect("reads"),
        std::slice::from_ref(&want)
    );
    let mut out = Vec::new();
    write_record(&want, &mut out).expect("writes");
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        format!("{cancelled}\n")
    );
    let early = GOOD.replace('}', ",\"cancelled_t\":0.25}");
    let (line, field, message) = invalid(&early);
    assert_eq!((line, field.as_str()), (1, "cancelled_t"), "{message}");
}
