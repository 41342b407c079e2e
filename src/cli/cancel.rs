//! `mssbroker cancel --group PATH`: ask a running broker to cancel every unfinished request of
//! one group (`POST /v1/admin/cancel-group`, operator token), e.g. before a reload removes the
//! group. Prints the counts (the broker cancels in chunks, a ledger transaction each) and the
//! first requests with their previous states.

use std::process::ExitCode;

use super::client::OperatorConnection;

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The group whose unfinished requests are cancelled (its path, e.g. `analysis/higgs`).
    #[arg(long)]
    group: String,
    #[command(flatten)]
    broker: OperatorConnection,
}

pub(super) async fn run(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let body = serde_json::json!({ "group": args.group });
    args.broker.post("cancel-group", &body).await
}
