//! `mur cert`: node certificates for a closed mesh.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use murmur_protocol::{NodeCert, NodeId, Signed};

use super::grant::write_new;
use murmur_api::exit::{CliResult, UsageContext};
use murmur_api::output::print_json;
use murmur_config::clock;
use murmur_store::keyfile;

#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Admit a node to a closed mesh: sign a certificate for its peer id.
    ///
    /// Example:
    ///   mur cert sign --key authority.key --node 12D3KooW… --valid-for 365d --out node.cert
    /// then copy node.cert into that node's data directory (config key trust.cert).
    #[command(verbatim_doc_comment)]
    Sign(SignArgs),
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The authority's key file.
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// The node's peer id (printed by `murnode init`).
    #[arg(long = "node", value_name = "PEERID")]
    node: String,
    /// How long the certificate is valid: 90s, 15m, 12h, 30d, 2w.
    #[arg(long, value_name = "DURATION", default_value = "365d")]
    valid_for: String,
    /// Serial number (default: the signing time in milliseconds).
    #[arg(long)]
    serial: Option<u64>,
    /// Where to write the certificate.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(command: CertCommand) -> CliResult {
    let CertCommand::Sign(args) = command;
    let key = keyfile::read(&args.key).usage_context("cannot use the authority key")?;
    let node: NodeId = args.node.parse().usage_context("--node")?;
    let valid_for = clock::parse_duration(&args.valid_for).usage_context("--valid-for")?;
    let now = clock::now();
    let not_after = now.plus(u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX));
    let cert = NodeCert::new(node, args.serial.unwrap_or(now.0), now, not_after);
    let signed = Signed::sign(cert, &key).usage_context("cannot sign this certificate")?;
    write_new(&args.out, &signed.envelope().encode())?;
    if args.json {
        print_json(&serde_json::json!({
            "path": args.out.display().to_string(),
            "node": node.to_string(),
            "issuer": key.public().to_string(),
            "not_before": now.to_rfc3339(),
            "not_after": not_after.to_rfc3339(),
        }));
    } else {
        println!("wrote {}: admits {node} until {}", args.out.display(), not_after.to_rfc3339());
    }
    Ok(())
}
