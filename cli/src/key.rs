//! `mur key`: create and inspect ed25519 key files (node keys and authority keys).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;

use murmur_api::exit::{CliResult, UsageContext};
use murmur_api::output::print_json;
use murmur_store::keyfile;

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a new key file (mode 0600) and print its public key.
    ///
    /// The public key is printed as `ed25519:<hex>`, the form `--authority` and the
    /// `trust.authorities` config key accept. An existing file is never overwritten.
    Gen(GenArgs),
    /// Print the public key and peer id of a key file.
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// Where to write the new key.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The key file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct KeyInfo {
    public_key: String,
    peer_id: String,
    path: String,
}

pub fn run(command: KeyCommand) -> CliResult {
    let (key, path, json) = match command {
        KeyCommand::Gen(args) => {
            let key = keyfile::generate();
            keyfile::create(&args.out, &key).map_err(murmur_api::exit::CliError::usage)?;
            (key, args.out, args.json)
        }
        KeyCommand::Show(args) => {
            (keyfile::read(&args.file).usage_context("cannot use key file")?, args.file, args.json)
        }
    };
    let info = KeyInfo {
        public_key: key.public().to_string(),
        peer_id: key.node_id().to_string(),
        path: path.display().to_string(),
    };
    if json {
        print_json(&info);
    } else {
        println!("{}", info.public_key);
        eprintln!("key file: {}  (as a node, its peer id is {})", info.path, info.peer_id);
    }
    Ok(())
}
