//! A third-party node written from the documentation alone (`docs/src/third-party.md`,
//! `wire.md`, `protocol.md`, `artifacts.md`): it does not link the protocol crate. It builds
//! every message with a generic CBOR writer, in the key order the pages give, and checks
//! every answer the way they say. Levels:
//!
//! 1. connect, announcing `/murmur/1.0.0`;
//! 2. `/murmur/sync/1` with an empty digest: the node's own advert comes back, its envelope
//!    signature verifies over `"murmur/signed/1" 0x00 kind 0x00 body` with the key inside
//!    the node's PeerId, and it lists `--capsule`;
//! 3. `/murmur/task/1`: a client's task under the id derived as `tasks.md` says, accepted,
//!    then followed with `events` until it completes;
//! 4. `/murmur/artifact/1`: `--artifact NAME@VERSION` resolved, its manifest and content
//!    fetched by ranges and checked against their SHA-256 digests.
//!
//! Prints one JSON line per level passed and exits non-zero at the first that fails.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use ciborium::Value;
use clap::Parser;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use libp2p::{Multiaddr, PeerId};
use murmur_tests::peer::{ARTIFACT, SYNC, Session, TASK};
use sha2::{Digest as _, Sha256};

/// Take part in a murmur mesh as the documentation describes, and check the node's answers.
#[derive(Debug, Parser)]
struct Args {
    /// The node, a multiaddr ending in /p2p/<peer id>.
    #[arg(long)]
    dial: Multiaddr,
    /// A capsule the node hosts and runs: its advert must list it, and a task is sent to it.
    #[arg(long)]
    capsule: String,
    /// The task's text.
    #[arg(long, default_value = "conformance test")]
    text: String,
    /// An artifact the node serves, NAME@VERSION.
    #[arg(long)]
    artifact: String,
    #[arg(long, default_value_t = 20)]
    timeout_secs: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut session = Session::dial(&args.dial, "/murmur/1.0.0", Duration::from_secs(args.timeout_secs))?;
    let node = session.node();
    report("connect", serde_json::json!({ "node": node.to_string() }));
    let advert = sync(&mut session, node).await.context("level 2, sync")?;
    ensure!(
        advert.capsules.iter().any(|c| c == &args.capsule),
        "the node's advert lists {:?}, not {}",
        advert.capsules,
        args.capsule
    );
    report("sync", serde_json::json!({ "seq": advert.seq, "capsules": advert.capsules }));
    let result = task(&mut session, &args.capsule, &args.text).await.context("level 3, task")?;
    report("task", serde_json::json!({ "state": "completed", "result": result }));
    let (name, version) = args.artifact.split_once('@').context("--artifact NAME@VERSION")?;
    let (manifest, content, size) =
        artifact(&mut session, name, version).await.context("level 4, artifact")?;
    report("artifact", serde_json::json!({ "manifest": manifest, "content": content, "size": size }));
    Ok(())
}

fn report(level: &str, detail: serde_json::Value) {
    println!("{}", serde_json::json!({ "level": level, "ok": true, "detail": detail }));
}

// --- CBOR, as wire.md says: text keys, given in canonical order by the caller ---

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (text(k), v)).collect())
}

fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(value, &mut out).expect("CBOR into a Vec");
    out
}

fn decode(bytes: &[u8]) -> anyhow::Result<Value> {
    ciborium::de::from_reader(bytes).context("the answer is not CBOR")
}

fn field<'a>(value: &'a Value, key: &str) -> anyhow::Result<&'a Value> {
    value
        .as_map()
        .context("not a map")?
        .iter()
        .find(|(k, _)| k.as_text() == Some(key))
        .map(|(_, v)| v)
        .with_context(|| format!("no `{key}`"))
}

fn bytes_of<'a>(value: &'a Value, key: &str) -> anyhow::Result<&'a [u8]> {
    field(value, key)?.as_bytes().map(Vec::as_slice).with_context(|| format!("`{key}` is not bytes"))
}

/// A framed request or answer's `body` (`{v: 1, body}`), as the one variant it names.
fn variant(frame: &Value) -> anyhow::Result<(String, Option<&Value>)> {
    ensure!(field(frame, "v")?.as_integer() == Some(1.into()), "frame version is not 1");
    match field(frame, "body")? {
        Value::Text(name) => Ok((name.clone(), None)),
        Value::Map(entries) if entries.len() == 1 => {
            Ok((entries[0].0.as_text().context("variant name")?.to_owned(), Some(&entries[0].1)))
        }
        other => bail!("the body is neither a variant name nor a one-key map: {other:?}"),
    }
}

fn frame(name: &str, fields: Value) -> Vec<u8> {
    encode(&map(vec![("v", Value::Integer(1.into())), ("body", map(vec![(name, fields)]))]))
}

// --- Level 2 ---

struct Advert {
    seq: u64,
    capsules: Vec<String>,
}

/// The ed25519 key inside an ed25519 PeerId (an identity multihash of the protobuf key).
fn key_of(peer: PeerId) -> anyhow::Result<[u8; 32]> {
    let bytes = peer.to_bytes();
    ensure!(bytes.len() == 38 && bytes[..6] == [0x00, 0x24, 0x08, 0x01, 0x12, 0x20], "not an ed25519 PeerId");
    Ok(bytes[6..].try_into().expect("32 bytes"))
}

async fn sync(session: &mut Session, node: PeerId) -> anyhow::Result<Advert> {
    let request = map(vec![
        ("v", Value::Integer(1.into())),
        ("cert", Value::Null),
        ("digest", Value::Array(Vec::new())),
    ]);
    let answer = decode(&session.ask(SYNC, encode(&request)).await?)?;
    let key = key_of(node)?;
    let adverts = field(&answer, "adverts")?.as_array().context("`adverts` is not an array")?;
    for envelope in adverts {
        if bytes_of(envelope, "signer")? != key {
            continue;
        }
        let kind = field(envelope, "kind")?.as_text().context("kind")?;
        ensure!(kind == "node-advert", "the node's envelope is a {kind}");
        let body = bytes_of(envelope, "body")?;
        let mut signed = b"murmur/signed/1\0".to_vec();
        signed.extend_from_slice(kind.as_bytes());
        signed.push(0);
        signed.extend_from_slice(body);
        let signature = Signature::from_slice(bytes_of(envelope, "sig")?).context("sig")?;
        VerifyingKey::from_bytes(&key)?.verify(&signed, &signature).context("the advert's signature")?;
        let advert = decode(body)?;
        let seq = field(&advert, "seq")?.as_integer().and_then(|i| u64::try_from(i).ok()).context("seq")?;
        let capsules = field(&advert, "capsules")?
            .as_array()
            .context("capsules")?
            .iter()
            .map(|c| field(c, "name").and_then(|n| n.as_text().map(str::to_owned).context("name")))
            .collect::<anyhow::Result<_>>()?;
        return Ok(Advert { seq, capsules });
    }
    bail!("the answer holds {} adverts, none signed by the node", adverts.len())
}

// --- Level 3 ---

async fn task(session: &mut Session, capsule: &str, text_in: &str) -> anyhow::Result<String> {
    let message = format!("conformance-{}", std::process::id());
    let mut hasher = Sha256::new();
    hasher.update(b"murmur/task-id/1\0");
    hasher.update(format!("client@{}", session.local()).as_bytes());
    hasher.update([0]);
    hasher.update(message.as_bytes());
    let id = Value::Bytes(hasher.finalize()[..16].to_vec());
    let submit = map(vec![
        ("task", id.clone()),
        ("text", text(text_in)),
        ("sender", text("client")),
        ("capsule", text(capsule)),
        ("context", Value::Null),
        ("message", text(&message)),
        ("traceparent", Value::Null),
    ]);
    let answer = decode(&session.ask(TASK, frame("submit", submit)).await?)?;
    match variant(&answer)? {
        (name, Some(snapshot)) if name == "accepted" => {
            ensure!(field(snapshot, "task")? == &id, "the owner accepted another task id");
        }
        (name, body) => bail!("submit answered `{name}`: {body:?}"),
    }
    // The `events` request keeps its declared key order (wire.md's exception).
    for _ in 0..20 {
        let events = map(vec![
            ("task", id.clone()),
            ("after", Value::Integer(0.into())),
            ("wait_ms", Value::Integer(5000.into())),
            ("settled", Value::Bool(true)),
        ]);
        let answer = decode(&session.ask(TASK, frame("events", events)).await?)?;
        let (name, body) = variant(&answer)?;
        ensure!(name == "events", "events answered `{name}`: {body:?}");
        let snapshot = field(body.context("events without fields")?, "snapshot")?;
        match field(snapshot, "state")?.as_text().context("state")? {
            "completed" => {
                return field(snapshot, "message")?.as_text().map(str::to_owned).context("no result text");
            }
            "submitted" | "working" => {}
            other => bail!("the task ended {other}: {:?}", field(snapshot, "message")),
        }
    }
    bail!("the task did not complete")
}

// --- Level 4 ---

async fn blob(session: &mut Session, digest: &[u8], size: u64) -> anyhow::Result<Vec<u8>> {
    const RANGE: u64 = 1 << 20;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let len = RANGE.min(size - out.len() as u64);
        let request = map(vec![
            ("len", Value::Integer(len.into())),
            ("digest", Value::Bytes(digest.to_vec())),
            ("offset", Value::Integer((out.len() as u64).into())),
        ]);
        let answer = decode(&session.ask(ARTIFACT, frame("blob", request)).await?)?;
        match variant(&answer)? {
            (name, Some(bytes)) if name == "bytes" => {
                let data = bytes_of(bytes, "data")?;
                ensure!(!data.is_empty(), "an empty range before the blob's end");
                out.extend_from_slice(data);
            }
            (name, body) => bail!("blob answered `{name}`: {body:?}"),
        }
    }
    ensure!(Sha256::digest(&out)[..] == *digest, "the blob's bytes do not hash to its digest");
    Ok(out)
}

fn hex_digest(text: &str) -> anyhow::Result<Vec<u8>> {
    let hex = text.strip_prefix("sha256:").context("not a sha256: digest")?;
    ensure!(hex.len() == 64, "not 64 hex digits");
    (0..32).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).context("hex")).collect()
}

async fn artifact(session: &mut Session, name: &str, version: &str) -> anyhow::Result<(String, String, u64)> {
    let resolve = map(vec![("name", text(name)), ("version", text(version))]);
    let answer = decode(&session.ask(ARTIFACT, frame("resolve", resolve)).await?)?;
    let (variant_name, body) = variant(&answer)?;
    ensure!(variant_name == "resolved", "resolve answered `{variant_name}`");
    let body = body.context("resolved without fields")?;
    let manifest = bytes_of(body, "manifest")?.to_vec();
    let size = field(body, "size")?.as_integer().and_then(|i| u64::try_from(i).ok()).context("size")?;
    ensure!(size <= 64 * 1024, "a manifest of {size} bytes");
    let manifest_json: serde_json::Value =
        serde_json::from_slice(&blob(session, &manifest, size).await?).context("the manifest is not JSON")?;
    let layer = &manifest_json["layers"][0];
    let content = layer["digest"].as_str().context("no content layer")?.to_owned();
    let content_size = layer["size"].as_u64().context("no layer size")?;
    blob(session, &hex_digest(&content)?, content_size).await?;
    let manifest_hex: String = manifest.iter().map(|b| format!("{b:02x}")).collect();
    Ok((format!("sha256:{manifest_hex}"), content, content_size))
}
