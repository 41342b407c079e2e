//! `mssbroker reload`: ask a running broker to re-read its configuration file and put its live
//! part in force (`POST /v1/admin/reload`, operator token), as `kill -HUP` does, but with the
//! answer: the new file's SHA-256 and whether it changed, or the key that refused it (exit 1).

use std::process::ExitCode;

use super::client::OperatorConnection;

#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    broker: OperatorConnection,
}

pub(super) async fn run(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    args.broker.post("reload", &serde_json::json!({})).await
}
