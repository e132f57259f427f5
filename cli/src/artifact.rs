//! `mur artifact` and `mur bundle`: the node's artifact store, and carrying artifacts
//! between networks as one file.
//!
//! Both work on a data directory's store directly (`--data-dir`, else `$MURNODE_DATA_DIR`,
//! else the default), which is safe next to a running node: store writes take the store's
//! lock, and readers only ever see whole files.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use murmur_protocol::PublicKey;

use murmur_api::exit::{CliError, CliResult, UsageContext};
use murmur_api::output::{Table, print_json};
use murmur_config::clock;
use murmur_config::{Config, RawConfig};
use murmur_store::bundle::{self, BundleReport};
use murmur_store::data_dir;
use murmur_store::keyfile;
use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform, Stored};

/// Which data directory.
#[derive(Debug, Clone, Args)]
pub struct DataDirArgs {
    /// The node's data directory (its store is DIR/store).
    #[arg(long, env = "MURNODE_DATA_DIR", value_name = "DIR", default_value_os_t = data_dir::default_path())]
    data_dir: PathBuf,
}

impl DataDirArgs {
    fn store(&self) -> CliResult<ArtifactStore> {
        if !self.data_dir.is_dir() {
            return Err(CliError::usage(anyhow::anyhow!(
                "{} is not a data directory (create one with `murnode init --data-dir {}`)",
                self.data_dir.display(),
                self.data_dir.display()
            )));
        }
        ArtifactStore::open(&self.data_dir.join("store")).map_err(CliError::failed)
    }

    /// The publishers this node trusts (`trust.publishers` in its config, checked with
    /// the rest of the config as the node checks it).
    fn publishers(&self) -> CliResult<Vec<PublicKey>> {
        let path = self.data_dir.join("murnode.toml");
        let raw = if path.exists() {
            RawConfig::load(&path).map_err(CliError::usage)?
        } else {
            RawConfig::default()
        };
        let config = Config::from_raw(&raw, &self.data_dir)
            .map_err(|e| CliError::usage(anyhow::anyhow!("config {}: {e}", path.display())))?;
        Ok(config.trust.publishers)
    }
}

#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// Add a component file to the store as NAME@VERSION (replacing that name@version).
    ///
    /// Example:
    ///   mur artifact add wordcount.wasm --name wordcount --version 1.0.0 --kind tool
    /// then run it from a capsule manifest with `artifact = "wordcount@1.0.0"`.
    #[command(disable_version_flag = true, verbatim_doc_comment)]
    Add(AddArgs),
    /// List the artifacts in the store.
    Ls(LsArgs),
    /// Show one artifact: NAME, NAME@VERSION or a sha256 digest.
    Show(ShowArgs),
    /// Remove every version of NAME from the store (blobs nothing else uses are deleted).
    Rm(RmArgs),
    /// Fetch NAME@VERSION from the mesh into the node's store (through the running node).
    ///
    /// The node trusts the manifest a publisher in its trust.publishers signed, or the one
    /// --digest names; every chunk is verified before it is written, from every provider at
    /// once. An interrupted pull resumes where it stopped.
    ///
    /// Example:
    ///   mur artifact pull wordcount@1.0.0
    #[command(disable_version_flag = true, verbatim_doc_comment)]
    Pull(super::pull::PullArgs),
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The component file (.wasm).
    file: PathBuf,
    /// The artifact's name (a capsule name: lowercase letters, digits, `-`).
    #[arg(long)]
    name: String,
    /// Its version (e.g. 1.0.0).
    #[arg(long)]
    version: String,
    /// What it is.
    #[arg(long, value_parser = kind_parser())]
    kind: CapsuleKind,
    /// One line on what it does (searchable).
    #[arg(long, default_value = "")]
    description: String,
    /// A tag (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Sign the artifact with this publisher key (`mur key gen`): nodes whose
    /// trust.publishers lists the key can then pull it from the mesh by name@version.
    #[arg(long, value_name = "FILE")]
    sign_key: Option<PathBuf>,
    #[command(flatten)]
    dir: DataDirArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    dir: DataDirArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// NAME (highest version), NAME@VERSION, or sha256:<hex> of its manifest or content.
    reference: String,
    #[command(flatten)]
    dir: DataDirArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    name: String,
    #[command(flatten)]
    dir: DataDirArgs,
    #[arg(long)]
    json: bool,
}

fn view(stored: &Stored) -> serde_json::Value {
    serde_json::json!({
        "name": stored.meta.name,
        "version": stored.meta.version,
        "kind": stored.meta.kind,
        "runtime": stored.meta.runtime,
        "description": stored.meta.description,
        "tags": stored.meta.tags,
        "manifest": stored.manifest.to_string(),
        "content": stored.content.to_string(),
        "size": stored.size,
    })
}

fn find(store: &ArtifactStore, reference: &str) -> CliResult<Stored> {
    let found = if reference.starts_with("sha256:") {
        let digest = reference.parse().usage_context("the reference")?;
        store.by_digest(&digest)
    } else if let Some((name, version)) = reference.split_once('@') {
        store.find(name, Some(version))
    } else {
        store.find(reference, None)
    };
    found
        .map_err(CliError::failed)?
        .ok_or_else(|| CliError::failed(anyhow::anyhow!("no artifact `{reference}` in the store")))
}

pub fn run(command: ArtifactCommand) -> CliResult {
    match command {
        ArtifactCommand::Pull(args) => super::pull::run(args, false),
        ArtifactCommand::Add(args) => {
            let store = args.dir.store()?;
            let content =
                std::fs::read(&args.file).usage_context(format!("cannot read {}", args.file.display()))?;
            let meta = ArtifactMeta {
                name: args.name,
                version: args.version,
                kind: args.kind,
                runtime: Platform::Wasm,
                description: args.description,
                tags: args.tags,
                input_schema: None,
                output_schema: None,
            };
            let publisher = match &args.sign_key {
                Some(path) => Some(keyfile::read(path).usage_context("cannot use the publisher key")?),
                None => None,
            };
            let stored = store
                .add(&meta, &content, publisher.as_ref().map(|key| (key, clock::now())))
                .map_err(CliError::usage)?;
            if args.json {
                print_json(&view(&stored));
            } else {
                println!(
                    "added {}@{} ({} bytes, {})",
                    stored.meta.name, stored.meta.version, stored.size, stored.content
                );
            }
            Ok(())
        }
        ArtifactCommand::Ls(args) => {
            let all = args.dir.store()?.list().map_err(CliError::failed)?;
            if args.json {
                print_json(&serde_json::json!({ "artifacts": all.iter().map(view).collect::<Vec<_>>() }));
                return Ok(());
            }
            let mut table = Table::new(&["NAME", "VERSION", "KIND", "SIZE", "CONTENT"]);
            for s in &all {
                table.row(vec![
                    s.meta.name.clone(),
                    s.meta.version.clone(),
                    format!("{:?}", s.meta.kind).to_lowercase(),
                    s.size.to_string(),
                    s.content.to_string(),
                ]);
            }
            table.print();
            eprintln!("{} artifact(s)", all.len());
            Ok(())
        }
        ArtifactCommand::Show(args) => {
            let stored = find(&args.dir.store()?, &args.reference)?;
            if args.json {
                print_json(&view(&stored));
            } else {
                println!("{}@{} ({:?}, wasm)", stored.meta.name, stored.meta.version, stored.meta.kind);
                println!("  manifest {}", stored.manifest);
                println!("  content  {} ({} bytes)", stored.content, stored.size);
                if !stored.meta.description.is_empty() {
                    println!("  {}", stored.meta.description);
                }
            }
            Ok(())
        }
        ArtifactCommand::Rm(args) => {
            let removed = args.dir.store()?.remove(&args.name).map_err(CliError::failed)?;
            if args.json {
                print_json(&serde_json::json!({ "name": args.name, "removed": removed }));
            } else if removed {
                println!("removed every version of {}", args.name);
            }
            if removed {
                Ok(())
            } else {
                Err(CliError::failed(anyhow::anyhow!("no artifact named `{}`", args.name)))
            }
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Write artifacts to one signed bundle file (an OCI layout in a tar).
    ///
    /// Example (on a connected machine):
    ///   mur key gen --out publisher.key
    ///   mur bundle export wordcount@1.0.0 echo --sign-key publisher.key -o tools.bundle
    #[command(verbatim_doc_comment)]
    Export(ExportArgs),
    /// Check a bundle completely without importing it (signature, entries, every blob).
    Verify(VerifyArgs),
    /// Import a bundle into the store, verified; no network needed.
    ///
    /// The catalog's signer must be in this node's trust.publishers (keys inside the
    /// bundle are never trusted). A bundle that fails any check changes nothing; an
    /// interrupted import converges when run again.
    Import(VerifyArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Artifacts: NAME (highest version), NAME@VERSION or sha256:<hex>.
    #[arg(required = true)]
    references: Vec<String>,
    /// The publisher's key file (from `mur key gen`).
    #[arg(long, value_name = "FILE")]
    sign_key: PathBuf,
    /// The bundle file to write (not overwritten if it exists).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: PathBuf,
    #[command(flatten)]
    dir: DataDirArgs,
    /// Print a JSON report; progress events go to stderr as JSON lines.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The bundle file.
    file: PathBuf,
    #[command(flatten)]
    dir: DataDirArgs,
    /// Print a JSON report; progress events go to stderr as JSON lines.
    #[arg(long)]
    json: bool,
}

/// Progress on stderr: a line rewritten in place on a terminal, JSON lines with `--json`,
/// nothing when piped.
fn progress(json: bool, what: &'static str) -> impl FnMut(u64, u64) {
    let terminal = std::io::stderr().is_terminal();
    let mut last = 0;
    move |done: u64, total: u64| {
        let percent = (done * 100).checked_div(total).unwrap_or(100);
        if json {
            if percent != last || done == total {
                eprintln!(
                    "{}",
                    serde_json::json!({ "event": "progress", "op": what, "bytes": done, "total": total })
                );
            }
        } else if terminal {
            eprint!("\r{what}: {:>3}% ({} of {} bytes)", percent, done, total);
            if done == total {
                eprintln!();
            }
        }
        last = percent;
    }
}

fn print_report(report: &BundleReport, json: bool, verb: &str, path: &Path) {
    if json {
        print_json(report);
        return;
    }
    println!(
        "{verb} {} ({} artifact(s), {} blob(s), {} bytes)",
        path.display(),
        report.artifacts.len(),
        report.blobs,
        report.bytes
    );
    println!("  publisher {}", report.publisher);
    for artifact in &report.artifacts {
        println!("  {artifact}");
    }
    if verb == "imported" {
        println!(
            "  {} blob(s) written, {} already in the store",
            report.blobs_written,
            report.blobs - report.blobs_written
        );
    }
}

pub fn run_bundle(command: BundleCommand) -> CliResult {
    match command {
        BundleCommand::Export(args) => {
            if args.out.exists() {
                return Err(CliError::usage(anyhow::anyhow!(
                    "{} exists; not overwritten",
                    args.out.display()
                )));
            }
            let key = keyfile::read(&args.sign_key).usage_context("cannot use the publisher key")?;
            let store = args.dir.store()?;
            let artifacts = args.references.iter().map(|r| find(&store, r)).collect::<CliResult<Vec<_>>>()?;
            let report = bundle::export(
                &store,
                &artifacts,
                &key,
                clock::now(),
                &args.out,
                &mut progress(args.json, "export"),
            )
            .map_err(CliError::failed)?;
            print_report(&report, args.json, "wrote", &args.out);
            Ok(())
        }
        BundleCommand::Verify(args) => {
            let publishers = args.dir.publishers()?;
            let report = bundle::verify(&args.file, &publishers, &mut progress(args.json, "verify"))
                .map_err(|e| {
                    CliError::failed(e.context(format!("bundle {} refused", args.file.display())))
                })?;
            print_report(&report, args.json, "verified", &args.file);
            Ok(())
        }
        BundleCommand::Import(args) => {
            let publishers = args.dir.publishers()?;
            let store = args.dir.store()?;
            let report = bundle::import(&store, &args.file, &publishers, &mut progress(args.json, "import"))
                .map_err(|e| {
                    CliError::failed(
                        e.context(format!("bundle {} refused; nothing was imported", args.file.display())),
                    )
                })?;
            print_report(&report, args.json, "imported", &args.file);
            Ok(())
        }
    }
}

/// Parses `--kind` with the kinds listed in `--help` and in the error for a wrong one.
fn kind_parser() -> impl clap::builder::TypedValueParser<Value = CapsuleKind> {
    use clap::builder::TypedValueParser as _;
    let names: Vec<&'static str> = CapsuleKind::ALL.iter().map(|k| k.as_str()).collect();
    clap::builder::PossibleValuesParser::new(names)
        // The parser only lets listed names through, and every listed name parses.
        .map(|name| name.parse::<CapsuleKind>().expect("a listed kind parses"))
}
