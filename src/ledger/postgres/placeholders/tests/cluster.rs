//! The rewrite against PostgreSQL's own parser (pg-cluster).

use std::cell::RefCell;

use pg_cluster::Cluster;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::database_url::DatabaseUrl;
use crate::ledger::postgres::connect::connect;
use crate::ledger::postgres::placeholders::rewrite;

fn url(s: &str) -> DatabaseUrl {
    DatabaseUrl::parse(s).expect("a valid url")
}

/// Literals, comments and parameters of random statements come back from PostgreSQL's parser
/// as they were written for SQLite.
#[test]
fn rewritten_statements_keep_their_literals_on_the_server() {
    let cluster = Cluster::start().expect("a cluster");
    let client = RefCell::new(connect(&url(&cluster.url())).expect("a connection"));
    let text = "[a-z0-9 ?'\"*/\\-$é]{0,16}";
    let strategy = (text, text, any::<i64>(), any::<i64>());
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner
        .run(&strategy, |(a, b, x, y)| {
            let sqlite = format!(
                "SELECT '{}', ?2::bigint /* {} */, '{}', ?1::bigint -- ?3 '\n",
                a.replace('\'', "''"),
                b.replace('*', ""),
                b.replace('\'', "''"),
            );
            let sql = rewrite(&sqlite).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let row = client
                .borrow_mut()
                .query_one(&sql, &[&x, &y])
                .map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
            prop_assert_eq!(row.get::<_, String>(0), a);
            prop_assert_eq!(row.get::<_, i64>(1), y);
            prop_assert_eq!(row.get::<_, String>(2), b);
            prop_assert_eq!(row.get::<_, i64>(3), x);
            Ok(())
        })
        .expect("every statement");
}
