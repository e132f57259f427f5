//! `murmur-sim`: run and sweep simulation scenarios.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::{Args, Parser, Subcommand};
use murmur_sim::report::exit;
use murmur_sim::world::Plant;
use murmur_sim::{Options, Outcome, Scenario, Sim, Verdict};

/// Deterministic simulation of the Murmur mesh: the real protocol code, thousands of
/// nodes, a modelled network with faults, reproducible from one seed.
///
/// Examples:
///   murmur-sim run partition --seed 42
///   murmur-sim sweep churn --seeds 1..50
///   murmur-sim run steady --nodes 2000 --duration 120 --json
///   murmur-sim sweep task-storm --seeds 1..5
///   murmur-sim run task-storm --plant retry-lost     # must fail (exit 4)
///   murmur-sim sweep artifact-storm --seeds 1..5
///   murmur-sim run byzantine-provider --plant write-unverified   # must fail (exit 4)
///   murmur-sim run byzantine-provider --plant trust-any-offer    # must fail (exit 4)
///   murmur-sim sweep revocation --seeds 1..5
///   murmur-sim run revocation --plant ignore-revocations        # must fail (exit 4)
///   murmur-sim sweep models --seeds 1..5
///   murmur-sim run models --plant route-ignores-directory       # must fail (exit 4)
///   murmur-sim run steady-10k                 # 10,000 nodes, 120 s, churn
///   murmur-sim scale                          # that at growing sizes, with the baseline
///
/// SCENARIO is a TOML file, or the name of one in sim/scenarios/.
/// Exit codes: 0 pass, 2 usage, 3 crash, 4 safety violation, 5 liveness failure,
/// 6 a configured fault never acted.
#[derive(Debug, Parser)]
#[command(name = "murmur-sim", version, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one seed of a scenario.
    Run {
        #[command(flatten)]
        common: Common,
        /// The seed: every random draw of the run follows from it.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Run a range of seeds in parallel and summarize.
    Sweep {
        #[command(flatten)]
        common: Common,
        /// Seeds as A..B (B excluded) or A..=B.
        #[arg(long, default_value = "1..9")]
        seeds: String,
        /// Parallel runs (default: the number of cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// A cold start of hash placement (the directory that keeps each name's adverts at
    /// its k closest nodes, not at every node) over the scenario's nodes, regions, latency,
    /// join spread, loss (as TCP retransmissions), duplication and crashes; prints how long
    /// placement and resolves took (JSON with --json). Partitions, churn and the other
    /// faults are refused: this world does not model them yet.
    ///
    ///   murmur-sim placement formation-10k              # 10,000 nodes
    ///   murmur-sim placement formation-10k --nodes 2000
    #[command(verbatim_doc_comment)]
    Placement {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The scale benchmark: `steady-10k` (a steady mesh with churn, departures by notice,
    /// rare refresh) at growing sizes, one run at a time, and side by side at the smaller
    /// sizes the baseline protocol, liveness by refresh (30 s refresh, 90 s TTL, no
    /// departure notices), whose traffic grows with the square of the size. Prints a table
    /// (and JSON with --json); wall time includes setting the run up.
    Scale {
        /// Node counts for the scenario as shipped.
        #[arg(long, value_delimiter = ',', default_value = "1000,2000,5000,10000")]
        sizes: Vec<usize>,
        /// Node counts for the baseline (each takes minutes above a few thousand).
        #[arg(long, value_delimiter = ',', default_value = "500,1000")]
        baseline_sizes: Vec<usize>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct Common {
    /// Scenario file or name.
    scenario: String,
    /// Override the scenario's node count.
    #[arg(long)]
    nodes: Option<usize>,
    /// Override the scenario's simulated duration in seconds.
    #[arg(long)]
    duration: Option<u64>,
    /// Plant a known protocol bug (signature checks skipped) that the checkers must catch.
    #[arg(long)]
    canary: bool,
    /// Plant a known bug that its checker must catch: the task bugs skip-incoming-check (grant
    /// checker), retry-lost (executed-twice checker), volatile-accept (lost-task checker),
    /// the artifact bugs write-unverified (corrupted-write checker) and trust-any-offer
    /// (forged-manifest checker), the mesh bugs open-admission (admission checker) and
    /// refuse-when-full (liveness), ignore-revocations (revocation checker), or the model
    /// routing bugs (they need a [models] section) route-ignores-directory (routed
    /// checker), no-failover (served checker), no-spread (spread checker) and
    /// retry-after-accept (attempts checker); or panic, a mesh machine that panics (the
    /// crash verdict, exit 3).
    #[arg(long, value_parser = parse_plant)]
    plant: Option<Plant>,
    /// Print JSON lines instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_plant(text: &str) -> Result<Plant, String> {
    text.parse()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run { common, seed } => run(&common, seed),
        Command::Sweep { common, seeds, jobs } => sweep(&common, &seeds, jobs),
        Command::Placement { common, seed } => placement(&common, seed),
        Command::Scale { sizes, baseline_sizes, seed, json } => scale(&sizes, &baseline_sizes, seed, json),
    };
    ExitCode::from(code)
}

fn locate(name: &str) -> Option<PathBuf> {
    let direct = PathBuf::from(name);
    if direct.is_file() {
        return Some(direct);
    }
    let file = if name.ends_with(".toml") { name.to_owned() } else { format!("{name}.toml") };
    [
        PathBuf::from("sim/scenarios").join(&file),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(&file),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn load(common: &Common) -> Result<(Scenario, PathBuf), String> {
    let path =
        locate(&common.scenario).ok_or_else(|| format!("no scenario file or name `{}`", common.scenario))?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut scenario = Scenario::parse(&text).map_err(|e| format!("{}: {e:#}", path.display()))?;
    if let Some(nodes) = common.nodes {
        scenario.nodes = nodes;
    }
    if let Some(duration) = common.duration {
        scenario.duration_s = duration;
    }
    scenario.validate().map_err(|e| format!("{} with overrides: {e:#}", path.display()))?;
    if let Some(plant) = common.plant.filter(|p| p.is_model() && scenario.models.is_none()) {
        return Err(format!(
            "--plant {} is a model routing bug: it needs a scenario with a [models] section (e.g. models), and {} has none",
            plant.name(),
            path.display()
        ));
    }
    Ok((scenario, path))
}

fn repro(common: &Common, path: &Path, seed: u64) -> String {
    let mut line = format!("cargo run --release -p murmur-sim -- run {} --seed {seed}", path.display());
    if let Some(nodes) = common.nodes {
        line.push_str(&format!(" --nodes {nodes}"));
    }
    if let Some(duration) = common.duration {
        line.push_str(&format!(" --duration {duration}"));
    }
    if common.canary {
        line.push_str(" --canary");
    }
    if let Some(plant) = common.plant {
        line.push_str(&format!(" --plant {}", plant.name()));
    }
    line
}

/// Runs one seed, turning a panic in the protocol code into a `Crash` verdict.
fn run_one(scenario: &Scenario, seed: u64, canary: bool, plant: Option<Plant>) -> Outcome {
    let options = Options { seed, canary, uncached: false, plant };
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Sim::new(scenario.clone(), options).run()));
    result.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".into());
        Outcome {
            scenario: scenario.name.clone(),
            seed,
            canary,
            nodes: scenario.nodes,
            duration_s: scenario.duration_s,
            verdict: Verdict::Crash,
            exit_code: exit::CRASH,
            trace_hash: "-".repeat(64),
            findings: vec![format!("panic: {message}")],
            faults: Vec::new(),
            metrics: murmur_sim::report::Metrics::default(),
        }
    })
}

fn run(common: &Common, seed: u64) -> u8 {
    let (scenario, path) = match load(common) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("error: {err}");
            return exit::USAGE;
        }
    };
    let outcome = run_one(&scenario, seed, common.canary, common.plant);
    if common.json {
        println!("{}", serde_json::to_string(&outcome).unwrap_or_default());
        if outcome.verdict != Verdict::Pass {
            eprint!("{}", outcome.describe(&scenario, &repro(common, &path, seed)));
        }
    } else {
        print!("{}", outcome.describe(&scenario, &repro(common, &path, seed)));
    }
    outcome.exit_code
}

fn placement(common: &Common, seed: u64) -> u8 {
    let (scenario, _) = match load(common) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("error: {err}");
            return exit::USAGE;
        }
    };
    if common.canary || common.plant.is_some() {
        eprintln!("error: placement runs take no --canary or --plant yet");
        return exit::USAGE;
    }
    let sim = match murmur_sim::placement::PlacementSim::new(scenario, seed) {
        Ok(sim) => sim,
        Err(err) => {
            eprintln!("error: {err}");
            return exit::USAGE;
        }
    };
    let outcome = sim.run();
    if common.json {
        println!("{}", serde_json::to_string(&outcome).unwrap_or_default());
    } else {
        print!("{}", outcome.describe());
    }
    outcome.exit_code
}

fn parse_seeds(text: &str) -> Option<Vec<u64>> {
    if let Some((a, b)) = text.split_once("..=") {
        return Some((a.parse().ok()?..=b.parse().ok()?).collect());
    }
    let (a, b) = text.split_once("..")?;
    Some((a.parse().ok()?..b.parse().ok()?).collect())
}

fn sweep(common: &Common, seeds: &str, jobs: Option<usize>) -> u8 {
    let (scenario, path) = match load(common) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("error: {err}");
            return exit::USAGE;
        }
    };
    let Some(seeds) = parse_seeds(seeds).filter(|s| !s.is_empty()) else {
        eprintln!("error: --seeds must be A..B or A..=B with A < B");
        return exit::USAGE;
    };
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)).max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; seeds.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(seeds.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(i) else { break };
                    let outcome = run_one(&scenario, seed, common.canary, common.plant);
                    results.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(outcome);
                }
            });
        }
    });
    let outcomes: Vec<Outcome> = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .flatten()
        .collect();
    if common.json {
        for outcome in &outcomes {
            println!("{}", serde_json::to_string(outcome).unwrap_or_default());
        }
    } else {
        println!(
            "{:>6}  {:<9} {:>10} {:>12} {:>9} {:>9}  trace",
            "seed", "verdict", "events", "events/s", "conv p50", "conv p99"
        );
        for o in &outcomes {
            let m = &o.metrics;
            println!(
                "{:>6}  {:<9} {:>10} {:>12.0} {:>7}ms {:>7}ms  {}",
                o.seed,
                format!("{:?}", o.verdict).to_lowercase(),
                m.events,
                m.events_per_sec,
                m.convergence.p50_ms,
                m.convergence.p99_ms,
                &o.trace_hash[..16]
            );
        }
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.verdict != Verdict::Pass).collect();
    for o in &failed {
        eprint!("{}", o.describe(&scenario, &repro(common, &path, o.seed)));
    }
    eprintln!("{}: {} of {} seeds passed", scenario.name, outcomes.len() - failed.len(), outcomes.len());
    // The most serious failure decides the exit code.
    [Verdict::Crash, Verdict::Safety, Verdict::Liveness, Verdict::Vacuous]
        .iter()
        .find(|v| failed.iter().any(|o| o.verdict == **v))
        .map_or(exit::PASS, |v| v.exit_code())
}

/// `murmur-sim scale`: see [`Command::Scale`].
fn scale(sizes: &[usize], baseline_sizes: &[usize], seed: u64, json: bool) -> u8 {
    let common = Common {
        scenario: "steady-10k".into(),
        nodes: None,
        duration: None,
        canary: false,
        plant: None,
        json,
    };
    let shipped = match load(&common) {
        Ok((scenario, _)) => scenario,
        Err(err) => {
            eprintln!("murmur-sim: {err}");
            return exit::USAGE;
        }
    };
    let mut baseline = shipped.clone();
    baseline.protocol.refresh_s = 30;
    baseline.protocol.ttl_s = 90;
    baseline.protocol.suspect_s = 0;
    baseline.check.departed_bound_s = None;
    let runs = baseline_sizes
        .iter()
        .map(|n| ("refresh (baseline)", &baseline, *n))
        .chain(sizes.iter().map(|n| ("departure notices", &shipped, *n)));
    let mut rows = Vec::new();
    if !json {
        println!(
            "{:<20} {:>6}  {:<9} {:>8} {:>11} {:>10} {:>12} {:>13}",
            "protocol", "nodes", "verdict", "wall s", "events", "events/s", "msgs/node/s", "bytes/node/s"
        );
    }
    let mut code = exit::PASS;
    for (protocol, scenario, nodes) in runs {
        let mut scenario = scenario.clone();
        scenario.nodes = nodes;
        let outcome = run_one(&scenario, seed, false, None);
        let m = &outcome.metrics;
        if outcome.verdict != Verdict::Pass {
            code = outcome.exit_code;
        }
        let row = serde_json::json!({
            "protocol": protocol,
            "nodes": nodes,
            "verdict": format!("{:?}", outcome.verdict).to_lowercase(),
            "wall_s": m.wall_ms / 1000.0,
            "events": m.events,
            "events_per_sec": m.events_per_sec,
            "messages_per_node_per_sec": m.messages_per_node_per_sec,
            "bytes_per_node_per_sec": m.bytes_per_node_per_sec,
            "trace_hash": outcome.trace_hash,
        });
        if !json {
            println!(
                "{:<20} {:>6}  {:<9} {:>8.1} {:>11} {:>10.0} {:>12.1} {:>13.0}",
                protocol,
                nodes,
                row["verdict"].as_str().unwrap_or("?"),
                m.wall_ms / 1000.0,
                m.events,
                m.events_per_sec,
                m.messages_per_node_per_sec,
                m.bytes_per_node_per_sec
            );
        }
        rows.push(row);
    }
    if json {
        println!("{}", serde_json::json!({ "scenario": "steady-10k", "seed": seed, "runs": rows }));
    }
    code
}
