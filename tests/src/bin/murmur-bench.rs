//! End-to-end benchmarks with real `murnode` processes. Prints a table and writes JSON.
//!
//! ```text
//! cargo build --release --workspace
//! target/release/murmur-bench mesh [--sizes 5,10,20] [--runs 20] [--out bench-mesh.json]
//! ```
//!
//! ```text
//! target/release/murmur-bench tasks [--samples 2000] [--seconds 5] [--out bench-tasks.json]
//! ```
//!
//! `tasks` measures A2A tasks end to end on two nodes: the round trip of a blocking
//! `SendMessage` to `echo` owned by the node the client talks to, next to one owned by the
//! other node (the mesh hop: /murmur/task/1 acceptance plus an events wait), interleaved in
//! one run; then throughput in tasks/s with 1 and 64 concurrent clients, local and mesh.
//!
//! ```text
//! target/release/murmur-bench bundle [--sizes-mib 64,256] [--runs 3] [--out bench-bundle.json]
//! ```
//!
//! ```text
//! target/release/murmur-bench pull [--sizes-mib 64,512] [--runs 3] [--out bench-pull.json]
//! ```
//!
//! `pull` measures a mesh pull between real local nodes (a fresh puller per run, from one
//! and from two providers), next to single-core SHA-256, a file copy and the encrypted pipe
//! (the same bytes sealed, sent over loopback TCP, opened, hashed and written by the
//! shortest code we can write, with ChaCha20-Poly1305 and with AES-256-GCM), in MB/s.
//!
//! `bundle` measures air-gapped bundle export, verify and import of one artifact, next to
//! single-core SHA-256 of the same bytes in memory (the ceiling: every step hashes every
//! byte) and a plain file copy, in MB/s, medians of the runs.
//!
//! `mesh` measures advert convergence: a capsule is added to one node (config + SIGHUP) and
//! we time until every node's API lists it, next to the time until the *first* other node
//! lists it (one gossip hop, the baseline). It also reads the resident memory of an idle
//! node and of a node holding 1,000 adverts (injected by `murmur-testpeer`).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use murmur_protocol::{Advert, HostedCapsule, Millis, SecretKey, Signed};
use murmur_tests::{TestNode, bin, capsules_toml, wait_for};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(name = "murmur-bench")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Capsule runtime: instantiate + call (pooling vs on-demand), a call on a live
    /// instance, and one tool-registry invoke hop. Needs `bash capsules/build.sh`.
    Runtime {
        /// Measured iterations per figure.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-runtime.json")]
        out: PathBuf,
    },
    /// A2A task round trips (local vs over the mesh) and throughput. Needs the guests
    /// (`bash capsules/build.sh`).
    Tasks {
        /// Measured round trips per figure.
        #[arg(long, default_value_t = 2000)]
        samples: usize,
        /// Seconds per throughput figure.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-tasks.json")]
        out: PathBuf,
    },
    /// Pull throughput between local nodes (from one and from two providers) next to
    /// SHA-256, a file copy and an encrypted pipe without libp2p (the work itself). Uses
    /// the release binaries (`cargo build --release`).
    Pull {
        /// Artifact sizes in MiB.
        #[arg(long, value_delimiter = ',', default_value = "64,512")]
        sizes_mib: Vec<u64>,
        /// Runs per figure (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-pull.json")]
        out: PathBuf,
        /// Run the providers on core 0 and the puller on core 1 (with `taskset`), so that
        /// no end shares a core with the other: shows which end is the limit.
        #[arg(long)]
        pin_cores: bool,
        /// The transport between the nodes: `tcp` (noise + yamux) or `quic` (TLS 1.3).
        #[arg(long, value_enum, default_value_t = pull_bench::Transport::Tcp)]
        transport: pull_bench::Transport,
    },
    /// Bundle export, verify and import throughput next to SHA-256 and a file copy.
    Bundle {
        /// Artifact sizes in MiB (the store takes at most 1024).
        #[arg(long, value_delimiter = ',', default_value = "64,256")]
        sizes_mib: Vec<u64>,
        /// Runs per figure (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-bundle.json")]
        out: PathBuf,
    },
    /// Advert convergence time and node memory.
    Mesh {
        /// Mesh sizes (local processes).
        #[arg(long, value_delimiter = ',', default_value = "5,10,20")]
        sizes: Vec<usize>,
        /// Measured changes per size.
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-mesh.json")]
        out: PathBuf,
    },
}

#[derive(Debug, Serialize)]
struct Convergence {
    nodes: usize,
    runs: usize,
    first_p50_ms: f64,
    first_p99_ms: f64,
    all_p50_ms: f64,
    all_p99_ms: f64,
    all_max_ms: f64,
}

#[derive(Debug, Serialize)]
struct Memory {
    idle_rss_kib: u64,
    adverts: usize,
    with_adverts_rss_kib: u64,
    per_advert_bytes: f64,
}

#[derive(Debug, Serialize)]
struct MeshReport {
    convergence: Vec<Convergence>,
    memory: Memory,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Bench::Runtime { iterations, out } => runtime_bench::run(iterations, &out)?,
        Bench::Tasks { samples, seconds, out } => tasks_bench::run(samples, seconds, &out)?,
        Bench::Bundle { sizes_mib, runs, out } => bundle_bench::run(&sizes_mib, runs, &out)?,
        Bench::Pull { sizes_mib, runs, out, pin_cores, transport } => {
            pull_bench::run(&sizes_mib, runs, &out, pin_cores, transport)?
        }
        Bench::Mesh { sizes, runs, out } => {
            let convergence: Vec<Convergence> =
                sizes.iter().map(|&n| convergence(n, runs)).collect::<anyhow::Result<_>>()?;
            let memory = memory(1000)?;
            print_table(&convergence, &memory);
            let report = MeshReport { convergence, memory };
            std::fs::write(&out, serde_json::to_string_pretty(&report)?)?;
            eprintln!("wrote {}", out.display());
        }
    }
    Ok(())
}

mod runtime_bench {
    //! Runtime figures, each a distribution of single-operation timings.

    use std::path::Path;
    use std::sync::Arc;
    use std::time::Instant;

    use murmur_runtime::ports::Ports;
    use murmur_runtime::{CapsuleManifest, Runtime, RuntimeOptions, ToolInput};
    use murmur_store::ArtifactStore;
    use serde::Serialize;

    #[derive(Debug, Serialize)]
    struct Figure {
        name: String,
        samples: usize,
        p50_us: f64,
        p99_us: f64,
    }

    fn summarize(name: &str, mut micros: Vec<f64>) -> Figure {
        micros.sort_by(f64::total_cmp);
        Figure {
            name: name.into(),
            samples: micros.len(),
            p50_us: super::percentile(&micros, 50.0),
            p99_us: super::percentile(&micros, 99.0),
        }
    }

    fn runtime(dir: &Path, pooling: bool) -> anyhow::Result<Runtime> {
        let store = Arc::new(ArtifactStore::open(&dir.join("store"))?);
        let runtime = Runtime::new(
            RuntimeOptions { data_dir: dir.to_path_buf(), pooling },
            store,
            Ports::standalone()?,
        )?;
        for (name, kind, extra) in [
            ("echo", "tool", String::new()),
            (
                "invoke_loop",
                "capsule",
                "[capabilities]\ntools = [\"echo\"]\n[wasi]\nenv = { INVOKE_COUNT = \"@COUNT@\" }\n"
                    .to_owned(),
            ),
        ] {
            for (suffix, count) in [("", "0"), ("-200", "200")] {
                if kind == "tool" && !suffix.is_empty() {
                    continue;
                }
                let text = format!(
                    "name = \"{}{suffix}\"\nversion = \"1\"\nkind = \"{kind}\"\nartifact = \"{}\"\n{}",
                    name.replace('_', "-"),
                    murmur_tests::guest(name).display(),
                    extra.replace("@COUNT@", count)
                );
                runtime.install(CapsuleManifest::parse(&text, Path::new("/"), dir)?)?;
            }
        }
        Ok(runtime)
    }

    async fn fresh_calls(runtime: &Runtime, iterations: usize) -> anyhow::Result<Vec<f64>> {
        let input = || ToolInput { data: Some("x".into()), log_path: None };
        for _ in 0..iterations / 10 {
            runtime.run_tool("echo", input()).await?;
        }
        let mut micros = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let start = Instant::now();
            runtime.run_tool("echo", input()).await?;
            micros.push(start.elapsed().as_secs_f64() * 1e6);
        }
        Ok(micros)
    }

    pub fn run(iterations: usize, out: &Path) -> anyhow::Result<()> {
        let threads = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let figures = threads.block_on(async {
            let dir = tempfile::tempdir()?;
            let pooled = runtime(&dir.path().join("pooled"), true)?;
            let on_demand = runtime(&dir.path().join("on-demand"), false)?;
            let mut figures = vec![
                summarize("store + instantiate + call, pooling", fresh_calls(&pooled, iterations).await?),
                summarize(
                    "store + instantiate + call, on-demand",
                    fresh_calls(&on_demand, iterations).await?,
                ),
            ];
            let mut live = pooled.live_tool("echo").await?;
            let mut micros = Vec::with_capacity(iterations * 5);
            for i in 0..iterations * 5 {
                let input = ToolInput { data: Some("x".into()), log_path: None };
                let start = Instant::now();
                live.call(input).await?;
                if i >= iterations / 2 {
                    micros.push(start.elapsed().as_secs_f64() * 1e6);
                }
            }
            figures.push(summarize("call on a live instance", micros));
            // One invoke hop: a capsule that invokes echo 200 times, minus one that does not.
            let runs = (iterations / 200).max(20);
            let (mut zero, mut two_hundred) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let start = Instant::now();
                pooled.run_capsule("invoke-loop").await?;
                zero.push(start.elapsed().as_secs_f64() * 1e6);
                let start = Instant::now();
                pooled.run_capsule("invoke-loop-200").await?;
                two_hundred.push(start.elapsed().as_secs_f64() * 1e6);
            }
            let per_hop: Vec<f64> = two_hundred.iter().zip(&zero).map(|(t, z)| (t - z) / 200.0).collect();
            figures.push(summarize("tool-registry invoke hop (capsule → tool)", per_hop));
            anyhow::Ok(figures)
        })?;
        println!("{:<46} {:>8} {:>10} {:>10}", "capsule runtime", "samples", "p50 µs", "p99 µs");
        for f in &figures {
            println!("{:<46} {:>8} {:>10.2} {:>10.2}", f.name, f.samples, f.p50_us, f.p99_us);
        }
        println!("pooling vs on-demand (p50): {:.2}x faster", figures[1].p50_us / figures[0].p50_us);
        std::fs::write(out, serde_json::to_string_pretty(&figures)?)?;
        eprintln!("wrote {}", out.display());
        Ok(())
    }
}

mod bundle_bench {
    //! Bundle throughput: export, verify, import, next to SHA-256 and a file copy.

    use std::path::Path;
    use std::time::Instant;

    use murmur_protocol::{Digest, Millis, SecretKey};
    use murmur_store::bundle;
    use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform};
    use serde::Serialize;

    #[derive(Debug, Serialize)]
    struct Row {
        size_mib: u64,
        sha256_mb_s: f64,
        copy_mb_s: f64,
        copy_fsync_mb_s: f64,
        export_mb_s: f64,
        verify_mb_s: f64,
        import_mb_s: f64,
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    fn rate(bytes: u64, started: Instant) -> f64 {
        bytes as f64 / 1e6 / started.elapsed().as_secs_f64()
    }

    pub fn run(sizes_mib: &[u64], runs: usize, out: &Path) -> anyhow::Result<()> {
        let key = SecretKey::from_seed([5; 32]);
        let trusted = [key.public()];
        let mut rows = Vec::new();
        for &mib in sizes_mib {
            let size = mib * 1024 * 1024;
            let content: Vec<u8> = (0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
            let work = tempfile::tempdir()?;
            let file = work.path().join("content.wasm");
            std::fs::write(&file, &content)?;
            let source = ArtifactStore::open(&work.path().join("source"))?;
            let meta = ArtifactMeta {
                name: "big".into(),
                version: "1.0.0".into(),
                kind: CapsuleKind::Tool,
                runtime: Platform::Wasm,
                description: String::new(),
                tags: vec![],
                input_schema: None,
                output_schema: None,
            };
            let stored = source.add(&meta, &content, None)?;
            let (mut sha, mut copy, mut synced) = (vec![], vec![], vec![]);
            let (mut export, mut verify, mut import) = (vec![], vec![], vec![]);
            for run in 0..runs.max(1) {
                let started = Instant::now();
                std::hint::black_box(Digest::of(&content));
                sha.push(rate(size, started));
                let started = Instant::now();
                std::fs::copy(&file, work.path().join(format!("copy-{run}")))?;
                copy.push(rate(size, started));
                // The disk's ceiling: a copy made durable, as export and import make theirs.
                let started = Instant::now();
                let synced_path = work.path().join(format!("synced-{run}"));
                std::fs::copy(&file, &synced_path)?;
                std::fs::File::open(&synced_path)?.sync_all()?;
                synced.push(rate(size, started));
                std::fs::remove_file(&synced_path)?;
                let bundle_path = work.path().join(format!("b-{run}.bundle"));
                let started = Instant::now();
                bundle::export(
                    &source,
                    std::slice::from_ref(&stored),
                    &key,
                    Millis(0),
                    &bundle_path,
                    &mut |_, _| {},
                )?;
                export.push(rate(size, started));
                let started = Instant::now();
                bundle::verify(&bundle_path, &trusted, &mut |_, _| {})?;
                verify.push(rate(size, started));
                let target = ArtifactStore::open(&work.path().join(format!("target-{run}")))?;
                let started = Instant::now();
                bundle::import(&target, &bundle_path, &trusted, &mut |_, _| {})?;
                import.push(rate(size, started));
                std::fs::remove_file(work.path().join(format!("copy-{run}")))?;
            }
            rows.push(Row {
                size_mib: mib,
                sha256_mb_s: median(sha),
                copy_mb_s: median(copy),
                copy_fsync_mb_s: median(synced),
                export_mb_s: median(export),
                verify_mb_s: median(verify),
                import_mb_s: median(import),
            });
        }
        println!(
            "{:>6} {:>12} {:>10} {:>11} {:>10} {:>10} {:>10} {:>14}",
            "MiB", "sha256 MB/s", "copy MB/s", "copy+fsync", "export", "verify", "import", "import/sha256"
        );
        for r in &rows {
            println!(
                "{:>6} {:>12.0} {:>10.0} {:>11.0} {:>10.0} {:>10.0} {:>10.0} {:>13.0}%",
                r.size_mib,
                r.sha256_mb_s,
                r.copy_mb_s,
                r.copy_fsync_mb_s,
                r.export_mb_s,
                r.verify_mb_s,
                r.import_mb_s,
                100.0 * r.import_mb_s / r.sha256_mb_s
            );
        }
        std::fs::write(out, serde_json::to_string_pretty(&rows)?)?;
        eprintln!("wrote {}", out.display());
        Ok(())
    }
}

mod pull_bench {
    //! Pull figures: real nodes on 127.0.0.1, a fresh puller per run, the whole pull
    //! (resolve, metadata, chunks, final check, commit) timed by the node.

    use std::path::Path;
    use std::time::{Duration, Instant};

    use murmur_protocol::Digest;
    use murmur_tests::{TestNode, init_data_dir_with, mur, publisher, trusting, wait_for};

    use super::pipe_bench::{self, Cipher};
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
        fn listen(self) -> &'static str {
            match self {
                Self::Tcp => "/ip4/127.0.0.1/tcp/0",
                Self::Quic => "/ip4/127.0.0.1/udp/0/quic-v1",
            }
        }
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
        /// The encrypted pipe with noise's cipher (see `pipe_bench`).
        pipe_chacha_mb_s: f64,
        /// The encrypted pipe with AES-256-GCM.
        pipe_aes_mb_s: f64,
        one_provider_mb_s: f64,
        two_providers_mb_s: f64,
        /// Providers on core 0, the puller on core 1 (`--pin-cores`).
        pinned_cores: bool,
        transport: Transport,
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// Starts a node, on core `core` alone when given (through `taskset`).
    fn node(
        dir: &Path,
        peer: Option<&TestNode>,
        core: Option<u32>,
        transport: Transport,
    ) -> anyhow::Result<TestNode> {
        let mut args: Vec<String> = ["--api", "127.0.0.1:0", "--listen", transport.listen(), "--no-mdns"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        if let Some(peer) = peer {
            args.push("--bootstrap".into());
            args.push(peer.dial_addrs()[0].clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let launcher: Vec<String> =
            core.map(|core| vec!["taskset".into(), "-c".into(), core.to_string()]).unwrap_or_default();
        TestNode::launch(&launcher, dir, &args)
    }

    /// Pulls NAME@1.0.0 on a fresh node that knows `providers` providers; MB/s.
    fn pull_once(first: &TestNode, providers: usize, setup: Setup<'_>, size: u64) -> anyhow::Result<f64> {
        let dir = init_data_dir_with(&trusting(setup.public));
        let puller = node(dir.path(), Some(first), setup.pin_cores.then_some(1), setup.transport)?;
        wait_for(Duration::from_secs(30), "the providers' adverts", || {
            let peers = puller.get("/v1/peers").ok()?;
            let n = peers["peers"].as_array()?.iter().filter(|p| p["artifacts"] == 1).count();
            (n >= providers).then_some(())
        })?;
        let out = mur(&["artifact", "pull", "big@1.0.0", "--json", "--node", &puller.api]);
        anyhow::ensure!(out.status.success(), "pull failed: {}", String::from_utf8_lossy(&out.stdout));
        let text = String::from_utf8_lossy(&out.stdout);
        let done: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or_default())?;
        anyhow::ensure!(
            done["providers"].as_u64() == Some(providers as u64),
            "used {} providers",
            done["providers"]
        );
        let ms = done["elapsed_ms"].as_f64().unwrap_or(f64::NAN).max(1.0);
        Ok(size as f64 / 1e6 / (ms / 1000.0))
    }

    pub fn run(
        sizes_mib: &[u64],
        runs: usize,
        out: &Path,
        pin_cores: bool,
        transport: Transport,
    ) -> anyhow::Result<()> {
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
            let content: Vec<u8> = (0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
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
                chacha.push(pipe_bench::run(&file, work.path(), &digest.0, Cipher::ChaCha20Poly1305)?);
                aes.push(pipe_bench::run(&file, work.path(), &digest.0, Cipher::Aes256Gcm)?);
            }
            drop(content);
            let mut provider_dirs = Vec::new();
            for _ in 0..2 {
                let dir = init_data_dir_with("");
                let added = mur(&[
                    "artifact",
                    "add",
                    file.to_str().unwrap_or_default(),
                    "--name",
                    "big",
                    "--version",
                    "1.0.0",
                    "--kind",
                    "tool",
                    "--sign-key",
                    &key,
                    "--data-dir",
                    dir.path().to_str().unwrap_or_default(),
                ]);
                anyhow::ensure!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
                provider_dirs.push(dir);
            }
            let (mut one, mut two) = (vec![], vec![]);
            {
                let first = node(provider_dirs[0].path(), None, provider_core, transport)?;
                for _ in 0..runs.max(1) {
                    one.push(pull_once(&first, 1, setup, size)?);
                }
                let _second = node(provider_dirs[1].path(), Some(&first), provider_core, transport)?;
                for _ in 0..runs.max(1) {
                    two.push(pull_once(&first, 2, setup, size)?);
                }
            }
            rows.push(Row {
                size_mib: mib,
                runs: runs.max(1),
                sha256_mb_s: median(sha),
                copy_mb_s: median(copy),
                pipe_chacha_mb_s: median(chacha),
                pipe_aes_mb_s: median(aes),
                one_provider_mb_s: median(one),
                two_providers_mb_s: median(two),
                pinned_cores: pin_cores,
                transport,
            });
        }
        println!(
            "{:>6} {:>12} {:>10} {:>12} {:>10} {:>14} {:>15} {:>12} {:>12}",
            "MiB",
            "sha256 MB/s",
            "copy MB/s",
            "pipe chacha",
            "pipe aes",
            "pull, 1 prov.",
            "pull, 2 prov.",
            "1 / sha256",
            "2 / sha256"
        );
        for r in &rows {
            println!(
                "{:>6} {:>12.0} {:>10.0} {:>12.0} {:>10.0} {:>14.0} {:>15.0} {:>11.0}% {:>11.0}%",
                r.size_mib,
                r.sha256_mb_s,
                r.copy_mb_s,
                r.pipe_chacha_mb_s,
                r.pipe_aes_mb_s,
                r.one_provider_mb_s,
                r.two_providers_mb_s,
                100.0 * r.one_provider_mb_s / r.sha256_mb_s,
                100.0 * r.two_providers_mb_s / r.sha256_mb_s
            );
        }
        if pin_cores {
            println!("(pinned: the providers on core 0, the puller on core 1)");
        }
        println!("(transport: {})", transport.listen());
        std::fs::write(out, serde_json::to_string_pretty(&rows)?)?;
        eprintln!("wrote {}", out.display());
        Ok(())
    }
}

mod pipe_bench {
    //! The encrypted pipe: what any encrypted, verified pull must do to each byte, done by the
    //! shortest code we can write, with none of libp2p, yamux, CBOR or the scheduler. One
    //! thread reads the file straight into noise-sized frames (at most 65,535 bytes with the
    //! 16-byte tag, behind a 2-byte length, as noise frames them), seals them in place and
    //! sends them over a loopback TCP connection; another receives each frame straight into
    //! its place in a 1 MiB chunk, opens it in place, hashes the chunk, writes it to the
    //! destination file, and has it flushed in the background every 64 MiB and fsynced at the
    //! end, as a pull does. Next to the pull, it shows how much of the time is the work itself
    //! on this machine and how much is the stack around it.

    use std::fs::File;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::FileExt;
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Instant;

    use anyhow::Context;
    use ring::aead::{AES_256_GCM, Aad, Algorithm, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
    use serde::Serialize;
    use sha2::{Digest as _, Sha256};

    /// The largest noise frame, tag included.
    const FRAME_MAX: usize = 65_535;
    const TAG: usize = 16;
    const CHUNK: usize = 1 << 20;
    const FLUSH_EVERY: u64 = 64 << 20;

    /// The pipe's cipher.
    #[derive(Debug, Clone, Copy, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Cipher {
        /// What noise (and libp2p's TLS, which lists it first) negotiates.
        ChaCha20Poly1305,
        /// What this CPU seals fastest when it has AES instructions.
        Aes256Gcm,
    }

    impl Cipher {
        fn algorithm(self) -> &'static Algorithm {
            match self {
                Self::ChaCha20Poly1305 => &CHACHA20_POLY1305,
                Self::Aes256Gcm => &AES_256_GCM,
            }
        }
    }

    /// Noise's ChaCha20-Poly1305 nonce: four zero bytes, then the frame counter in little
    /// endian (used for AES-GCM too: the layout costs nothing either way).
    fn nonce(counter: &mut u64) -> Nonce {
        let mut bytes = [0u8; 12];
        bytes[4..].copy_from_slice(&counter.to_le_bytes());
        *counter += 1;
        Nonce::assume_unique_for_key(bytes)
    }

    fn key(cipher: Cipher) -> anyhow::Result<LessSafeKey> {
        let algorithm = cipher.algorithm();
        let unbound = UnboundKey::new(algorithm, &vec![0x5a; algorithm.key_len()])
            .map_err(|_| anyhow::anyhow!("bad key length"))?;
        Ok(LessSafeKey::new(unbound))
    }

    /// Reads `source` chunk by chunk into frames, seals them and sends them.
    fn send(source: &File, size: u64, mut socket: TcpStream, cipher: Cipher) -> anyhow::Result<()> {
        let key = key(cipher)?;
        let mut counter = 0;
        let mut out = vec![0u8; CHUNK + CHUNK.div_ceil(FRAME_MAX - TAG) * (2 + TAG)];
        let mut offset = 0u64;
        while offset < size {
            let chunk = usize::try_from((size - offset).min(CHUNK as u64))?;
            let (mut at, mut taken) = (0, 0);
            while taken < chunk {
                let len = (chunk - taken).min(FRAME_MAX - TAG);
                out[at..at + 2].copy_from_slice(&u16::try_from(len + TAG)?.to_be_bytes());
                let body = &mut out[at + 2..at + 2 + len];
                source.read_exact_at(body, offset + taken as u64)?;
                let tag = key
                    .seal_in_place_separate_tag(nonce(&mut counter), Aad::empty(), body)
                    .map_err(|_| anyhow::anyhow!("seal failed"))?;
                out[at + 2 + len..at + 2 + len + TAG].copy_from_slice(tag.as_ref());
                at += 2 + len + TAG;
                taken += len;
            }
            socket.write_all(&out[..at])?;
            offset += chunk as u64;
        }
        Ok(())
    }

    /// Receives and opens `size` bytes; a second thread hashes and writes them to `dest`
    /// (as a pull checks chunks off its network task). Returns their SHA-256.
    fn receive(mut socket: TcpStream, size: u64, dest: &File, cipher: Cipher) -> anyhow::Result<[u8; 32]> {
        let key = key(cipher)?;
        let mut counter = 0;
        // Two chunk buffers go round: one being filled, one being hashed and written.
        let (full_tx, full_rx) = mpsc::sync_channel::<(Vec<u8>, usize, u64)>(1);
        let (empty_tx, empty_rx) = mpsc::sync_channel::<Vec<u8>>(2);
        for _ in 0..2 {
            empty_tx.send(vec![0u8; CHUNK + FRAME_MAX])?;
        }
        let writer_dest = dest.try_clone()?;
        let writer = std::thread::spawn(move || -> anyhow::Result<[u8; 32]> {
            let mut hash = Sha256::new();
            let (flushes, flusher) = flusher(writer_dest.try_clone()?);
            let mut unflushed = 0u64;
            for (buf, len, offset) in full_rx {
                hash.update(&buf[..len]);
                writer_dest.write_all_at(&buf[..len], offset)?;
                unflushed += len as u64;
                if unflushed >= FLUSH_EVERY {
                    unflushed = 0;
                    // At most one flush waiting behind the running one, as in a pull.
                    let _ = flushes.try_send(());
                }
                let _ = empty_tx.send(buf);
            }
            drop(flushes);
            flusher.join().map_err(|_| anyhow::anyhow!("the flusher panicked"))??;
            Ok(hash.finalize().into())
        });
        let mut feed = || -> anyhow::Result<()> {
            let mut offset = 0u64;
            while offset < size {
                let chunk = usize::try_from((size - offset).min(CHUNK as u64))?;
                let mut buf = empty_rx.recv()?;
                let mut filled = 0;
                while filled < chunk {
                    let mut len = [0u8; 2];
                    socket.read_exact(&mut len)?;
                    let len = usize::from(u16::from_be_bytes(len));
                    anyhow::ensure!(len > TAG && filled + len - TAG <= chunk, "a frame crosses its chunk");
                    let frame = &mut buf[filled..filled + len];
                    socket.read_exact(frame)?;
                    key.open_in_place(nonce(&mut counter), Aad::empty(), frame)
                        .map_err(|_| anyhow::anyhow!("a frame does not open"))?;
                    filled += len - TAG;
                }
                full_tx.send((buf, chunk, offset))?;
                offset += chunk as u64;
            }
            Ok(())
        };
        let fed = feed();
        drop(full_tx);
        // The writer's error first: when it stops, feeding fails only with a closed channel.
        let digest = writer.join().map_err(|_| anyhow::anyhow!("the writer panicked"))?.context("writing")?;
        fed?;
        dest.sync_all()?;
        Ok(digest)
    }

    /// A thread that flushes `file` each time it is asked to.
    fn flusher(file: File) -> (mpsc::SyncSender<()>, std::thread::JoinHandle<std::io::Result<()>>) {
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::spawn(move || {
            for () in rx {
                file.sync_data()?;
            }
            Ok(())
        });
        (tx, thread)
    }

    /// Pipes `source` into a new file in `dir`; MB/s. Fails unless the bytes that arrived
    /// hash to `expected`.
    pub fn run(source: &Path, dir: &Path, expected: &[u8; 32], cipher: Cipher) -> anyhow::Result<f64> {
        let size = std::fs::metadata(source)?.len();
        let file = File::open(source)?;
        let dest_path = dir.join("piped");
        let dest = File::create(&dest_path)?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let started = Instant::now();
        let sender = std::thread::spawn(move || -> anyhow::Result<()> {
            let socket = TcpStream::connect(addr)?;
            socket.set_nodelay(true)?;
            send(&file, size, socket, cipher)
        });
        let (socket, _) = listener.accept()?;
        let received = receive(socket, size, &dest, cipher);
        let elapsed = started.elapsed();
        // The receiver's error first: a sender that fails because the receiver gave up only
        // reports a broken pipe.
        let sent = sender.join().map_err(|_| anyhow::anyhow!("the sender panicked"))?;
        let digest = received.context("receiving")?;
        sent.context("sending")?;
        std::fs::remove_file(&dest_path)?;
        anyhow::ensure!(&digest == expected, "the piped bytes do not hash to the source's digest");
        Ok(size as f64 / 1e6 / elapsed.as_secs_f64())
    }
}

mod tasks_bench {
    //! Task figures: latency distributions and throughput, local next to mesh.

    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use murmur_tests::{TestNode, install_manifest, wait_for};
    use serde::Serialize;
    use serde_json::json;

    #[derive(Debug, Serialize)]
    struct Latency {
        name: String,
        samples: usize,
        p50_us: f64,
        p99_us: f64,
    }

    #[derive(Debug, Serialize)]
    struct Throughput {
        name: String,
        clients: usize,
        tasks: u64,
        seconds: f64,
        tasks_per_s: f64,
        errors: u64,
    }

    #[derive(Debug, Serialize)]
    struct Report {
        latency: Vec<Latency>,
        mesh_overhead_p50_us: f64,
        mesh_overhead_p99_us: f64,
        throughput: Vec<Throughput>,
    }

    const CONFIG: &str = "[adverts]\nrefresh_secs = 5\nttl_secs = 30\n";

    fn node(capsule: &str, bootstrap: Option<&TestNode>) -> anyhow::Result<(TestNode, tempfile::TempDir)> {
        let dir = murmur_tests::init_data_dir_with(CONFIG);
        install_manifest(dir.path(), capsule, "echo", "[lifecycle]\nworkers = 64\n");
        let mut flags: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
        if let Some(peer) = bootstrap {
            flags.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        // Logs at warn: per-task info lines would measure the terminal.
        let node = TestNode::start_in_env(dir.path(), &flags, &[("MURNODE_LOG", "warn")])?;
        Ok((node, dir))
    }

    static NEXT_ID: AtomicU64 = AtomicU64::new(0);

    /// One blocking `SendMessage`; true when the task completed.
    async fn send(client: &reqwest::Client, url: &str, tenant: &str) -> anyhow::Result<bool> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "SendMessage", "params": {
            "tenant": tenant,
            "message": { "messageId": format!("bench-{}-{id}", std::process::id()), "parts": [{ "text": "x" }] },
        }});
        let answer: serde_json::Value = client.post(url).json(&body).send().await?.json().await?;
        Ok(answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED")
    }

    fn summarize(name: &str, mut micros: Vec<f64>) -> Latency {
        micros.sort_by(f64::total_cmp);
        Latency {
            name: name.into(),
            samples: micros.len(),
            p50_us: super::percentile(&micros, 50.0),
            p99_us: super::percentile(&micros, 99.0),
        }
    }

    async fn throughput(url: &str, tenant: &str, name: &str, clients: usize, seconds: u64) -> Throughput {
        let done = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let until = started + Duration::from_secs(seconds);
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                let (done, errors) = (done.clone(), errors.clone());
                let (url, tenant) = (url.to_owned(), tenant.to_owned());
                tokio::spawn(async move {
                    let client = reqwest::Client::new();
                    while Instant::now() < until {
                        match send(&client, &url, &tenant).await {
                            Ok(true) => done.fetch_add(1, Ordering::Relaxed),
                            _ => errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
            })
            .collect();
        for worker in workers {
            let _ = worker.await;
        }
        let seconds = started.elapsed().as_secs_f64();
        let tasks = done.load(Ordering::Relaxed);
        Throughput {
            name: name.into(),
            clients,
            tasks,
            seconds,
            tasks_per_s: tasks as f64 / seconds,
            errors: errors.load(Ordering::Relaxed),
        }
    }

    pub fn run(samples: usize, seconds: u64, out: &Path) -> anyhow::Result<()> {
        let (a, _a_dir) = node("echo", None)?;
        let (_b, _b_dir) = node("echo-remote", Some(&a))?;
        wait_for(Duration::from_secs(30), "A to know echo-remote", || {
            a.capsule_names().iter().any(|n| n == "echo-remote").then_some(())
        })?;
        let url = format!("{}/", a.api);
        let threads = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let report = threads.block_on(async {
            let client = reqwest::Client::new();
            for _ in 0..samples / 10 + 20 {
                send(&client, &url, "echo").await?;
                send(&client, &url, "echo-remote").await?;
            }
            // Interleaved, so both see the same machine noise.
            let (mut local, mut mesh) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
            for _ in 0..samples {
                let start = Instant::now();
                anyhow::ensure!(send(&client, &url, "echo").await?, "a local echo task did not complete");
                local.push(start.elapsed().as_secs_f64() * 1e6);
                let start = Instant::now();
                anyhow::ensure!(
                    send(&client, &url, "echo-remote").await?,
                    "a mesh echo task did not complete"
                );
                mesh.push(start.elapsed().as_secs_f64() * 1e6);
            }
            let local = summarize("echo task, owner = this node", local);
            let mesh = summarize("echo task, owner = the other node", mesh);
            let mut figures = Vec::new();
            for clients in [1, 64] {
                figures.push(throughput(&url, "echo", "local", clients, seconds).await);
                figures.push(throughput(&url, "echo-remote", "mesh", clients, seconds).await);
            }
            anyhow::Ok(Report {
                mesh_overhead_p50_us: mesh.p50_us - local.p50_us,
                mesh_overhead_p99_us: mesh.p99_us - local.p99_us,
                latency: vec![local, mesh],
                throughput: figures,
            })
        })?;
        println!(
            "{:<40} {:>8} {:>10} {:>10}",
            "blocking SendMessage round trip", "samples", "p50 µs", "p99 µs"
        );
        for l in &report.latency {
            println!("{:<40} {:>8} {:>10.1} {:>10.1}", l.name, l.samples, l.p50_us, l.p99_us);
        }
        println!(
            "mesh overhead: p50 {:.1} µs, p99 {:.1} µs (ratio p50 {:.2}x)",
            report.mesh_overhead_p50_us,
            report.mesh_overhead_p99_us,
            report.latency[1].p50_us / report.latency[0].p50_us
        );
        println!("\n{:<10} {:>8} {:>10} {:>12} {:>8}", "throughput", "clients", "tasks", "tasks/s", "errors");
        for t in &report.throughput {
            println!(
                "{:<10} {:>8} {:>10} {:>12.0} {:>8}",
                t.name, t.clients, t.tasks, t.tasks_per_s, t.errors
            );
        }
        std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
        eprintln!("wrote {}", out.display());
        Ok(())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn convergence(n: usize, runs: usize) -> anyhow::Result<Convergence> {
    eprintln!("mesh of {n} nodes: starting");
    let mut nodes: Vec<TestNode> = Vec::new();
    for k in 0..n {
        let toml = capsules_toml(&[(&format!("base{k}"), "1.0.0")]);
        nodes.push(TestNode::start_with(&toml, nodes.last())?);
    }
    let base: BTreeSet<String> = (0..n).map(|k| format!("base{k}")).collect();
    for node in &nodes {
        wait_for(Duration::from_secs(60), "initial convergence", || {
            base.is_subset(&node.capsule_names().into_iter().collect()).then_some(())
        })?;
    }
    let (mut first, mut all) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let origin = run % n;
        let name = format!("probe{run}");
        let toml = capsules_toml(&[(&format!("base{origin}"), "1.0.0"), (&name, "1.0.0")]);
        std::fs::write(nodes[origin].data_dir.join("murnode.toml"), toml)?;
        let started = Instant::now();
        nodes[origin].reload();
        let (first_ms, all_ms) = time_until_listed(&nodes, origin, &name)?;
        first.push(first_ms);
        all.push(all_ms);
        eprintln!("  run {run}: first {first_ms:.1} ms, all {all_ms:.1} ms ({:?} total)", started.elapsed());
    }
    first.sort_by(f64::total_cmp);
    all.sort_by(f64::total_cmp);
    Ok(Convergence {
        nodes: n,
        runs,
        first_p50_ms: percentile(&first, 50.0),
        first_p99_ms: percentile(&first, 99.0),
        all_p50_ms: percentile(&all, 50.0),
        all_p99_ms: percentile(&all, 99.0),
        all_max_ms: *all.last().unwrap_or(&0.0),
    })
}

/// Polls every node but `origin` in its own thread; returns (first, last) arrival in ms.
fn time_until_listed(nodes: &[TestNode], origin: usize, name: &str) -> anyhow::Result<(f64, f64)> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let done = Arc::new(AtomicBool::new(false));
    let arrivals: Vec<f64> = std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != origin)
            .map(|(_, node)| {
                let done = done.clone();
                scope.spawn(move || {
                    let client = reqwest::blocking::Client::new();
                    let url = format!("{}/v1/capsules", node.api);
                    while Instant::now() < deadline && !done.load(Ordering::Relaxed) {
                        if let Ok(text) = client.get(&url).send().and_then(|r| r.text())
                            && text.contains(&format!("\"name\":\"{name}\""))
                        {
                            return Some(start.elapsed().as_secs_f64() * 1000.0);
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    None
                })
            })
            .collect();
        let results: Vec<Option<f64>> = handles.into_iter().map(|h| h.join().unwrap_or(None)).collect();
        done.store(true, Ordering::Relaxed);
        results.into_iter().flatten().collect()
    });
    anyhow::ensure!(arrivals.len() + 1 == nodes.len(), "{name} did not reach every node within 60 s");
    let first = arrivals.iter().copied().fold(f64::INFINITY, f64::min);
    let last = arrivals.iter().copied().fold(0.0, f64::max);
    Ok((first, last))
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmRSS")
}

fn memory(count: usize) -> anyhow::Result<Memory> {
    eprintln!("memory: idle node, then {count} adverts");
    let node = TestNode::start_with("", None)?;
    std::thread::sleep(Duration::from_secs(2));
    let pid = node.pid().context("pid")?;
    let idle = rss_kib(pid)?;

    let now = Millis(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64);
    let file = tempfile::NamedTempFile::new()?;
    for i in 0..count {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        let mut advert = Advert::new(now.0, now, 600_000);
        advert.addrs = vec![format!("/ip4/10.1.{}.{}/tcp/7421", i / 250, i % 250)];
        advert.capsules = (0..3)
            .map(|c| HostedCapsule { name: format!("cap-{i}-{c}"), digest: None, version: "1.0.0".into() })
            .collect();
        let envelope = Signed::sign(advert, &SecretKey::from_seed(seed))?.envelope().encode();
        writeln!(file.as_file(), "{}", hex::encode(envelope))?;
    }
    let mut peer = Command::new(bin("murmur-testpeer"))
        .args(["--dial", &node.dial_addrs()[0], "--publish", file.path().to_str().context("path")?])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let held = wait_for(Duration::from_secs(120), "1,000 adverts held", || {
        let nodes = node.metric("murmur_directory_nodes");
        (nodes as usize > count).then_some(nodes)
    });
    let _ = peer.kill();
    let _ = peer.wait();
    held?;
    let with = rss_kib(pid)?;
    Ok(Memory {
        idle_rss_kib: idle,
        adverts: count,
        with_adverts_rss_kib: with,
        per_advert_bytes: (with.saturating_sub(idle) * 1024) as f64 / count as f64,
    })
}

fn print_table(convergence: &[Convergence], memory: &Memory) {
    println!("advert convergence (a capsule added on one node until every node lists it)");
    println!(
        "{:>6} {:>5} {:>14} {:>14} {:>12} {:>12} {:>11} {:>10}",
        "nodes",
        "runs",
        "first p50 ms",
        "first p99 ms",
        "all p50 ms",
        "all p99 ms",
        "all max ms",
        "all/first"
    );
    for c in convergence {
        println!(
            "{:>6} {:>5} {:>14.1} {:>14.1} {:>12.1} {:>12.1} {:>11.1} {:>10.2}",
            c.nodes,
            c.runs,
            c.first_p50_ms,
            c.first_p99_ms,
            c.all_p50_ms,
            c.all_p99_ms,
            c.all_max_ms,
            c.all_p50_ms / c.first_p50_ms
        );
    }
    println!();
    println!("resident memory");
    println!("  idle node:                 {:>8} KiB", memory.idle_rss_kib);
    println!(
        "  node holding {} adverts: {:>8} KiB  ({:.0} bytes per advert)",
        memory.adverts, memory.with_adverts_rss_kib, memory.per_advert_bytes
    );
}
