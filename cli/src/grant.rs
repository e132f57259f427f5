//! `mur grant`: sign, verify and show capability grants (signed allowlists).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use murmur_protocol::limits::ENVELOPE_BYTES_MAX;
use murmur_protocol::{
    AllowPattern, Digest, Envelope, Grant, GrantError, GrantExpectation, PublicKey, Signed, TrustError,
    verify_grant,
};
use serde::Serialize;

use murmur_api::exit::{CliError, CliResult, UsageContext};
use murmur_api::output::print_json;
use murmur_config::clock;
use murmur_store::file::read_bounded;
use murmur_store::keyfile;

#[derive(Debug, Subcommand)]
pub enum GrantCommand {
    /// Sign a grant: what one capsule may send to, execute and invoke.
    ///
    /// Example:
    ///   mur grant sign --key authority.key --capsule pipeline \
    ///       --allow mesh://echo --allow 'mesh://word*' --tools-allow wordcount \
    ///       --valid-for 30d --out pipeline.grant
    #[command(verbatim_doc_comment)]
    Sign(SignArgs),
    /// Verify a grant against trusted authority keys. Exit 0 if valid, 1 if not.
    ///
    /// Checks, in order: the issuer is one of --authority, the signature, the validity
    /// window at --at (default now), and, if given, --capsule and --artifact.
    Verify(VerifyArgs),
    /// Print a grant's contents without checking its signature (use `verify` for that).
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The authority's key file (from `mur key gen`).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// The capsule the grant is for.
    #[arg(long, value_name = "NAME")]
    capsule: String,
    /// A peer URL pattern the capsule may send to (repeatable): mesh://NAME,
    /// mesh://NAME@PEERID, HOST:PORT or http(s)://HOST[:PORT]/PATH; one component may end
    /// in `*` (a `*` never crosses `@`, `:` or `/`).
    #[arg(long = "allow", value_name = "URL")]
    allow: Vec<String>,
    /// A binary the capsule may execute through murmur:shell (repeatable).
    #[arg(long = "shell-allow", value_name = "BIN")]
    shell_allow: Vec<String>,
    /// A tool the capsule may invoke through murmur:tool-registry (repeatable; trailing `*` globs).
    #[arg(long = "tools-allow", value_name = "NAME")]
    tools_allow: Vec<String>,
    /// Pin the grant to the capsule's artifact digest (sha256:…).
    #[arg(long, value_name = "DIGEST")]
    artifact: Option<String>,
    /// How long the grant is valid: 90s, 15m, 12h, 30d, 2w.
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    valid_for: String,
    /// Start of validity, as a UTC time (2026-11-30T15:00:00Z) or `now`.
    #[arg(long, value_name = "TIME", default_value = "now")]
    not_before: String,
    /// Serial number (default: the signing time in milliseconds, unique per authority).
    #[arg(long)]
    serial: Option<u64>,
    /// Where to write the signed grant.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The grant file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// A trusted authority's public key, `ed25519:<hex>` (repeatable).
    #[arg(long = "authority", value_name = "PUBKEY", required = true)]
    authorities: Vec<String>,
    /// Require the grant to be for this capsule.
    #[arg(long, value_name = "NAME")]
    capsule: Option<String>,
    /// Require the grant to hold for this artifact digest.
    #[arg(long, value_name = "DIGEST")]
    artifact: Option<String>,
    /// Check validity at this UTC time instead of now.
    #[arg(long, value_name = "TIME")]
    at: Option<String>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The grant file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// A grant as JSON, with times in RFC 3339.
#[derive(Debug, Serialize)]
pub struct GrantJson {
    pub version: u16,
    pub issuer: String,
    pub capsule: String,
    pub artifact: Option<String>,
    pub network_allow: Vec<String>,
    pub shell_allow: Vec<String>,
    pub tools_allow: Vec<String>,
    pub not_before: String,
    pub not_after: String,
    pub serial: u64,
}

impl GrantJson {
    #[must_use]
    pub fn new(grant: &Grant, issuer: PublicKey) -> Self {
        Self {
            version: grant.v,
            issuer: issuer.to_string(),
            capsule: grant.capsule.clone(),
            artifact: grant.artifact.map(|d| d.to_string()),
            network_allow: grant.network.iter().map(ToString::to_string).collect(),
            shell_allow: grant.shell.clone(),
            tools_allow: grant.tools.clone(),
            not_before: grant.not_before.to_rfc3339(),
            not_after: grant.not_after.to_rfc3339(),
            serial: grant.serial,
        }
    }

    fn print_text(&self) {
        let list = |items: &[String]| if items.is_empty() { "(none)".to_owned() } else { items.join(", ") };
        println!("capsule        {}", self.capsule);
        println!("artifact       {}", self.artifact.as_deref().unwrap_or("(any)"));
        println!("network.allow  {}", list(&self.network_allow));
        println!("shell.allow    {}", list(&self.shell_allow));
        println!("tools.allow    {}", list(&self.tools_allow));
        println!("valid          {} .. {}", self.not_before, self.not_after);
        println!("serial         {}", self.serial);
        println!("issuer         {}", self.issuer);
    }
}

pub fn run(command: GrantCommand) -> CliResult {
    match command {
        GrantCommand::Sign(args) => sign(args),
        GrantCommand::Verify(args) => verify(args),
        GrantCommand::Show(args) => show(args),
    }
}

fn sign(args: SignArgs) -> CliResult {
    let key = keyfile::read(&args.key).usage_context("cannot use the authority key")?;
    let not_before = clock::parse_instant(&args.not_before).usage_context("--not-before")?;
    let valid_for = clock::parse_duration(&args.valid_for).usage_context("--valid-for")?;
    let valid_for_ms = u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX);
    let mut grant = Grant::new(
        args.capsule,
        args.serial.unwrap_or(clock::now().0),
        not_before,
        not_before.plus(valid_for_ms),
    );
    grant.network = args
        .allow
        .iter()
        .map(|p| p.parse::<AllowPattern>())
        .collect::<Result<_, _>>()
        .usage_context("--allow")?;
    grant.shell = args.shell_allow;
    grant.tools = args.tools_allow;
    grant.artifact =
        args.artifact.as_deref().map(str::parse::<Digest>).transpose().usage_context("--artifact")?;
    let signed = Signed::sign(grant, &key).usage_context("cannot sign this grant")?;
    write_new(&args.out, &signed.envelope().encode())?;
    let json = GrantJson::new(signed.doc(), signed.signer());
    if args.json {
        print_json(&serde_json::json!({ "path": args.out.display().to_string(), "grant": json }));
    } else {
        println!("wrote {}", args.out.display());
        json.print_text();
    }
    Ok(())
}

#[derive(Serialize)]
struct VerifyJson {
    valid: bool,
    reason: Option<&'static str>,
    error: Option<String>,
    grant: Option<GrantJson>,
}

fn verify(args: VerifyArgs) -> CliResult {
    let authorities: Vec<PublicKey> = args
        .authorities
        .iter()
        .map(|k| k.parse::<PublicKey>())
        .collect::<Result<_, _>>()
        .usage_context("--authority")?;
    let artifact =
        args.artifact.as_deref().map(str::parse::<Digest>).transpose().usage_context("--artifact")?;
    let now = match &args.at {
        Some(at) => clock::parse_instant(at).usage_context("--at")?,
        None => clock::now(),
    };
    let expect = GrantExpectation { capsule: args.capsule.as_deref(), artifact: artifact.as_ref() };
    // A file that does not even decode is an invalid grant (exit 1), like a bad signature.
    let bytes = read_bounded(&args.file, ENVELOPE_BYTES_MAX).map_err(CliError::usage)?;
    let decoded = Envelope::decode(&bytes).map_err(|e| GrantError::Trust(TrustError::Malformed(e)));
    match decoded.and_then(|envelope| verify_grant(envelope, &authorities, now, expect)) {
        Ok(verified) => {
            let grant = GrantJson::new(verified.doc(), verified.signer());
            if args.json {
                print_json(&VerifyJson { valid: true, reason: None, error: None, grant: Some(grant) });
            } else {
                println!("valid grant for capsule `{}` until {}", grant.capsule, grant.not_after);
            }
            Ok(())
        }
        Err(err) => {
            if args.json {
                print_json(&VerifyJson {
                    valid: false,
                    reason: Some(err.reason()),
                    error: Some(err.to_string()),
                    grant: None,
                });
            }
            Err(CliError::failed(anyhow::anyhow!("invalid: {err}")))
        }
    }
}

fn show(args: ShowArgs) -> CliResult {
    let envelope = read_grant_file(&args.file)?;
    let signer = envelope.signer();
    let grant: Grant =
        envelope.peek().map_err(|e| CliError::usage(anyhow::anyhow!("{}: {e}", args.file.display())))?;
    let json = GrantJson::new(&grant, signer);
    if args.json {
        print_json(&json);
    } else {
        json.print_text();
        eprintln!("(signature not checked: use `mur grant verify` for that)");
    }
    Ok(())
}

/// Reads and decodes a grant file, refusing anything larger than an envelope can be.
pub fn read_grant_file(path: &Path) -> CliResult<Envelope> {
    let bytes = read_bounded(path, ENVELOPE_BYTES_MAX).map_err(CliError::usage)?;
    Envelope::decode(&bytes)
        .map_err(|e| CliError::usage(anyhow::anyhow!("{} is not a grant file: {e}", path.display())))
}

/// Writes a new file (never replacing one), synced to disk.
pub fn write_new(path: &Path, bytes: &[u8]) -> CliResult {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| {
        CliError::usage(anyhow::anyhow!("cannot create {} (it must not exist yet): {e}", path.display()))
    })?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
