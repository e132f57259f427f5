//! `mur capsule`: what the node runs, and running a script capsule once.

use clap::{Args, Subcommand};

use super::client::NodeArgs;
use murmur_api::exit::CliResult;
use murmur_api::output::{Table, print_json};
use murmur_api::runtime::CapsuleRun;
use murmur_api::runtime::InstalledView;

#[derive(Debug, Subcommand)]
pub enum CapsuleCommand {
    /// List the capsules and tools this node runs (from its capsules directory).
    Ls(LsArgs),
    /// Run a script capsule once and print what it printed.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// One JSON document with every capsule.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The capsule's name.
    name: String,
    #[command(flatten)]
    node: NodeArgs,
    /// Print the run (stdout, stderr, recorded calls, timing) as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(command: CapsuleCommand) -> CliResult {
    match command {
        CapsuleCommand::Ls(args) => {
            let installed: Vec<InstalledView> = args.node.get("/v1/runtime/capsules")?;
            if args.json {
                print_json(&installed);
                return Ok(());
            }
            let mut table = Table::new(&["NAME", "VERSION", "KIND", "MEMORY", "DEADLINE", "DIGEST"]);
            for c in &installed {
                table.row(vec![
                    c.name.clone(),
                    c.version.clone(),
                    c.kind.clone(),
                    format!("{} MiB", c.memory_mb),
                    format!("{} ms", c.deadline_ms),
                    c.digest.clone(),
                ]);
            }
            table.print();
            eprintln!("{} capsule(s)", installed.len());
            Ok(())
        }
        CapsuleCommand::Run(args) => {
            let run: CapsuleRun =
                args.node.post(&format!("/v1/capsules/{}/run", args.name), &serde_json::json!({}))?;
            if args.json {
                print_json(&run);
            } else {
                print!("{}", run.stdout);
                eprint!("{}", run.stderr);
                eprintln!("{} tool call(s) in {} ms", run.calls.len(), run.elapsed_ms);
            }
            Ok(())
        }
    }
}
