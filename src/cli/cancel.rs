//! `mssbroker cancel --group PATH`: ask a running broker to cancel every unfinished request of
//! one group (`POST /v1/admin/cancel-group`, operator token), e.g. before a reload removes the
//! group. Prints each request with its previous state.

use std::process::ExitCode;

use anyhow::Context;

use super::client::{print_response, with_token};

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The group whose unfinished requests are cancelled (its path, e.g. `analysis/higgs`).
    #[arg(long)]
    group: String,
    /// The broker's base URL.
    #[arg(long, env = "MSSBROKER_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token (an operator's).
    #[arg(long, env = "MSSBROKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

pub(super) async fn run(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let url = format!("{}/v1/admin/cancel-group", args.url.trim_end_matches('/'));
    let resp = with_token(reqwest::Client::new().post(&url), args.token.as_deref())
        .json(&serde_json::json!({ "group": args.group }))
        .send()
        .await
        .with_context(|| format!("cannot reach the broker at {}", args.url))?;
    print_response(resp).await
}
