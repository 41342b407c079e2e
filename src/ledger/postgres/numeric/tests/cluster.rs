//! `Wide` as NUMERIC against a real server (pg-cluster) and the schema's `wide_add`/`wide_sum`.

use std::cell::RefCell;

use num_bigint::BigInt;
use pg_cluster::Cluster;
use postgres::Client;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::ledger::postgres::numeric::NumericError;
use crate::ledger::postgres::tests::ledger_client as ledger;
use crate::ledger::wide::Wide;

/// Any `Wide`, with more of the values near the edges and of ledger-like size.
fn wide() -> impl Strategy<Value = i128> {
    prop_oneof![
        any::<i128>(),
        any::<i64>().prop_map(i128::from),
        -10_000i128..10_000,
        Just(i128::MAX),
        Just(i128::MIN),
        (0u32..127).prop_map(|p| 1i128 << p),
        // Trailing zero digits, which PostgreSQL leaves out of the binary form.
        (any::<i32>(), 0u32..29).prop_map(|(m, e)| i128::from(m) * 10i128.pow(e)),
    ]
}

/// The exact sum, when within `i128` (as the `wide` domain takes it).
fn exact_sum(values: &[i128]) -> Option<i128> {
    let sum: BigInt = values.iter().map(|&v| BigInt::from(v)).sum();
    i128::try_from(sum).ok()
}

#[test]
fn wide_round_trips_as_numeric_and_adds_as_wide_does() {
    let cluster = Cluster::start().expect("a cluster");
    let client = RefCell::new(ledger(&cluster));
    client
        .borrow_mut()
        .batch_execute("CREATE TABLE w (n BIGINT, v wide NOT NULL)")
        .expect("a table");
    let strategy = (wide(), wide(), prop::collection::vec(wide(), 0..6));
    let mut runner = TestRunner::new(Config::with_cases(200));
    let mut case = 0i64;
    let case = RefCell::new(&mut case);
    runner
        .run(&strategy, |(a, b, many)| {
            let mut c = client.borrow_mut();
            let n = {
                let mut k = case.borrow_mut();
                **k += 1;
                **k
            };
            // Written as NUMERIC's binary form; read back as it and as PostgreSQL's text.
            let row = c
                .query_one("SELECT $1::wide, $1::wide::text", &[&Wide(a)])
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(row.get::<_, Wide>(0), Wide(a));
            prop_assert_eq!(row.get::<_, String>(1), a.to_string());
            // wide_add: exact, or refused past i128, as Wide's own arithmetic.
            let added = c.query_one("SELECT wide_add($1, $2)", &[&Wide(a), &Wide(b)]);
            match (added, a.checked_add(b)) {
                (Ok(r), Some(sum)) => prop_assert_eq!(r.get::<_, Wide>(0), Wide(sum)),
                (Err(_), None) => {}
                (r, expected) => {
                    prop_assert!(false, "wide_add({a}, {b}): {r:?}, expected {expected:?}")
                }
            }
            // wide_sum over stored rows: the exact sum when it is within i128, else refused.
            for v in &many {
                c.execute("INSERT INTO w (n, v) VALUES ($1, $2)", &[&n, &Wide(*v)])
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            let summed = c.query_one("SELECT wide_sum(v) FROM w WHERE n = $1", &[&n]);
            match (summed, exact_sum(&many)) {
                (Ok(r), Some(sum)) => prop_assert_eq!(r.get::<_, Wide>(0), Wide(sum)),
                (Err(_), None) => {}
                (r, expected) => {
                    prop_assert!(false, "wide_sum({many:?}): {r:?}, expected {expected:?}")
                }
            }
            Ok(())
        })
        .expect("every value");
}

/// What reading `sql`'s one value as a `Wide` was refused with.
fn refusal(client: &mut Client, sql: &str) -> Option<NumericError> {
    let row = client.query_one(sql, &[]).expect("a value");
    let e = row.try_get::<_, Wide>(0).expect_err("not a Wide");
    let source = std::error::Error::source(&e)?;
    source.downcast_ref::<NumericError>().cloned()
}

#[test]
fn nan_infinity_fractions_and_values_past_i128_are_refused_with_their_errors() {
    let cluster = Cluster::start().expect("a cluster");
    let mut c = ledger(&cluster);
    let cases = [
        ("SELECT 'NaN'::numeric", NumericError::NotANumber),
        ("SELECT 'Infinity'::numeric", NumericError::Infinite),
        ("SELECT '-Infinity'::numeric", NumericError::Infinite),
        ("SELECT 1.5::numeric", NumericError::NotAnInteger),
        ("SELECT -0.0001::numeric", NumericError::NotAnInteger),
        (
            "SELECT 170141183460469231731687303715884105728::numeric",
            NumericError::OutOfRange,
        ),
        (
            "SELECT -170141183460469231731687303715884105729::numeric",
            NumericError::OutOfRange,
        ),
        ("SELECT 1e60::numeric", NumericError::OutOfRange),
    ];
    for (sql, expected) in cases {
        assert_eq!(refusal(&mut c, sql), Some(expected), "{sql}");
    }
    // What the server writes with a scale, trailing zero digits, or at the edges, is read.
    let row = c
        .query_one(
            "SELECT 5.000::numeric, 100000000::numeric, 1e30::numeric, \
             (-170141183460469231731687303715884105728)::wide, 0::numeric",
            &[],
        )
        .expect("values");
    let read: Vec<Wide> = (0..5).map(|i| row.get(i)).collect();
    assert_eq!(
        read,
        [
            Wide(5),
            Wide(100_000_000),
            Wide(10i128.pow(30)),
            Wide(i128::MIN),
            Wide(0)
        ]
    );
    // A Wide is bound only where NUMERIC is expected.
    let wrong = c.query_one("SELECT $1::bigint", &[&Wide(1)]);
    assert!(wrong.is_err(), "{wrong:?}");
}
