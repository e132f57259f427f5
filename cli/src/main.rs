//! `mur`, the Murmur client: keys, grants and certificates, artifacts and bundles on disk,
//! and the mesh through a node's HTTP API. One module per noun (`mur key …`, `mur grant …`).
//!
//! It depends on what a node and its clients share (`murmur-api`), the node's config
//! (`murmur-config`, for a data directory's trusted publishers) and the store
//! (`murmur-store`), never on libp2p or axum; with the default `wasm` feature it also links
//! the runtime, so `mur tool run FILE.wasm` runs a component in process.

mod agent;
mod artifact;
mod capsule;
mod cert;
mod client;
mod directory;
mod grant;
mod key;
mod mcp;
mod models;
mod peers;
mod pull;
mod revocation;
mod status;
mod task;
mod tool;
mod trace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use murmur_api::exit::{self, CliResult};

/// The Murmur client: keys, grants, and (with a running node) the mesh.
///
/// Set up an authority and grant a capsule what it may reach:
///   mur key gen --out authority.key
///   mur grant sign --key authority.key --capsule pipeline --allow mesh://echo --out pipeline.grant
///   mur grant verify pipeline.grant --authority ed25519:…
///
/// Look at the mesh through a running node (--node URL, or MURMUR_NODE):
///   mur peers
///   mur directory --json
///
/// Send tasks to capsules anywhere in the mesh:
///   mur send mesh://wordcount "count these words" --wait
///   mur send mesh://ask "Which branch?" --stream
///   mur task ls --state input-required
///   mur send mesh://ask "main" --reply-to TASK_ID
///
/// Talk to long-running agents (brains) anywhere in the mesh:
///   mur agent ls
///   mur agent send planner "summarise today"
///   mur agent logs planner --follow
///
/// Move artifacts into a network with no connection to ours (on a USB stick):
///   mur artifact add wordcount.wasm --name wordcount --version 1.0.0 --kind tool
///   mur bundle export wordcount@1.0.0 --sign-key publisher.key -o tools.bundle
///   mur bundle import tools.bundle        # on the other side; trust.publishers decides
///
/// Exit codes: 0 ok, 1 failed (e.g. an invalid grant), 2 usage or input error,
/// 3 `mur send --wait|--stream`: the task ended failed, canceled or rejected.
#[derive(Debug, Parser)]
#[command(name = "mur", version = env!("MURMUR_VERSION"), propagate_version = true, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create and inspect ed25519 key files.
    #[command(subcommand)]
    Key(key::KeyCommand),
    /// Sign, verify and show capability grants (signed allowlists).
    #[command(subcommand)]
    Grant(grant::GrantCommand),
    /// Sign node certificates for a closed mesh.
    #[command(subcommand)]
    Cert(cert::CertCommand),
    /// Revoke grants and node certificates before they expire: sign a list, publish it.
    #[command(subcommand)]
    Revocation(revocation::RevocationCommand),
    /// List connected and known peers of a node.
    Peers(peers::PeersArgs),
    /// The mesh directory: every capsule any node advertises, and the nodes hosting it.
    ///
    /// (`mur capsule ls` lists what this node itself runs.) `mur capsules` is an alias.
    #[command(alias = "capsules")]
    Directory(directory::DirectoryArgs),
    /// Run tools once (on the node, or a local component file).
    #[command(subcommand)]
    Tool(tool::ToolCommand),
    /// The capsules this node runs; run a script capsule.
    #[command(subcommand)]
    Capsule(capsule::CapsuleCommand),
    /// Send a task to a capsule of the mesh (A2A message/send through a node).
    Send(task::SendArgs),
    /// Show, list and cancel tasks.
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Add, list, show and remove artifacts in a node's store.
    #[command(subcommand)]
    Artifact(artifact::ArtifactCommand),
    /// Carry artifacts between networks as one signed file: export, verify, import.
    #[command(subcommand)]
    Bundle(artifact::BundleCommand),
    /// Pull NAME@VERSION from the mesh, pin it in the node's murmur.lock and run it as a
    /// capsule (a manifest in the node's capsules directory), advertised at once.
    ///
    /// Example:
    ///   mur install wordcount@1.0.0 && mur send mesh://wordcount "count these words"
    #[command(disable_version_flag = true, verbatim_doc_comment)]
    Install(pull::PullArgs),
    /// Summarise an agent session's trace.jsonl: turns, tokens, tool and shell calls, time,
    /// and redundant reads (the same resource read again with nothing in between that could
    /// have changed it). Give the file, or the id of an agent task (read from its owner).
    ///
    /// Examples:
    ///   mur trace data/work/helper/sessions/4f7c…/trace.jsonl --json
    ///   mur trace 59ba9178-6ed3-b704-ad3b-0bbf824b32d2 --node http://127.0.0.1:7878
    #[command(verbatim_doc_comment)]
    Trace(trace::TraceArgs),
    /// Long-running agents (brains) of the mesh: list, message, logs, memory.
    #[command(subcommand)]
    Agent(agent::AgentCommand),
    /// Models agents of the mesh serve on the OpenAI-compatible endpoint, and the nodes
    /// that serve them.
    ///
    /// Any node's `/v1/chat/completions` reaches every model listed here, e.g.:
    ///   curl -N http://127.0.0.1:7420/v1/chat/completions -H 'content-type: application/json' \
    ///     -d '{"model":"echo-model","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    #[command(verbatim_doc_comment)]
    Models(models::ModelsArgs),
    /// The MCP servers configured on a node (`[[mcp]]` in murnode.toml): up or down, why,
    /// restarts and requests. Brains reach their tools and resources through `tooling`.
    Mcp(mcp::McpArgs),
    /// One screen of a node: itself (version, uptime, addresses), its peers, the mesh's
    /// directory, what it runs, its agents and MCP servers, its tasks and pulls.
    Status(status::StatusArgs),
    /// Print a shell completion script for mur.
    ///
    ///   mur completions bash > /etc/bash_completion.d/mur
    ///   mur completions zsh > "${fpath[1]}/_mur"
    ///   mur completions fish > ~/.config/fish/completions/mur.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    exit::finish(dispatch(Cli::parse().command))
}

fn dispatch(command: Command) -> CliResult {
    match command {
        Command::Key(command) => key::run(command),
        Command::Grant(command) => grant::run(command),
        Command::Cert(command) => cert::run(command),
        Command::Revocation(command) => revocation::run(command),
        Command::Peers(args) => peers::run(args),
        Command::Directory(args) => directory::run(args),
        Command::Tool(command) => tool::run(command),
        Command::Capsule(command) => capsule::run(command),
        Command::Send(args) => task::send(args),
        Command::Task(command) => task::run(command),
        Command::Artifact(command) => artifact::run(command),
        Command::Bundle(command) => artifact::run_bundle(command),
        Command::Install(args) => pull::run(args, true),
        Command::Trace(args) => trace::run(args),
        Command::Agent(command) => agent::run(command),
        Command::Models(args) => models::run(args),
        Command::Mcp(args) => mcp::run(args),
        Command::Status(args) => status::run(args),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mur", &mut script);
            murmur_api::output::print_raw(&script);
            Ok(())
        }
    }
}
