//! Pull figures: real nodes on 127.0.0.1, a fresh puller per run, the whole pull
//! (resolve, metadata, chunks, final check, commit) timed by the node.
//!
//! With `--provider-uplink-mbit` the providers run in network namespaces of their own
//! instead, each sending through a token bucket (`tc … tbf`) of that rate: the case where
//! a provider's link, not this machine's two shared cores, limits what it can serve, and
//! so the case that shows whether a second provider adds its link to the pull.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use murmur_protocol::Digest;
use murmur_tests::netns::Lab;
use murmur_tests::{TestNode, add_artifact, bin, init_data_dir_with, publisher, trusting, wait_for};

use super::pipe::{self, Cipher};
use serde::Serialize;

/// How the bench's nodes reach each other (all on 127.0.0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// TCP with noise (ChaCha20-Poly1305) and yamux.
    Tcp,
    /// QUIC v1 (TLS 1.3, streams native to the transport).
    Quic,
}

impl Transport {
    fn listen(self, ip: &str) -> String {
        match self {
            Self::Tcp => format!("/ip4/{ip}/tcp/0"),
            Self::Quic => format!("/ip4/{ip}/udp/0/quic-v1"),
        }
    }
}

/// What the bench measures, from the command line.
#[derive(Debug)]
pub struct Options {
    pub sizes_mib: Vec<u64>,
    pub runs: usize,
    pub out: std::path::PathBuf,
    pub pin_cores: bool,
    pub transport: Transport,
    /// Each provider in a network namespace of its own, sending at most this many Mbit/s.
    pub provider_uplink_mbit: Option<u32>,
}

/// Where a node runs: on this machine's loopback, or as host `i` of the lab (a provider
/// behind its rate-limited link).
#[derive(Clone, Copy)]
enum Host<'a> {
    Loopback,
    Lab(&'a Lab, usize),
}

/// The two providers' hosts, each sending through a token bucket of `mbit` Mbit/s.
fn uplinks(mbit: u32) -> anyhow::Result<Lab> {
    let lab = Lab::new(2).map_err(|reason| {
        anyhow::anyhow!("--provider-uplink-mbit needs network namespaces (run as root): {reason}")
    })?;
    // A bucket holds 10 ms at the rate (the kernel's timer granularity needs at least
    // rate / HZ), and never less than two of the largest segments the veth hands it.
    let burst = (u64::from(mbit) * 1_000_000 / 8 / 100).max(128 * 1024);
    for i in 0..2 {
        let status = std::process::Command::new("tc")
            .args(["-n", &lab.namespace(i), "qdisc", "add", "dev", "eth0", "root", "tbf"])
            .args(["rate", &format!("{mbit}mbit"), "burst", &burst.to_string(), "latency", "20ms"])
            .status()
            .context("run tc (iproute2)")?;
        anyhow::ensure!(
            status.success(),
            "tc could not limit {}'s link (is sch_tbf available?)",
            lab.namespace(i)
        );
    }
    Ok(lab)
}

/// What every node of one bench run shares.
#[derive(Clone, Copy)]
struct Setup<'a> {
    public: &'a str,
    pin_cores: bool,
    transport: Transport,
}

#[derive(Debug, Serialize)]
struct Row {
    size_mib: u64,
    runs: usize,
    sha256_mb_s: f64,
    copy_mb_s: f64,
    /// The encrypted pipe with noise's cipher (see `pipe`).
    pipe_chacha_mb_s: f64,
    /// The encrypted pipe with AES-256-GCM.
    pipe_aes_mb_s: f64,
    /// Chunks on one bulk stream per provider (`/murmur/artifact-bulk/1`).
    one_provider_mb_s: f64,
    two_providers_mb_s: f64,
    /// One provider over bulk to a puller that has just pulled another artifact of the
    /// same size from it (its connection, stream window, threads and buffers warm).
    one_provider_warm_mb_s: f64,
    /// The baseline in the same run: providers that serve no bulk streams, so every chunk
    /// is a request and a stream of its own (`/murmur/artifact/1`).
    one_provider_per_request_mb_s: f64,
    two_providers_per_request_mb_s: f64,
    /// A pull's fixed costs, bulk from one provider (medians, as the client saw them): from
    /// `resolving` to `resolved` (resolve and metadata) and from the last chunk written to
    /// the answer (final check, fsync, commit, advert).
    before_chunks_ms: f64,
    after_chunks_ms: f64,
    /// Providers on core 0, the puller on core 1 (`--pin-cores`).
    pinned_cores: bool,
    transport: Transport,
    /// Each provider's sending rate, when limited (`--provider-uplink-mbit`).
    provider_uplink_mbit: Option<u32>,
}

/// `size` bytes that do not repeat within a chunk; another `multiplier` gives other bytes.
fn pattern(size: u64, multiplier: u64) -> Vec<u8> {
    (0..size).map(|i| (i.wrapping_mul(multiplier) >> 24) as u8).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Starts a node on `host`, on core `core` alone when given (through `taskset`).
fn node(
    dir: &Path,
    peer: Option<&TestNode>,
    (host, core): (Host<'_>, Option<u32>),
    transport: Transport,
    env: &[(&str, &str)],
) -> anyhow::Result<TestNode> {
    let (mut launcher, listen) = match host {
        Host::Loopback => (Vec::new(), transport.listen("127.0.0.1")),
        // The API stays on the namespace's own loopback: the bench never asks a provider.
        Host::Lab(lab, i) => (lab.launcher(i), transport.listen(&lab.ip(i))),
    };
    let mut args: Vec<String> =
        ["--api", "127.0.0.1:0", "--listen", &listen, "--no-mdns"].iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = peer {
        args.push("--bootstrap".into());
        args.push(peer.dial_addrs()[0].clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Some(core) = core {
        launcher.extend(["taskset".into(), "-c".into(), core.to_string()]);
    }
    let node = TestNode::launch_env(&launcher, dir, &args, env)?;
    if !env.is_empty() {
        wait_for(Duration::from_secs(5), "the node to say fault injection is on", || {
            node.stderr().contains("fault injection is on").then_some(())
        })
        .map_err(|_| {
            anyhow::anyhow!(
                "murnode ignored {env:?}: build it with the bench (`cargo build --release --workspace`)"
            )
        })?;
    }
    Ok(node)
}

/// Providers that serve no bulk streams (the node's fault injection, which the bench's
/// build has on).
const NO_BULK: &[(&str, &str)] = &[("MURMUR_FAULT_NO_BULK", "1")];

/// One pull as the client saw it.
struct Pulled {
    mb_s: f64,
    /// From the first progress line (resolving) to `resolved`: asking the providers, and
    /// fetching and checking the manifest, config and chunk list.
    before_chunks_ms: f64,
    /// From the progress line that reports every byte written to the final answer: the
    /// final check, the fsync, the commit and the new advert.
    after_chunks_ms: f64,
}

/// Pulls `big@1.0.0` on a fresh node that knows `providers` providers, timing the
/// progress lines of `mur artifact pull --json` as they arrive. A `warm` puller first
/// pulls `warmup@1.0.0` (the same size, other bytes) from the same providers, untimed: its
/// connections, stream windows, threads and buffers are then what a node that pulls
/// regularly has.
fn pull_once(
    first: &TestNode,
    providers: usize,
    setup: Setup<'_>,
    size: u64,
    warm: bool,
) -> anyhow::Result<Pulled> {
    let dir = init_data_dir_with(&trusting(setup.public));
    let puller =
        node(dir.path(), Some(first), (Host::Loopback, setup.pin_cores.then_some(1)), setup.transport, &[])?;
    wait_for(Duration::from_secs(30), "the providers' adverts", || {
        let peers = puller.get("/v1/peers").ok()?;
        let n = peers["peers"].as_array()?.iter().filter(|p| p["artifacts"].as_u64() >= Some(1)).count();
        (n >= providers).then_some(())
    })?;
    if warm {
        pull_named(&puller, "warmup@1.0.0", providers, size)?;
    }
    pull_named(&puller, "big@1.0.0", providers, size)
}

/// One `mur artifact pull REFERENCE --json` on `puller`.
fn pull_named(puller: &TestNode, reference: &str, providers: usize, size: u64) -> anyhow::Result<Pulled> {
    use std::io::BufRead;

    let mut child = std::process::Command::new(bin("mur"))
        .args(["artifact", "pull", reference, "--json", "--node", &puller.api])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let started = Instant::now();
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().context("mur's stdout")?).lines() {
        lines.push((started.elapsed().as_secs_f64() * 1000.0, line?));
    }
    let status = child.wait()?;
    anyhow::ensure!(
        status.success(),
        "pull of {reference} failed: {}",
        lines.iter().map(|(_, line)| line.as_str()).collect::<Vec<_>>().join("\n")
    );
    let events: Vec<(f64, serde_json::Value)> =
        lines.iter().filter_map(|(at, line)| Some((*at, serde_json::from_str(line).ok()?))).collect();
    let at = |pick: &dyn Fn(&serde_json::Value) -> bool| {
        events.iter().find(|(_, e)| pick(e)).map(|(at, _)| *at).context("a progress line is missing")
    };
    let resolving = at(&|e| e["event"] == "resolving")?;
    let resolved = at(&|e| e["event"] == "resolved")?;
    let all_written = at(&|e| e["event"] == "chunks" && e["written"] == size)?;
    let (done_at, done) = events.last().context("mur printed nothing")?;
    anyhow::ensure!(
        done["providers"].as_u64() == Some(providers as u64),
        "used {} providers",
        done["providers"]
    );
    let ms = done["elapsed_ms"].as_f64().unwrap_or(f64::NAN).max(1.0);
    Ok(Pulled {
        mb_s: size as f64 / 1e6 / (ms / 1000.0),
        before_chunks_ms: resolved - resolving,
        after_chunks_ms: done_at - all_written,
    })
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let Options { ref sizes_mib, runs, ref out, pin_cores, transport, provider_uplink_mbit } = *options;
    let lab = provider_uplink_mbit.map(uplinks).transpose()?;
    let provider = |i: usize| lab.as_ref().map_or(Host::Loopback, |lab| Host::Lab(lab, i));
    if pin_cores {
        let taskset = std::process::Command::new("taskset").args(["-c", "1", "true"]).status();
        anyhow::ensure!(
            taskset.is_ok_and(|s| s.success()),
            "--pin-cores needs `taskset` (util-linux) and at least two cores"
        );
    }
    let provider_core = pin_cores.then_some(0);
    let work = tempfile::tempdir()?;
    let (key, public) = publisher(work.path());
    let setup = Setup { public: &public, pin_cores, transport };
    let mut rows = Vec::new();
    for &mib in sizes_mib {
        let size = mib << 20;
        let content = pattern(size, 2_654_435_761);
        let file = work.path().join("content.bin");
        std::fs::write(&file, &content)?;
        let (mut sha, mut copy, mut chacha, mut aes) = (vec![], vec![], vec![], vec![]);
        let digest = Digest::of(&content);
        for _ in 0..runs.max(1) {
            let started = Instant::now();
            std::hint::black_box(Digest::of(std::hint::black_box(&content)));
            sha.push(size as f64 / 1e6 / started.elapsed().as_secs_f64());
            let started = Instant::now();
            std::fs::copy(&file, work.path().join("copy"))?;
            copy.push(size as f64 / 1e6 / started.elapsed().as_secs_f64());
            std::fs::remove_file(work.path().join("copy"))?;
            chacha.push(pipe::run(&file, work.path(), &digest.0, Cipher::ChaCha20Poly1305)?);
            aes.push(pipe::run(&file, work.path(), &digest.0, Cipher::Aes256Gcm)?);
        }
        drop(content);
        let warmup = work.path().join("warmup.bin");
        std::fs::write(&warmup, pattern(size, 2_246_822_519))?;
        let mut provider_dirs = Vec::new();
        for _ in 0..2 {
            let dir = init_data_dir_with("");
            add_artifact(dir.path(), &file, ("big", "1.0.0"), "tool", &["--sign-key", &key]);
            add_artifact(dir.path(), &warmup, ("warmup", "1.0.0"), "tool", &["--sign-key", &key]);
            provider_dirs.push(dir);
        }
        // Bulk streams, then the per-request baseline, on the same provider directories.
        let mut figures = [vec![], vec![], vec![], vec![]];
        let (mut before, mut after, mut warm) = (vec![], vec![], vec![]);
        for (i, env) in [&[][..], NO_BULK].into_iter().enumerate() {
            let first = node(provider_dirs[0].path(), None, (provider(0), provider_core), transport, env)?;
            for _ in 0..runs.max(1) {
                let pulled = pull_once(&first, 1, setup, size, false)?;
                figures[2 * i].push(pulled.mb_s);
                if i == 0 {
                    before.push(pulled.before_chunks_ms);
                    after.push(pulled.after_chunks_ms);
                }
            }
            if i == 0 {
                for _ in 0..runs.max(1) {
                    warm.push(pull_once(&first, 1, setup, size, true)?.mb_s);
                }
            }
            let _second =
                node(provider_dirs[1].path(), Some(&first), (provider(1), provider_core), transport, env)?;
            for _ in 0..runs.max(1) {
                figures[2 * i + 1].push(pull_once(&first, 2, setup, size, false)?.mb_s);
            }
        }
        let [one, two, one_per_request, two_per_request] = figures;
        rows.push(Row {
            size_mib: mib,
            runs: runs.max(1),
            sha256_mb_s: median(sha),
            copy_mb_s: median(copy),
            pipe_chacha_mb_s: median(chacha),
            pipe_aes_mb_s: median(aes),
            one_provider_mb_s: median(one),
            one_provider_warm_mb_s: median(warm),
            two_providers_mb_s: median(two),
            one_provider_per_request_mb_s: median(one_per_request),
            two_providers_per_request_mb_s: median(two_per_request),
            before_chunks_ms: median(before),
            after_chunks_ms: median(after),
            pinned_cores: pin_cores,
            transport,
            provider_uplink_mbit,
        });
    }
    println!(
        "{:>5} {:>7} {:>6} {:>7} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>6}",
        "MiB",
        "sha256",
        "copy",
        "chacha",
        "aes",
        "bulk 1",
        "bulk 2",
        "req 1",
        "req 2",
        "warm 1",
        "1/pipe",
        "req/pipe",
        "warm/pipe",
        "2 / 1"
    );
    for r in &rows {
        println!(
            "{:>5} {:>7.0} {:>6.0} {:>7.0} {:>6.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>6.0}% {:>7.0}% {:>8.0}% {:>5.2}x",
            r.size_mib,
            r.sha256_mb_s,
            r.copy_mb_s,
            r.pipe_chacha_mb_s,
            r.pipe_aes_mb_s,
            r.one_provider_mb_s,
            r.two_providers_mb_s,
            r.one_provider_per_request_mb_s,
            r.two_providers_per_request_mb_s,
            r.one_provider_warm_mb_s,
            100.0 * r.one_provider_mb_s / r.pipe_chacha_mb_s,
            100.0 * r.one_provider_per_request_mb_s / r.pipe_chacha_mb_s,
            100.0 * r.one_provider_warm_mb_s / r.pipe_chacha_mb_s,
            r.two_providers_mb_s / r.one_provider_mb_s
        );
    }
    println!(
        "(MB/s, medians; pipe: the ChaCha20-Poly1305 and AES-256-GCM encrypted pipes; bulk: one \
         bulk stream per provider; req: a request per chunk, the baseline; warm: one provider over \
         bulk to a puller that has just pulled another artifact of the size from it; 1/pipe: one \
         provider over bulk against the ChaCha20 pipe; 2 / 1: two providers against one)"
    );
    for r in &rows {
        println!(
            "({} MiB from one provider over bulk: {:.1} ms from resolving to resolved, {:.1} ms from the last chunk written to the answer)",
            r.size_mib, r.before_chunks_ms, r.after_chunks_ms
        );
    }
    if pin_cores {
        println!("(pinned: the providers on core 0, the puller on core 1)");
    }
    if let Some(mbit) = provider_uplink_mbit {
        println!(
            "(each provider in a network namespace of its own, sending at most {mbit} Mbit/s = {:.1} MB/s through tbf; \
             the puller on this machine's loopback side of the bridge)",
            f64::from(mbit) / 8.0
        );
    }
    println!("(transport: {})", transport.listen("127.0.0.1"));
    std::fs::write(out, serde_json::to_string_pretty(&rows)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
