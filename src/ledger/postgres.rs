//! The ledger's PostgreSQL backend (issue 42), being built: so far its schema and versioning
//! (`schema.rs`). docs/ha.md has the plan for the rest (the writer's transitions, the reads,
//! group commit with the leadership fence) and what is built.

pub mod schema;

#[cfg(test)]
mod tests;
