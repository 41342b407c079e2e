//! `mssbroker reload`: ask a running broker to re-read its configuration file and put its live
//! part in force (`POST /v1/admin/reload`, operator token), as `kill -HUP` does, but with the
//! answer: the new file's SHA-256 and whether it changed, or the key that refused it (exit 1).

use std::process::ExitCode;

use anyhow::Context;

use super::client::{print_response, with_token};

#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    /// The broker's base URL.
    #[arg(long, env = "MSSBROKER_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token (an operator's).
    #[arg(long, env = "MSSBROKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

pub(super) async fn run(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    let url = format!("{}/v1/admin/reload", args.url.trim_end_matches('/'));
    let resp = with_token(reqwest::Client::new().post(&url), args.token.as_deref())
        .json(&serde_json::json!({}))
        .send()
        .await
        .with_context(|| format!("cannot reach the broker at {}", args.url))?;
    print_response(resp).await
}
