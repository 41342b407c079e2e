//! The ledger's PostgreSQL backend (issue 42), being built: its schema and versioning
//! (`schema.rs`), the ledger's connection (`connect.rs`), the `?N` -> `$N` rewrite of its
//! statements (`placeholders.rs`), `Wide` as NUMERIC (`numeric.rs`), and the group-commit
//! forms measured for ingest (`ingest_form.rs`, run by `examples/pg_ingest.rs`). docs/ha.md
//! has the plan for the rest (the writer's transitions, the reads, group commit with the
//! leadership fence) and what is built.

pub mod connect;
pub mod ingest_form;
pub mod numeric;
pub mod placeholders;
pub mod schema;

#[cfg(test)]
mod tests;
