//! `mur revocation`: an authority's revocation list — sign it, show it, hand it to a node
//! (which spreads it through the mesh), and list what a node holds.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use clap::{Args, Subcommand};
use murmur_protocol::limits::ENVELOPE_BYTES_MAX;
use murmur_protocol::revocation::Revocation;
use murmur_protocol::{Envelope, NodeId, Signed};

use super::client::NodeArgs;
use super::grant::write_new;
use murmur_api::exit::{CliError, CliResult, UsageContext};
use murmur_api::output::{Table, print_json};
use murmur_config::clock;
use murmur_store::file::read_bounded;
use murmur_store::keyfile;

#[derive(Debug, Subcommand)]
pub enum RevocationCommand {
    /// Sign a revocation list: grants (by serial) and node certificates (by peer id) that
    /// no longer hold. A list replaces the authority's earlier ones, so it must name
    /// everything still revoked: start from the last list with --extend.
    ///
    /// Examples:
    ///   mur revocation sign --key authority.key --grant 1733 --out rev-1.cbor
    ///   mur revocation sign --key authority.key --extend rev-1.cbor --node 12D3KooW… --out rev-2.cbor
    ///   mur revocation publish rev-2.cbor     # on any node: the mesh spreads it
    #[command(verbatim_doc_comment)]
    Sign(SignArgs),
    /// Print a list's contents without checking its signature.
    Show(ShowArgs),
    /// Hand a list to a node (admin scope): it checks the authority and signature, keeps it
    /// across restarts, and gossips it; nodes that miss the gossip learn it by anti-entropy.
    Publish(PublishArgs),
    /// The lists a node holds, one per trusted authority.
    Ls(LsArgs),
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The authority's key file (the one that signed the grants and certificates).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// A grant serial to revoke (repeatable; `mur grant show` prints a grant's serial).
    #[arg(long = "grant", value_name = "SERIAL")]
    grants: Vec<u64>,
    /// A node whose certificate to revoke (repeatable): it is expelled from the mesh.
    #[arg(long = "node", value_name = "PEERID")]
    nodes: Vec<String>,
    /// Keep every entry of this earlier list of the same authority.
    #[arg(long, value_name = "FILE")]
    extend: Option<PathBuf>,
    /// Take these serials back out of the list (repeatable; a mistaken revocation).
    #[arg(long = "restore-grant", value_name = "SERIAL")]
    restore_grants: Vec<u64>,
    /// Take these nodes back out of the list (repeatable).
    #[arg(long = "restore-node", value_name = "PEERID")]
    restore_nodes: Vec<String>,
    /// The list's number, higher than every earlier list's (default: the time in ms).
    #[arg(long)]
    seq: Option<u64>,
    /// Where to write the list.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The list file.
    file: PathBuf,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The list file (from `mur revocation sign`).
    file: PathBuf,
    #[command(flatten)]
    node: NodeArgs,
    /// Print the node's JSON answer.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Print the API's JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(command: RevocationCommand) -> CliResult {
    match command {
        RevocationCommand::Sign(args) => sign(args),
        RevocationCommand::Show(args) => show(args),
        RevocationCommand::Publish(args) => publish(args),
        RevocationCommand::Ls(args) => ls(args),
    }
}

fn read_list(path: &Path) -> CliResult<(Envelope, Revocation)> {
    let bytes = read_bounded(path, ENVELOPE_BYTES_MAX).usage_context("cannot read the list")?;
    let envelope = Envelope::decode(&bytes).map_err(|err| {
        CliError::usage(anyhow::anyhow!("{} is not a signed document: {err}", path.display()))
    })?;
    let list = envelope.peek::<Revocation>().map_err(|err| {
        CliError::usage(anyhow::anyhow!("{} is not a revocation list: {err}", path.display()))
    })?;
    Ok((envelope, list))
}

fn parse_nodes(nodes: &[String], flag: &str) -> CliResult<Vec<NodeId>> {
    nodes.iter().map(|n| n.parse::<NodeId>().usage_context(format!("{flag} {n}"))).collect()
}

fn sign(args: SignArgs) -> CliResult {
    let key = keyfile::read(&args.key).usage_context("cannot use the authority key")?;
    let (mut nodes, mut grants, last_seq) = match &args.extend {
        Some(path) => {
            let (envelope, list) = read_list(path)?;
            if envelope.signer() != key.public() {
                return Err(CliError::usage(anyhow::anyhow!(
                    "{} was signed by {}, not by this key ({}): a list extends only its own authority's",
                    path.display(),
                    envelope.signer(),
                    key.public()
                )));
            }
            (list.nodes, list.grants, list.seq)
        }
        None => (Vec::new(), Vec::new(), 0),
    };
    nodes.extend(parse_nodes(&args.nodes, "--node")?);
    grants.extend(&args.grants);
    let restore_nodes = parse_nodes(&args.restore_nodes, "--restore-node")?;
    nodes.retain(|n| !restore_nodes.contains(n));
    grants.retain(|g| !args.restore_grants.contains(g));
    let now = clock::now();
    let seq = args.seq.unwrap_or(now.0).max(1);
    if seq <= last_seq {
        return Err(CliError::usage(anyhow::anyhow!(
            "--seq {seq} is not higher than the extended list's {last_seq}: nodes would keep the older list"
        )));
    }
    let list = Revocation::new(seq, now, nodes, grants);
    let (n_nodes, n_grants) = (list.nodes.len(), list.grants.len());
    let signed = Signed::sign(list, &key).usage_context("cannot sign this list")?;
    write_new(&args.out, &signed.envelope().encode())?;
    if args.json {
        print_json(&serde_json::json!({
            "path": args.out.display().to_string(),
            "authority": key.public().to_string(),
            "seq": seq,
            "nodes": n_nodes,
            "grants": n_grants,
        }));
    } else {
        println!(
            "wrote {}: revocation list {seq} of {} revoking {n_grants} grants and {n_nodes} nodes; hand it to a node with `mur revocation publish {}`",
            args.out.display(),
            key.public(),
            args.out.display()
        );
    }
    Ok(())
}

fn show(args: ShowArgs) -> CliResult {
    let (envelope, list) = read_list(&args.file)?;
    let nodes: Vec<String> = list.nodes.iter().map(ToString::to_string).collect();
    if args.json {
        print_json(&serde_json::json!({
            "authority": envelope.signer().to_string(),
            "seq": list.seq,
            "at": list.at.to_rfc3339(),
            "nodes": nodes,
            "grants": list.grants,
        }));
        return Ok(());
    }
    println!(
        "revocation list {} of {} (signed {}), signature not checked",
        list.seq,
        envelope.signer(),
        list.at.to_rfc3339()
    );
    println!("  grants: {}", if list.grants.is_empty() { "-".into() } else { format!("{:?}", list.grants) });
    for node in &nodes {
        println!("  node:   {node}");
    }
    Ok(())
}

fn publish(args: PublishArgs) -> CliResult {
    let (envelope, _) = read_list(&args.file)?;
    let body = serde_json::json!({
        "list": base64::engine::general_purpose::STANDARD.encode(envelope.encode()),
    });
    let answer: serde_json::Value = args.node.post("/v1/revocations", &body)?;
    if args.json {
        print_json(&answer);
    } else {
        println!(
            "node took revocation list {} of {}: {} grants revoked, {} nodes newly revoked; it spreads through the mesh now",
            answer["seq"],
            answer["authority"].as_str().unwrap_or("?"),
            answer["grants"],
            answer["newly_revoked_nodes"].as_array().map_or(0, Vec::len),
        );
    }
    Ok(())
}

fn ls(args: LsArgs) -> CliResult {
    let view: serde_json::Value = args.node.get("/v1/revocations")?;
    if args.json {
        print_json(&view);
        return Ok(());
    }
    let mut table = Table::new(&["AUTHORITY", "SEQ", "SIGNED", "GRANTS", "NODES"]);
    let lists = view["lists"].as_array().cloned().unwrap_or_default();
    for list in &lists {
        let count = |key: &str| list[key].as_array().map_or(0, Vec::len).to_string();
        table.row(vec![
            list["authority"].as_str().unwrap_or("?").to_owned(),
            list["seq"].to_string(),
            list["at"].as_str().unwrap_or("?").to_owned(),
            count("grants"),
            count("nodes"),
        ]);
    }
    table.print();
    eprintln!("{} lists", lists.len());
    Ok(())
}
