//! The tidy test: every mechanically checkable rule of ARCHITECTURE.md's "Architecture
//! invariants", run against the source tree, so a change that breaks one fails CI. Each test is
//! named after its invariant (ARCHITECTURE names the test), and its failure says which
//! invariant broke and where (`path:line: text`).
//!
//! The tree is read with `std::fs` (`source.rs`), and what is test code is known by structure:
//! `#[cfg(test)]` items and the module files they declare, never a list of file names.
//! The same shape as rust-analyzer's `tidy.rs`: plain tests over the files, no tool to install.

mod dialect;
mod find;
mod lex;
mod scan;
mod shape;
mod source;

use find::{
    assert_found, assert_none, code, crate_modules, fn_body, imports, outside, text, top_module,
};
use source::{fn_name, tree, Hit};

#[test]
fn every_source_file_is_in_a_module_tree() {
    // Otherwise a file's test or product status is unknown and the checks below miss it.
    let unreached = &tree().unreached;
    assert!(
        unreached.is_empty(),
        "no `mod` declaration reaches: {unreached:?}"
    );
}

/// Every `.rs` file of the crates' `src/` directories, reached or not.
fn crate_source_files() -> impl Iterator<Item = &'static str> {
    let reached = tree().files.iter().map(|f| f.path.as_str());
    reached
        .chain(tree().unreached.iter().map(String::as_str))
        .filter(|p| p.starts_with("src/") || p.starts_with("adapters/src/"))
}

#[test]
fn one_module_layout() {
    // A module with children is `foo.rs` beside `foo/`, never `foo/mod.rs`.
    let mod_rs: Vec<&str> = crate_source_files()
        .filter(|p| p.ends_with("/mod.rs"))
        .collect();
    assert!(
        mod_rs.is_empty(),
        "invariant broken: One module layout, `foo.rs` + `foo/` (move each to its folder's name):\n  {}",
        mod_rs.join("\n  ")
    );
}

#[test]
fn test_modules_are_named_tests() {
    // A module's unit tests are its child `tests`: `foo/tests.rs`, or files under `foo/tests/`.
    let named_tests = |p: &str| p.ends_with("/tests.rs") || p.contains("/tests/");
    let misnamed: Vec<&str> = tree()
        .files
        .iter()
        .filter(|f| f.unit_test && !named_tests(&f.path))
        .map(|f| f.path.as_str())
        .collect();
    assert!(
        misnamed.is_empty(),
        "invariant broken: Test modules are named `tests` (`foo/tests.rs` or under `foo/tests/`):\n  {}",
        misnamed.join("\n  ")
    );
}

#[test]
fn no_product_file_over_600_lines_nor_function_over_80() {
    // The shape issue 41 asks for, as `scripts/code-shape` measures it (test code excluded).
    let (files, fns) = (shape::long_files(), shape::long_functions());
    assert!(
        files.is_empty() && fns.is_empty(),
        "invariant broken: No product file over {} lines, no product function over {} \
         (split the file along a seam; name the function's steps):\n  {}",
        shape::FILE_MAX,
        shape::FN_MAX,
        files
            .iter()
            .chain(&fns)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

#[test]
fn only_start_up_imports_config() {
    const START_UP: &[&str] = &[
        "config",
        "startup",
        "cli",
        "bench",
        "bench_explain",
        "bench_report",
        "main",
    ];
    let hits = imports("src", &["config"])
        .into_iter()
        .filter(|h| !START_UP.contains(&top_module(&h.file.path)));
    assert_none(
        "Only start-up imports `crate::config` (tests may)",
        hits.collect(),
    );
}

/// ARCHITECTURE's layer picture, bottom first (`scripts/code-shape`'s `LAYERS` is the same).
const LAYERS: &[&[&str]] = &[
    &[
        "domain",
        "clock",
        "hidden_text",
        "text_table",
        "request_scope",
        "database_url",
    ],
    &["shares", "policy", "trace", "simulate"],
    &["config"],
    &[
        "ledger",
        "leadership",
        "report",
        "auth",
        "tls",
        "live_settings",
        "dispatcher",
        "api",
        "metrics",
        "readiness",
        "office",
    ],
    &["server", "telemetry"],
    &[
        "startup",
        "cli",
        "bench",
        "bench_explain",
        "bench_report",
        "main",
    ],
];

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let layer = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let mut unplaced: Vec<&str> = tree()
        .product("src")
        .map(|h| top_module(&h.file.path))
        .filter(|&m| m != "lib" && layer(m).is_none())
        .collect();
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "modules missing from the layer picture (LAYERS here, ARCHITECTURE, scripts/code-shape): {unplaced:?}"
    );
    let hits = tree()
        .product("src")
        .filter(|h| {
            let from = top_module(&h.file.path);
            crate_modules(&h.line.code)
                .iter()
                .any(|&to| layer(to) > layer(from))
        })
        .collect();
    assert_none("No module imports one from a layer above its own", hits);
}

#[test]
fn the_domain_depends_on_nothing_in_the_crate() {
    let hits: Vec<Hit> = tree()
        .product("src/domain")
        .filter(|h| crate_modules(&h.line.code).iter().any(|&m| m != "domain"))
        .collect();
    assert_none("The domain depends on nothing in the crate", hits);
}

#[test]
fn shares_does_not_depend_on_policy() {
    assert_none(
        "`shares` does not depend on `policy`",
        imports("src/shares", &["policy"]),
    );
}

#[test]
fn the_writer_changes_its_policy_only_between_two_commits() {
    let invariant = "The writer changes its policy only between two commits (`put_in_force`)";
    let hits = code("src/ledger", "self.policy = ");
    assert_found(invariant, "`self.policy = ` in put_in_force", &hits);
    assert_none(
        invariant,
        outside(hits, &[("src/ledger/writer/reload.rs", "put_in_force")]),
    );
}

#[test]
fn each_config_default_is_stated_once() {
    // No `fn d_x()` / `fn default_x()` beside the one `impl Default` or the field's default.
    let hits = tree()
        .product("src/config")
        .filter(|h| {
            fn_name(&h.line.code).is_some_and(|n| n.starts_with("d_") || n.starts_with("default_"))
        })
        .filter(|h| {
            h.line
                .code
                .contains(&format!("{}()", fn_name(&h.line.code).unwrap_or_default()))
        })
        .collect();
    assert_none("Each config default is stated once", hits);
}

/// Product lines of `scope` that open a file or read a clock.
fn io_or_clock(scope: &str) -> Vec<Hit<'_>> {
    const IO: &[&str] = &["std::fs", "Instant", "SystemTime"];
    tree()
        .product(scope)
        .filter(|h| IO.iter().any(|w| h.line.code.contains(w)))
        .collect()
}

#[test]
fn trace_opens_no_file_and_reads_no_clock() {
    assert_none(
        "`trace` opens no file and reads no clock",
        io_or_clock("src/trace"),
    );
}

#[test]
fn simulate_opens_no_file_and_reads_no_clock() {
    assert_none(
        "`simulate` opens no file and reads no clock",
        io_or_clock("src/simulate"),
    );
}

#[test]
fn policy_is_pure() {
    let mut hits = io_or_clock("src/policy");
    for io in ["std::net", "std::io", "tokio", "reqwest", "rusqlite"] {
        hits.extend(code("src/policy", io));
    }
    assert_none(
        "Policy is pure: `policy/` does no I/O and reads no clock",
        hits,
    );
}

#[test]
fn only_the_ledger_touches_sqlite() {
    let hits = tree()
        .lines("src")
        .filter(|h| h.line.code.contains("rusqlite") && top_module(&h.file.path) != "ledger")
        .collect();
    assert_none("Only `ledger` touches SQLite", hits);
}

#[test]
fn the_ledgers_shared_sql_is_portable() {
    // What a PostgreSQL ledger will run too (docs/ha.md, "The port"): no spelling only SQLite
    // takes, outside the files that stay SQLite's (`dialect::SQLITE_ONLY`).
    let hits = dialect::sqlite_only_spellings();
    let lines: Vec<String> = hits
        .iter()
        .map(|(h, fix)| format!("  {h}\n    write {fix}"))
        .collect();
    assert!(
        lines.is_empty(),
        "invariant broken: The ledger's shared SQL is portable (SQLite-only spellings only in \
         schema, backup, restore and the `Db` layer):\n{}",
        lines.join("\n")
    );
}

#[test]
fn only_the_sqlite_files_name_rusqlite() {
    // The ledger runs its SQL through `ledger::db` (docs/ha.md, step 3), so a PostgreSQL
    // backend is a variant there, not an edit of every file: only the layer and the SQLite-only
    // files (`dialect::NAMES_RUSQLITE`) name rusqlite.
    let lines: Vec<String> = (dialect::rusqlite_outside_the_db_layer().iter())
        .map(|h| format!("  {h}"))
        .collect();
    assert!(
        lines.is_empty(),
        "invariant broken: Only the `Db` layer and the SQLite-only files of the ledger name \
         rusqlite (use `ledger::db`, or its escape hatch `Db::sqlite()` in a SQLite-only file):\n{}",
        lines.join("\n")
    );
}

/// Where the rules a request follows when it changes state live, each once.
const TRANSITIONS: &str = "src/policy/transition.rs";

/// Where the re-prioritisation pass's rules live (a child of `TRANSITIONS`).
const REPRIORITISE: &str = "src/policy/transition/reprioritise.rs";

/// The public functions of `scope`: one per rule.
fn rules_in(scope: &'static str) -> Vec<&'static str> {
    tree()
        .product(scope)
        .filter(|h| h.line.code.trim_start().starts_with("pub fn "))
        .filter_map(|h| fn_name(&h.line.code))
        .collect()
}

/// The public functions of `TRANSITIONS`: one per rule.
fn transition_rules() -> Vec<&'static str> {
    rules_in(TRANSITIONS)
}

#[test]
fn the_simulator_has_no_transition_rule_of_its_own() {
    let invariant = "The simulator applies the writer's transition rules (`policy::transition`), \
                     defining none of its own";
    let rules = transition_rules();
    let pass_rules = rules_in(REPRIORITISE);
    assert_found(
        invariant,
        "the rules in policy/transition.rs",
        &code(TRANSITIONS, "pub fn may_ride"),
    );
    assert_found(
        invariant,
        "the re-prioritisation pass in policy/transition/reprioritise.rs",
        &code(REPRIORITISE, "pub fn reprioritise_pass"),
    );
    // Simulate defines none of the rules, nor the copies it had: the writer's `may_carry`, the
    // retry condition (`left`), the ride condition (`may_ride_on`), the charge re-dating
    // (`settle`); nor the pass's limit, nor anything of the dispatcher.
    const COPIES: &[&str] = &["may_ride_on", "left", "settle", "retries"];
    let defined = tree().lines("src/simulate").filter(|h| {
        fn_name(&h.line.code)
            .is_some_and(|n| rules.contains(&n) || pass_rules.contains(&n) || COPIES.contains(&n))
    });
    let limit = (code("src", "const REPRIORITISE_BATCH").into_iter())
        .filter(|h| h.file.path != TRANSITIONS);
    let upward = imports("src/simulate", &["dispatcher", "ledger"]);
    assert_none(invariant, defined.chain(limit).chain(upward).collect());
    // The writer and the simulator both call each rule (the simulator keeps no error texts).
    for rule in &rules {
        let call = format!("{rule}(");
        let writer = code("src/ledger", &call);
        assert_found(invariant, &format!("the writer's call of {rule}"), &writer);
        if *rule != "final_failure" {
            let sim = code("src/simulate", &call);
            assert_found(invariant, &format!("the simulator's call of {rule}"), &sim);
        }
    }
    // A rider takes its carrier's outcome by one rule: both `carrier_ended`s ask
    // `riders_follow`, and no other file words a rider's error.
    for path in [
        "src/ledger/writer/coalesce.rs",
        "src/simulate/engine/coalesce.rs",
    ] {
        let body = fn_body(invariant, path, "carrier_ended");
        let asks = (body.iter().copied())
            .filter(|h| h.line.code.contains("riders_follow("))
            .collect::<Vec<_>>();
        assert_found(
            invariant,
            &format!("riders_follow( in {path}'s carrier_ended"),
            &asks,
        );
    }
    let worded =
        (text("src", "its carrier, request").into_iter()).filter(|h| h.file.path != TRANSITIONS);
    assert_none(invariant, worded.collect());
    the_pass_is_decided_once(invariant);
}

/// The re-prioritisation pass (who gets which new priority, in what order, how many) is decided
/// by `transition::reprioritise_pass` and its parts: the live side asks the whole pass; the
/// simulator's index asks its parts (who, the priority now, which changes are sent) and places
/// nothing itself, and its test code checks it against the whole pass.
fn the_pass_is_decided_once(invariant: &str) {
    let whole = fn_body(invariant, REPRIORITISE, "reprioritise_pass");
    for part in ["replaced(", "pass_changes("] {
        let asks: Vec<Hit> = (whole.iter().copied())
            .filter(|h| h.line.code.contains(part))
            .collect();
        assert_found(
            invariant,
            &format!("reprioritise_pass asking {part}"),
            &asks,
        );
    }
    const LIVE: &str = "src/ledger/live.rs";
    let live = fn_body(invariant, LIVE, "reprioritise");
    let asks =
        |hits: &[Hit], call: &str| -> bool { hits.iter().any(|h| h.line.code.contains(call)) };
    for call in ["reprioritise_pass(", "reprioritised("] {
        assert!(
            asks(&live, call),
            "invariant broken: {invariant}\n  not found: {call} in {LIVE}'s reprioritise"
        );
    }
    for call in ["reprioritised(", "priority_now(", "pass_changes("] {
        assert_found(
            invariant,
            &format!("the simulator's call of {call}"),
            &code("src/simulate", call),
        );
    }
    const SIM: &str = "src/simulate/engine/reprioritise.rs";
    let checked: Vec<Hit> = tree()
        .lines(SIM)
        .filter(|h| h.line.test && h.line.code.contains("reprioritise_pass("))
        .collect();
    assert_found(
        invariant,
        "the simulator's passes checked against reprioritise_pass",
        &checked,
    );
    // Nobody else places a waiting request: no `place(` in the live pass, and the simulator's
    // pass and index neither import `order::place` nor ask `mss_priority_until`.
    let imports_place = |h: &Hit| {
        let code = h.line.code.trim_start();
        code.starts_with("use ")
            && code.contains("order::")
            && code
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == "place")
    };
    let index = [
        "src/simulate/pending_at_library.rs",
        "src/simulate/pending_at_library",
    ];
    let sim = (tree().product(SIM)).chain(index.into_iter().flat_map(|p| tree().product(p)));
    let own: Vec<Hit> = (live.into_iter())
        .filter(|h| h.line.code.contains("place("))
        .chain(sim.filter(|h| imports_place(h) || h.line.code.contains("mss_priority_until")))
        .collect();
    assert_none(invariant, own);
}

#[test]
fn the_simulator_dates_charges_as_the_writer_does() {
    let invariant = "The simulator dates charges as the writer does";
    fn_body(invariant, "src/simulate/engine/charge.rs", "settle_charge");
    let pin = "fn a_charge_is_re_dated_when_its_transfer_ends";
    let tests: Vec<Hit> = tree()
        .lines("src/simulate")
        .filter(|h| h.line.test && h.line.code.contains(pin))
        .collect();
    assert_found(
        invariant,
        "the test a_charge_is_re_dated_when_its_transfer_ends",
        &tests,
    );
}

#[test]
fn nothing_is_sent_to_the_mss_unmarked() {
    let invariant =
        "Nothing is sent to the MSS unmarked (`mark_sending`, `keep_marked`, then `submit_batch`)";
    let body = fn_body(invariant, "src/dispatcher/submit.rs", "submit_once");
    let first = |needle: &str| body.iter().position(|h| h.line.code.contains(needle));
    let (sending, kept, sent) = (
        first(".mark_sending("),
        first("keep_marked("),
        first("self.adapter.submit_batch"),
    );
    let in_order = matches!((sending, kept, sent), (Some(a), Some(b), Some(c)) if a < b && b < c);
    assert!(in_order, "invariant broken: {invariant}\n  in {}", body[0]);
}

#[test]
fn a_deferred_send_does_not_head_the_next_batch() {
    let invariant = "A deferred send does not head the next batch";
    assert_found(
        invariant,
        "MssError::Deferred",
        &code("src/dispatcher/submit.rs", "MssError::Deferred"),
    );
    // The larger of the instant kept and the new one: SQLite's `MAX`, PostgreSQL's `GREATEST`,
    // through the dialect fragment `[greatest]`.
    let held_back = text(
        "src/ledger/writer/sends.rs",
        "[greatest \"next_attempt_ms\"",
    );
    assert_found(
        invariant,
        "[greatest \"next_attempt_ms\", ..] in the update",
        &held_back,
    );
}

#[test]
fn a_held_queue_chunk_never_holds_more_than_32_requests() {
    let invariant = "A held-queue chunk never holds or reserves more than 32 requests";
    assert_found(
        invariant,
        "clamp(4, CHUNK)",
        &code("src/policy/queue/run.rs", "clamp(4, CHUNK)"),
    );
}

#[test]
fn a_held_mode_release_never_scores_the_whole_queue() {
    let invariant = "A held-mode release never scores the whole queue (`pick_by_scan` only under `#[cfg(test)]`)";
    let defs: Vec<Hit> = tree()
        .lines("src")
        .filter(|h| fn_name(&h.line.code) == Some("pick_by_scan"))
        .collect();
    assert_found(invariant, "fn pick_by_scan", &defs);
    assert_none(
        invariant,
        defs.into_iter().filter(|h| !h.line.test).collect(),
    );
}

#[test]
fn a_question_reads_rows_and_memory_of_one_commit() {
    let invariant =
        "A question reads rows and memory of one commit (the writer holds `published.gate()`)";
    assert_found(
        invariant,
        "published.gate()",
        &code("src/ledger/writer.rs", "published.gate()"),
    );
}

#[test]
fn only_api_knows_the_json_wire_shapes() {
    const SHARED: &[&str] = &[
        "src/report.rs",
        "src/report/range.rs",
        "src/shares/view.rs",
        "src/readiness.rs",
    ];
    let hits = code("src", "ToSchema")
        .into_iter()
        .filter(|h| top_module(&h.file.path) != "api" && !SHARED.contains(&h.file.path.as_str()))
        .collect();
    assert_none(
        "Only `api/` knows the JSON wire shapes (but the shared documents)",
        hits,
    );
}

#[test]
fn policy_types_have_no_wire_or_stored_shape() {
    let hits = tree()
        .lines("src/policy")
        .filter(|h| h.line.code.contains("serde"))
        .collect();
    assert_none("Policy types have no wire or stored shape", hits);
}

#[test]
fn roles_are_typed() {
    let hits = tree()
        .lines("src")
        .filter(|h| h.line.code.contains("require(&[\""))
        .collect();
    assert_none(
        "Roles are typed: no role name is a string outside `RoleKind::name`",
        hits,
    );
}

#[test]
fn an_fts3_jobs_sid_is_its_first_transfers() {
    let invariant = "An FTS3 job's sid is its first transfer's (`lead`), or recognises a listed job (`recover`)";
    let hits = code("adapters/src/fts3/batch.rs", "self.sid(");
    assert_found(invariant, "self.sid( from lead", &hits);
    let wrong = hits
        .into_iter()
        .filter(|h| !h.line.code.contains("lead") && h.enclosing_fn() != Some("recover"));
    assert_none(invariant, wrong.collect());
}

#[test]
fn a_tape_rest_stage_id_goes_into_a_path_only_percent_encoded() {
    let invariant = "A Tape REST stage id goes into a path only percent-encoded (`id_segment`)";
    let paths = text("adapters/src/tape_rest", "\"/stage/{");
    let encoded =
        |h: &Hit| h.line.code.contains("id_segment(") || h.line.code.contains("paths_call(");
    assert_found(invariant, "a /stage/{} path", &paths);
    assert_none(
        invariant,
        paths.into_iter().filter(|h| !encoded(h)).collect(),
    );
    let replaced = text("adapters/src/tape_rest", ".replace(\"{id}\"");
    assert_none(
        invariant,
        replaced
            .into_iter()
            .filter(|h| !h.line.code.contains("id_segment("))
            .collect(),
    );
}

#[test]
fn a_riding_request_never_reaches_the_mss() {
    let invariant =
        "A riding request never reaches the MSS (`riding` in `read.rs` only in `CANCELLING`)";
    let hits = text("src/ledger/read.rs", "riding");
    assert_none(
        invariant,
        outside(hits, &[("src/ledger/read.rs", "CANCELLING")]),
    );
}

#[test]
fn a_rolled_back_transaction_forgets_no_carrier() {
    let invariant = "A rolled-back transaction forgets no carrier (the map changes only through journaled calls)";
    let mut hits = code("src/ledger/writer", "carriers.offer");
    hits.extend(code("src/ledger/writer", "carriers.forget"));
    let places = [
        ("src/ledger/writer/coalesce.rs", "load"),
        ("src/ledger/writer/coalesce.rs", "offer_carrier"),
        ("src/ledger/writer/coalesce.rs", "forget_carrier"),
        ("src/ledger/writer/state.rs", "rollback"),
        ("src/ledger/writer/rows.rs", "count"),
    ];
    assert_none(invariant, outside(hits, &places));
}

#[test]
fn a_restart_forgets_no_carrier() {
    let invariant = "A restart forgets no carrier (`release_one` offers the read it queues)";
    let body = fn_body(invariant, "src/ledger/writer/release.rs", "release_one");
    let offered: Vec<Hit> = body
        .into_iter()
        .filter(|h| h.line.code.contains("offer_read("))
        .collect();
    assert_found(invariant, "offer_read in release_one", &offered);
}

#[test]
fn only_the_volumes_release_numbers_requests() {
    let invariant = "Only the volumes mode's release numbers requests";
    let set = text("src", "SET release_seq");
    assert_found(invariant, "SET release_seq in volumes.rs", &set);
    let set = set
        .into_iter()
        .filter(|h| h.file.path != "src/ledger/writer/volumes.rs");
    assert_none(invariant, set.collect());
    let promoted = text("src", "SET (release_seq");
    assert_none(
        invariant,
        outside(promoted, &[("src/ledger/writer/coalesce.rs", "promote")]),
    );
}

#[test]
fn a_refused_call_of_several_transfers_is_sent_again_one_by_one() {
    let invariant = "A refused call of several transfers is sent again one transfer at a time";
    for path in [
        "adapters/src/fts3/batch.rs",
        "adapters/src/tape_rest/stage.rs",
    ] {
        assert_found(
            invariant,
            &format!("one by one in {path}"),
            &text(path, "one by one"),
        );
    }
}

#[test]
fn a_batch_call_refused_as_too_large_is_halved() {
    let invariant = "A batch call refused as too large is halved, not resent whole";
    let hits = code("adapters/src/http.rs", "PAYLOAD_TOO_LARGE");
    assert_found(invariant, "PAYLOAD_TOO_LARGE in http.rs", &hits);
}

#[test]
fn mss_answers_are_read_bounded() {
    // A `reqwest::Response`'s body is read only by `answer::read_body`; `.json()` and `.text()`
    // elsewhere are the adapters' own bounded `Answer`'s, which no `.await` follows.
    let invariant = "MSS answers are read bounded (`answer::read_body`)";
    let mut hits = Vec::new();
    for file in tree()
        .files
        .iter()
        .filter(|f| f.path.starts_with("adapters/src/"))
    {
        let product: Vec<&source::Line> = file.lines.iter().filter(|l| !l.test).collect();
        for (i, line) in product.iter().enumerate() {
            let next = product.get(i + 1).map_or("", |l| l.code.trim_start());
            for read in [
                ".json()",
                ".text()",
                ".bytes()",
                ".chunk()",
                ".bytes_stream()",
            ] {
                let Some(at) = line.code.find(read) else {
                    continue;
                };
                let after = line.code[at + read.len()..].trim_start();
                let awaited =
                    after.starts_with(".await") || (after.is_empty() && next.starts_with(".await"));
                if awaited || read == ".bytes_stream()" {
                    hits.push(Hit { file, line });
                }
            }
        }
    }
    assert_none(
        invariant,
        outside(hits, &[("adapters/src/answer.rs", "read_body")]),
    );
}

#[test]
fn adapters_never_depend_on_the_broker() {
    let invariant = "`adapters/` never depends on the broker";
    // `mssbroker::` in a path, `use mssbroker` or `extern crate mssbroker`, tests included.
    let names_the_broker = |code: &str| {
        code.contains("mssbroker::")
            || code.contains("use mssbroker")
            || code.contains("crate mssbroker")
    };
    let hits = tree()
        .lines("adapters")
        .filter(|h| names_the_broker(&h.line.code));
    assert_none(invariant, hits.collect());
    let manifest = std::fs::read_to_string(source::repo().join("adapters/Cargo.toml"))
        .expect("adapters/Cargo.toml");
    let dep = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("mssbroker"));
    assert!(
        dep.is_none(),
        "invariant broken: {invariant}\n  adapters/Cargo.toml: {dep:?}"
    );
}

#[test]
fn the_stand_ins_are_not_compiled_into_the_product() {
    let invariant = "The stand-ins are not compiled into the product";
    let decl: Vec<Hit> = tree()
        .lines("adapters/src/lib.rs")
        .filter(|h| h.line.code.contains("mod standin"))
        .collect();
    assert_found(invariant, "mod standin in adapters/src/lib.rs", &decl);
    // The declaration is test-only: `#[cfg(feature = "standin")]` is on it.
    assert_none(
        invariant,
        decl.into_iter().filter(|h| !h.line.test).collect(),
    );
    for manifest in ["Cargo.toml", "adapters/Cargo.toml"] {
        let text = std::fs::read_to_string(source::repo().join(manifest)).expect("a manifest");
        let mut section = "";
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('[') {
                section = line.trim();
            } else if line.contains("\"standin\"")
                && !line.trim_start().starts_with('#')
                && section != "[dev-dependencies]"
                && section != "[features]"
            {
                panic!(
                    "invariant broken: {invariant}\n  {manifest}:{}: {line} (in {section})",
                    n + 1
                );
            }
        }
    }
}

/// The tests of the reader itself and of the docs, which no invariant names.
const NOT_INVARIANTS: &[&str] = &[
    "every_source_file_is_in_a_module_tree",
    "every_invariant_test_is_named_in_architecture",
    "readme_tables_have_no_cell_over_300_characters",
    "the_reader_knows_test_code_by_its_attribute",
    "the_reader_tells_unit_tests_from_the_stand_ins",
    "the_code_view_blanks_comments_and_literals",
    "each_sqlite_only_spelling_is_found_and_its_portable_one_is_not",
    "rusqlite_is_found_in_code_and_not_in_comments_or_literals",
    "the_reader_finds_a_functions_name_as_the_shape_script_does",
];

#[test]
fn every_invariant_test_is_named_in_architecture() {
    // Both ways: a name ARCHITECTURE gives is a test here, and each test here is named there.
    let map =
        std::fs::read_to_string(source::repo().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let named: std::collections::BTreeSet<&str> = map
        .match_indices("`tidy::")
        .filter_map(|(at, _)| {
            map[at + 7..]
                .split('`')
                .next()
                .filter(|name| !name.is_empty())
        })
        .collect();
    let tests: std::collections::BTreeSet<&str> = tree()
        .lines("tests/tidy")
        .zip(tree().lines("tests/tidy").skip(1))
        .filter(|(attr, _)| attr.line.code.trim() == "#[test]")
        .filter_map(|(_, f)| fn_name(&f.line.code))
        .filter(|name| !NOT_INVARIANTS.contains(name))
        .collect();
    let unknown: Vec<_> = named.difference(&tests).collect();
    let unnamed: Vec<_> = tests.difference(&named).collect();
    assert!(
        unknown.is_empty(),
        "ARCHITECTURE.md names tidy tests that do not exist: {unknown:?}"
    );
    assert!(
        unnamed.is_empty(),
        "tidy tests no invariant in ARCHITECTURE.md names: {unnamed:?}"
    );
}

/// Longest a README table cell may be: a headline and a link; the detail is in docs/.
const README_CELL_MAX: usize = 300;

#[test]
fn readme_tables_have_no_cell_over_300_characters() {
    let readme = std::fs::read_to_string(source::repo().join("README.md")).expect("README.md");
    let long: Vec<String> = readme
        .lines()
        .enumerate()
        .filter(|(_, line)| line.starts_with('|'))
        .flat_map(|(n, line)| table_cells(line).into_iter().map(move |cell| (n, cell)))
        .filter(|(_, cell)| cell.chars().count() > README_CELL_MAX)
        .map(|(n, cell)| {
            let head: String = cell.chars().take(60).collect();
            format!(
                "README.md:{}: {} characters: {head}...",
                n + 1,
                cell.chars().count()
            )
        })
        .collect();
    assert!(
        long.is_empty(),
        "README table cells over {README_CELL_MAX} characters (move the detail to docs/):\n  {}",
        long.join("\n  ")
    );
}

/// A Markdown table row's cells: split at `|` outside code spans and not escaped.
fn table_cells(row: &str) -> Vec<String> {
    let (mut cells, mut cell, mut in_code, mut escaped) = (Vec::new(), String::new(), false, false);
    for c in row.trim().trim_start_matches('|').chars() {
        match c {
            '|' if !in_code && !escaped => cells.push(std::mem::take(&mut cell)),
            _ => {
                in_code ^= c == '`';
                cell.push(c);
            }
        }
        escaped = c == '\\';
    }
    cells.push(cell);
    cells
        .into_iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}
