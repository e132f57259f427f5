//! `mur tool run`: run a tool once and print its tool-result.

use std::path::Path;

use clap::{Args, Subcommand};
use murmur_api::exit::{CliError, CliResult, UsageContext};
use murmur_api::output::print_json;
use murmur_api::runtime::{ToolInputJson, ToolRun};

use super::client::NodeArgs;

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Run a tool once and print its tool-result.
    ///
    /// TOOL is the name of a tool the node runs (asked through --node), or a path to a
    /// component (`.wasm`) or manifest (`.toml`), which runs right here in this process,
    /// with the manifest's capabilities or, for a bare component, none.
    ///
    /// Examples:
    ///   mur tool run wordcount --data "count these words"
    ///   mur tool run ./target/wasm32-wasip2/release/echo.wasm --input '{"data":"hi"}' --json
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Tool name, or path to a .wasm component or a capsule manifest.
    #[arg(value_name = "TOOL")]
    tool: String,
    /// The tool-input as JSON: {"data": "...", "log_path": "..."}.
    #[arg(long, value_name = "JSON", conflicts_with = "data")]
    input: Option<String>,
    /// Shorthand for --input '{"data": TEXT}'.
    #[arg(long, value_name = "TEXT")]
    data: Option<String>,
    #[command(flatten)]
    node: NodeArgs,
    /// Print the whole run (result, recorded calls, timing) as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(command: ToolCommand) -> CliResult {
    let ToolCommand::Run(args) = command;
    let input: ToolInputJson = match (&args.input, &args.data) {
        (Some(json), _) => {
            serde_json::from_str(json).usage_context("--input must be {\"data\": …, \"log_path\": …}")?
        }
        (None, data) => ToolInputJson { data: data.clone(), log_path: None },
    };
    let path = Path::new(&args.tool);
    let run: ToolRun = if path.is_file() {
        run_locally(path, input)?
    } else {
        args.node.post(
            &format!("/v1/tools/{}/run", args.tool),
            &serde_json::to_value(&input).map_err(CliError::failed)?,
        )?
    };
    if args.json {
        print_json(&run);
    } else {
        let r = &run.result;
        println!("status   {}", r.status);
        if let Some(summary) = &r.summary {
            println!("summary  {summary}");
        }
        if let Some(data) = &r.data {
            println!("data     {data}");
        }
        if let Some(path) = &r.data_path {
            println!("data at  {path}");
        }
        if r.truncated {
            println!("(output truncated)");
        }
        for (key, value) in &r.metadata {
            println!("meta     {key} = {value}");
        }
        eprintln!("{} call(s) in {} ms", run.calls.len(), run.elapsed_ms);
    }
    if run.result.status == "passed" {
        Ok(())
    } else {
        Err(CliError::failed(anyhow::anyhow!("the tool reported {}", run.result.status)))
    }
}

/// Runs a component or manifest in this process, with a throwaway data directory.
#[cfg(feature = "wasm")]
fn run_locally(path: &Path, input: ToolInputJson) -> CliResult<ToolRun> {
    use std::sync::Arc;

    use anyhow::Context;
    use murmur_runtime::ports::Ports;
    use murmur_runtime::{CapsuleKind, CapsuleManifest, Runtime, RuntimeOptions, ToolInput};
    use murmur_store::ArtifactStore;

    let input = ToolInput { data: input.data, log_path: input.log_path };
    let scratch = tempfile::Builder::new().prefix("mur-tool-").tempdir().map_err(CliError::failed)?;
    let data_dir = scratch.path().to_path_buf();
    let manifest = if path.extension().is_some_and(|e| e == "toml") {
        CapsuleManifest::load(path, &data_dir).map_err(CliError::usage)?
    } else {
        CapsuleManifest::for_file(path, CapsuleKind::Tool, &data_dir)
    };
    let name = manifest.name.clone();
    let runtime_threads = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    runtime_threads.block_on(async {
        let store = Arc::new(ArtifactStore::open(&data_dir.join("store")).map_err(CliError::failed)?);
        let runtime = Runtime::new(
            RuntimeOptions::new(data_dir.clone(), false),
            store,
            Ports::standalone().map_err(CliError::failed)?,
        )
        .map_err(CliError::failed)?;
        runtime
            .install(manifest)
            .with_context(|| format!("cannot load {}", path.display()))
            .map_err(CliError::usage)?;
        runtime.run_tool(&name, input).await.map_err(|e| CliError::failed(anyhow::anyhow!(e)))
    })
}

/// Without the `wasm` feature this `mur` has no runtime of its own.
#[cfg(not(feature = "wasm"))]
fn run_locally(path: &Path, _input: ToolInputJson) -> CliResult<ToolRun> {
    Err(CliError::usage(anyhow::anyhow!(
        "{} is a file, and this mur was built without the `wasm` feature, so it cannot run components itself; \
         run the tool on a node (`mur tool run NAME --node URL`) or build mur with default features",
        path.display()
    )))
}
