//! `mur artifact pull` and `mur install`: ask the node to fetch an artifact from the mesh
//! (and, for install, pin it in `murmur.lock` and run it), showing progress.
//!
//! The node does the work and streams JSON lines; on a terminal they become a progress bar
//! on stderr, with `--json` they are printed as they come (for scripts), and otherwise only
//! the outcome is printed.

use std::io::IsTerminal;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::client::NodeArgs;
use murmur_api::exit::{CliError, CliResult};

/// Which artifact, from which node.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// NAME@VERSION.
    artifact: String,
    /// The manifest or content digest it must have (sha256:<hex>). Without it, the node
    /// takes the manifest a publisher in its trust.publishers signed.
    #[arg(long, value_name = "DIGEST")]
    digest: Option<String>,
    /// Print progress and the outcome as JSON lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    node: NodeArgs,
}

/// Runs a pull (or an install) through the node.
pub fn run(args: PullArgs, install: bool) -> CliResult {
    if !args.artifact.contains('@') {
        return Err(CliError::usage(anyhow::anyhow!(
            "`{}` is not NAME@VERSION (e.g. wordcount@1.0.0)",
            args.artifact
        )));
    }
    let body = serde_json::json!({ "artifact": args.artifact, "digest": args.digest, "install": install });
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(format!("resolving {}", args.artifact));
        bar
    });
    let mut outcome = None;
    let streamed = args.node.post_lines("/v1/artifacts/pull", &body, &mut |line| {
        if args.json {
            println!("{line}");
        }
        match line["event"].as_str().unwrap_or_default() {
            "resolved" => {
                if let Some(bar) = &bar {
                    bar.set_length(line["size"].as_u64().unwrap_or(0));
                    bar.set_message(format!("{} from {} provider(s)", args.artifact, line["providers"]));
                    let unanswered = line["unanswered"].as_u64().unwrap_or(0);
                    if unanswered > 0 {
                        bar.println(format!(
                            "{unanswered} advertised provider(s) did not answer (down, or slow); the pull starts without them and tries them later"
                        ));
                    }
                }
            }
            "waiting" => {
                if let Some(bar) = &bar {
                    bar.set_message(format!("{}: waiting for another pull of it on the node", args.artifact));
                }
            }
            "chunks" => {
                if let Some(bar) = &bar {
                    bar.set_position(line["written"].as_u64().unwrap_or(0));
                }
            }
            "penalized" => {
                if let Some(bar) = &bar {
                    bar.println(format!(
                        "dropped provider {}: {}",
                        line["provider"].as_str().unwrap_or("?"),
                        line["reason"].as_str().unwrap_or("?")
                    ));
                }
            }
            "done" | "error" => outcome = Some(line),
            _ => {}
        }
        Ok(())
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    streamed?;
    let outcome = outcome
        .ok_or_else(|| CliError::failed(anyhow::anyhow!("the node ended the pull without an outcome")))?;
    if outcome["event"] == "error" {
        let message = outcome["message"].as_str().unwrap_or("unknown error").to_owned();
        return Err(CliError::failed(anyhow::anyhow!("{message}")));
    }
    if !args.json {
        let what = format!(
            "{}@{}",
            outcome["name"].as_str().unwrap_or("?"),
            outcome["version"].as_str().unwrap_or("?")
        );
        if outcome["already"] == true {
            println!("{what} is already in the store ({})", outcome["content"].as_str().unwrap_or("?"));
        } else {
            let secs = outcome["elapsed_ms"].as_u64().unwrap_or(0) as f64 / 1000.0;
            let bytes = outcome["fetched"].as_u64().unwrap_or(0);
            println!(
                "pulled {what}: {} bytes from {} provider(s) in {secs:.2} s ({})",
                bytes,
                outcome["providers"],
                outcome["content"].as_str().unwrap_or("?")
            );
            for dropped in outcome["penalized"].as_array().into_iter().flatten() {
                println!(
                    "  dropped {}: {}",
                    dropped["provider"].as_str().unwrap_or("?"),
                    dropped["reason"].as_str().unwrap_or("?")
                );
            }
        }
        if install {
            println!(
                "installed {what}: pinned in murmur.lock, running as capsule {}",
                outcome["name"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(())
}
