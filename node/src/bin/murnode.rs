//! `murnode`: the Murmur daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use murmur_api::exit::{self, CliError, CliResult};
use murmur_api::output::print_json;
use murmur_node::daemon::{self, RunOptions};
use murmur_node::telemetry::{self, LogFormat};
use murmur_store::data_dir;

/// The Murmur node daemon: joins the mesh, hosts capsules, serves the API.
///
/// Start a node:
///   murnode init --data-dir ./node1
///   murnode run --data-dir ./node1
///
/// Logs go to stderr (filter with MURNODE_LOG, e.g. MURNODE_LOG=debug); the ready line
/// and command output go to stdout.
#[derive(Debug, Parser)]
#[command(name = "murnode", version = env!("MURMUR_VERSION"), propagate_version = true, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a data directory: a node key (mode 0600) and a commented default config.
    ///
    /// Safe to run again: an existing key or config is kept, never overwritten.
    Init {
        /// The data directory.
        #[arg(long, env = "MURNODE_DATA_DIR", default_value_os_t = data_dir::default_path())]
        data_dir: PathBuf,
        /// Install this node key (a file from `mur key gen`, mode 0600) instead of making
        /// one: for a node whose peer id others know beforehand (a bootstrap seed). A data
        /// directory that has a key keeps it; a different one is refused.
        #[arg(long, value_name = "FILE", env = "MURNODE_KEY_FILE")]
        key: Option<PathBuf>,
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Start a local mesh of three nodes and walk through what it does.
    ///
    /// Creates an authority key and a grant, starts three murnode processes on 127.0.0.1
    /// (in a temporary directory) running the example capsules, and shows them find each
    /// other, route a task to the node that hosts its capsule, let a capsule send to
    /// another through mesh:// under its grant, refuse a send outside the grant, and serve
    /// a task that asks for input. Then it leaves the nodes running for `mur` until Ctrl-C.
    /// With --once it exits after the walkthrough, status 0 only if every step behaved as
    /// expected.
    Demo {
        /// Exit after the walkthrough.
        #[arg(long)]
        once: bool,
        /// Put the nodes' data directories here instead of a temporary directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Where the example components (relay, echo, ask, wordcount .wasm) are; by default
        /// this checkout's capsules/, built with capsules/build.sh on first use.
        #[arg(long, value_name = "DIR")]
        components: Option<PathBuf>,
    },
    /// Run the node until SIGINT or SIGTERM.
    ///
    /// Prints one ready line on stdout once the API is listening (a JSON object with
    /// --json). Flags override the config file.
    Run {
        /// The data directory (made by `murnode init`).
        #[arg(long, env = "MURNODE_DATA_DIR", default_value_os_t = data_dir::default_path())]
        data_dir: PathBuf,
        /// API address HOST:PORT (port 0 picks a free port). Overrides api.listen.
        #[arg(long, env = "MURNODE_API", value_name = "HOST:PORT")]
        api: Option<String>,
        /// libp2p listen multiaddr (repeatable). Replaces network.listen.
        #[arg(long, value_name = "MULTIADDR")]
        listen: Vec<String>,
        /// Bootstrap peer multiaddr ending in /p2p/PEERID (repeatable). Replaces network.bootstrap.
        #[arg(long, value_name = "MULTIADDR")]
        bootstrap: Vec<String>,
        /// Do not use mDNS, whatever the config says.
        #[arg(long)]
        no_mdns: bool,
        /// Print the ready line as a JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script for murnode.
    ///
    ///   murnode completions bash > /etc/bash_completion.d/murnode
    ///   murnode completions zsh > "${fpath[1]}/_murnode"
    ///   murnode completions fish > ~/.config/fish/completions/murnode.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let telemetry = telemetry::init(cli.log_format);
    let code = exit::finish(dispatch(cli.command));
    drop(telemetry);
    code
}

fn dispatch(command: Command) -> CliResult {
    match command {
        Command::Init { data_dir, key, json } => init(&data_dir, key.as_deref(), json),
        Command::Demo { once, dir, components } => {
            murmur_node::demo::run(&murmur_node::demo::DemoOptions { once, dir, components })
        }
        Command::Run { data_dir, api, listen, bootstrap, no_mdns, json } => {
            let runtime = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
            runtime.block_on(daemon::run(RunOptions { data_dir, api, listen, bootstrap, no_mdns, json }))
        }
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "murnode", &mut script);
            murmur_api::output::print_raw(&script);
            Ok(())
        }
    }
}

fn init(dir: &std::path::Path, key: Option<&std::path::Path>, json: bool) -> CliResult {
    let done = data_dir::init_with_key(dir, key).map_err(CliError::usage)?;
    let peer_id = done.key.node_id().to_string();
    let config = dir.join(murmur_config::CONFIG_FILE);
    let posture = murmur_config::RawConfig::load(&config).map_err(CliError::usage)?.posture();
    if json {
        print_json(&serde_json::json!({
            "peer_id": peer_id,
            "data_dir": dir.display().to_string(),
            "key_created": done.key_created,
            "config_created": done.config_created,
            "posture": posture,
        }));
    } else {
        let key_note = if done.key_created { "created" } else { "kept existing" };
        let config_note = if done.config_created { "created" } else { "kept existing" };
        println!("{peer_id}");
        eprintln!("data directory {}: node key {key_note}, config {config_note}", dir.display());
        eprintln!("posture (docs/src/trust.md#postures):");
        for line in &posture {
            eprintln!("  - {line}");
        }
        eprintln!("next: murnode run --data-dir {}", dir.display());
    }
    Ok(())
}
