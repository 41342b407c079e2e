//! The id (`x-request-id`) of the HTTP request whose work runs on this task: set by the server
//! around each handler, read by the ledger, which carries it to the writer thread so that the
//! log lines of that work name it. Below both (it imports nothing from the crate), so that the
//! ledger does not import the process's edge (`server`, `telemetry`) for it.

tokio::task_local! {
    static REQUEST_ID: std::sync::Arc<str>;
}

/// The id (`x-request-id`) of the HTTP request whose work is running on this task, if any: the
/// ledger carries it to the writer thread, whose log lines for that work name it.
pub fn request_id() -> Option<std::sync::Arc<str>> {
    REQUEST_ID.try_with(|id| id.clone()).ok()
}

/// Run `work` with `id` as its [`request_id`].
pub async fn with_request_id<F: std::future::Future>(
    id: std::sync::Arc<str>,
    work: F,
) -> F::Output {
    REQUEST_ID.scope(id, work).await
}
