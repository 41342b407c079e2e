//! `mssbroker submit`: a request sent to a running broker, its answer printed.

use anyhow::Context;
use clap::Args;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub(super) struct SubmitArgs {
    /// Broker base URL.
    #[arg(long, env = "MSSBROKER_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token.
    #[arg(long, env = "MSSBROKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the request from this JSON file ("-" for stdin); `{"requests": [...]}` is sent as a batch.
    #[arg(long, conflicts_with_all = ["client_request_id", "station", "user", "file", "size_bytes", "access_mode", "physics_group"])]
    json: Option<PathBuf>,
    #[arg(long)]
    client_request_id: Option<String>,
    #[arg(long)]
    station: Option<String>,
    #[arg(long)]
    user: Option<String>,
    /// Path of the file to stage or store.
    #[arg(long)]
    file: Option<String>,
    #[arg(long)]
    size_bytes: Option<u64>,
    #[arg(long)]
    access_mode: Option<String>,
    #[arg(long)]
    physics_group: Option<String>,
    /// Tape label, if known.
    #[arg(long)]
    volume: Option<String>,
    /// read (stage from tape) or write (store to tape).
    #[arg(long)]
    direction: Option<String>,
    /// The file's position on its volume as its file sequence number (1 = the first data
    /// file), if known.
    #[arg(long)]
    position: Option<u64>,
    /// Where the file starts on its volume, in bytes from the first data byte, if known
    /// (reads only).
    #[arg(long)]
    offset_bytes: Option<u64>,
}

pub(super) async fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let body: Value = match &args.json {
        Some(path) => {
            let text = if path.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
            } else {
                std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {}", path.display()))?
            };
            serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", path.display()))?
        }
        None => {
            let need = |v: &Option<String>, flag: &str| -> anyhow::Result<String> {
                v.clone()
                    .with_context(|| format!("--{flag} is required (or give --json FILE)"))
            };
            let request = crate::api::request::SubmitRequest {
                client_request_id: Some(need(&args.client_request_id, "client-request-id")?),
                station: Some(need(&args.station, "station")?),
                user: Some(need(&args.user, "user")?),
                file: Some(need(&args.file, "file")?),
                size_bytes: Some(
                    args.size_bytes
                        .context("--size-bytes is required (or give --json FILE)")?,
                ),
                access_mode: Some(need(&args.access_mode, "access-mode")?),
                physics_group: Some(need(&args.physics_group, "physics-group")?),
                volume: args.volume.clone(),
                direction: args.direction.clone(),
                position: args.position,
                offset_bytes: args.offset_bytes,
                ..Default::default()
            };
            serde_json::to_value(&request)?
        }
    };
    let endpoint = if body.get("requests").is_some() {
        "/v1/requests/batch"
    } else {
        "/v1/requests"
    };
    let url = format!("{}{endpoint}", args.url.trim_end_matches('/'));
    let resp = with_token(reqwest::Client::new().post(&url), args.token.as_deref())
        .json(&body)
        .send()
        .await
        .with_context(|| format!("cannot reach the broker at {}", args.url))?;
    print_response(resp).await
}

/// A running broker, as an operator reaches it (the admin commands).
#[derive(Debug, clap::Args)]
pub struct OperatorConnection {
    /// The broker's base URL.
    #[arg(long, env = "MSSBROKER_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token (an operator's).
    #[arg(long, env = "MSSBROKER_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl OperatorConnection {
    /// POST `body` to `path` (under `/v1/admin/`) and print the answer; exit 1 on a refusal.
    pub(super) async fn post(&self, path: &str, body: &Value) -> anyhow::Result<ExitCode> {
        let url = format!("{}/v1/admin/{path}", self.url.trim_end_matches('/'));
        let resp = with_token(reqwest::Client::new().post(&url), self.token.as_deref())
            .json(body)
            .send()
            .await
            .with_context(|| format!("cannot reach the broker at {}", self.url))?;
        print_response(resp).await
    }
}

pub(super) fn with_token(
    req: reqwest::RequestBuilder,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

pub(super) async fn print_response(resp: reqwest::Response) -> anyhow::Result<ExitCode> {
    let status = resp.status();
    let text = resp
        .text()
        .await
        .context("cannot read the broker's answer")?;
    let shown = match serde_json::from_str::<Value>(&text) {
        Ok(v) => serde_json::to_string_pretty(&v)?,
        Err(_) => text,
    };
    // A reader that went away (`| head`) is not an error worth a panic.
    let mut out = std::io::stdout();
    if let Err(e) = writeln!(out, "{shown}").and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if status.is_success() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("broker answered {status}");
        Ok(ExitCode::FAILURE)
    }
}
