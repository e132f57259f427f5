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
//! target/release/murmur-bench agent [--samples 300] [--out bench-agent.json]
//! ```
//!
//! `agent` measures the agent loop's host-side cost of one turn (driver instantiate and
//! call, token counting, trace records, hooks) with no hooks and with two sync hooks, and
//! tiktoken's counting rate.
//!
//! ```text
//! target/release/murmur-bench brains [--samples 20000] [--idle 1000] [--out bench-brains.json]
//! ```
//!
//! `brains` measures `send-agent` → `recv` round trips between two brains on one node
//! (beside a tokio channel ping-pong) and on two nodes (beside an A2A task owned by the
//! other node), and the resident memory and CPU of 1,000 idle brains per language.
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
//! ```text
//! target/release/murmur-bench soak [--seconds 600] [--rate 1000] [--restart-every 120] [--out bench-soak.json]
//! ```
//!
//! `soak` runs three nodes under steady mixed load with background pulls and a node
//! restarted every two minutes, and prints a row per minute (see `soak.rs`).
//!
//! `mesh` measures advert convergence: a capsule is added to one node (config + SIGHUP) and
//! we time until every node's API lists it, next to the time until the *first* other node
//! lists it (one gossip hop, the baseline). It also reads the resident memory of an idle
//! node and of a node holding 1,000 adverts (injected by `murmur-testpeer`).

mod agent;
mod brains;
mod bundle;
mod mesh;
mod models;
mod pipe;
mod pull;
mod runtime;
mod soak;
mod taskdb;
mod tasks;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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
    /// The agent loop's host-side cost per turn, without and with two sync hooks, and
    /// tokens counted per second. Needs the guests (`bash capsules/build.sh`).
    Agent {
        /// Measured tasks per figure.
        #[arg(long, default_value_t = 300)]
        samples: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-agent.json")]
        out: PathBuf,
    },
    /// Brains: send-agent → recv round trips on one node (beside a tokio channel) and
    /// across two nodes (beside an A2A task over /murmur/task/1), and the memory and CPU
    /// of idle brains of each language. Needs the guests and the release binaries.
    Brains {
        /// Round trips per figure.
        #[arg(long, default_value_t = 20_000)]
        samples: usize,
        /// Idle brains per language.
        #[arg(long, default_value_t = 1000)]
        idle: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-brains.json")]
        out: PathBuf,
    },
    /// One child of `brains`: idle brains of one language, their memory and CPU (JSON).
    #[command(hide = true)]
    BrainsIdle {
        #[arg(long)]
        language: String,
        #[arg(long)]
        count: usize,
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
        #[arg(long, value_enum, default_value_t = pull::Transport::Tcp)]
        transport: pull::Transport,
        /// Run each provider in a network namespace of its own whose link sends at most
        /// this many Mbit/s (`tc` token bucket; needs root): shows what a second provider
        /// adds when the providers' links, not this machine's cores, are the limit.
        #[arg(long, value_name = "MBIT", value_parser = clap::value_parser!(u32).range(1..=100_000))]
        provider_uplink_mbit: Option<u32>,
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
    /// Models: time to first chunk and chunks per second of a brain's completions in
    /// process, through its node's /v1, and through another node's /v1 (one mesh hop);
    /// then many concurrent streams on one node. Uses the binaries beside this one.
    Models {
        /// First-chunk samples per way.
        #[arg(long, default_value_t = 300)]
        samples: usize,
        /// Chunks of the long reply.
        #[arg(long, default_value_t = 100_000)]
        chunks: u64,
        /// Streams open at once.
        #[arg(long, default_value_t = 1000)]
        streams: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-models.json")]
        out: PathBuf,
    },
    /// Task database: start-up time with many finished tasks on disk (the read as it was
    /// beside `TaskManager::open` as it is), and one pruning pass.
    Taskdb {
        /// Finished tasks written first.
        #[arg(long, default_value_t = 1_000_000)]
        finished: usize,
        /// Tasks the pruning pass keeps.
        #[arg(long, default_value_t = 100_000)]
        keep: usize,
        /// Start-ups per figure (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-taskdb.json")]
        out: PathBuf,
    },
    /// The soak: three nodes under `--rate` tasks/s of mixed local and mesh tasks, pulls
    /// in the background and a node restarted every `--restart-every` s, for `--seconds`;
    /// a row per minute (accepted, completed, failed, refused, lost, latency, and each
    /// node's memory, descriptors and task database). Uses the release binaries.
    Soak {
        /// How long the load runs.
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// Tasks per second.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// Seconds between restarts (0: none).
        #[arg(long, default_value_t = 120)]
        restart_every: u64,
        /// Where to write the JSON results.
        #[arg(long, default_value = "bench-soak.json")]
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

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Bench::Runtime { iterations, out } => runtime::run(iterations, &out)?,
        Bench::Agent { samples, out } => agent::run(samples, &out)?,
        Bench::Brains { samples, idle, out } => brains::run(samples, idle, &out)?,
        Bench::BrainsIdle { language, count } => brains::idle_child(&language, count)?,
        Bench::Tasks { samples, seconds, out } => tasks::run(samples, seconds, &out)?,
        Bench::Bundle { sizes_mib, runs, out } => bundle::run(&sizes_mib, runs, &out)?,
        Bench::Pull { sizes_mib, runs, out, pin_cores, transport, provider_uplink_mbit } => {
            pull::run(&pull::Options { sizes_mib, runs, out, pin_cores, transport, provider_uplink_mbit })?;
        }
        Bench::Soak { seconds, rate, restart_every, out } => {
            soak::run(soak::Settings { seconds, rate, restart_every }, &out)?;
        }
        Bench::Mesh { sizes, runs, out } => mesh::run(&sizes, runs, &out)?,
        Bench::Taskdb { finished, keep, runs, out } => taskdb::run(finished, keep, runs, &out)?,
        Bench::Models { samples, chunks, streams, out } => models::run(samples, chunks, streams, &out)?,
    }
    Ok(())
}

/// A distribution of single-operation timings, in µs.
#[derive(Debug, serde::Serialize)]
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
        p50_us: percentile(&micros, 50.0),
        p99_us: percentile(&micros, 99.0),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
