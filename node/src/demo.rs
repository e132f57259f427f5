//! `murnode demo`: a local mesh on 127.0.0.1, started and exercised step by step.
//!
//! It starts three `murnode` processes (this same binary) in a temporary directory, each
//! declaring example capsules, bootstrapped in a chain, and then shows what the mesh does:
//! nodes find each other and every node learns every capsule; a capsule added on one node
//! (config + SIGHUP) reaches the others; a killed node leaves every directory after its
//! advert's TTL. Each step prints what happened and how long it took. Without `--once` the
//! nodes keep running for `mur` to explore until Ctrl-C.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::exit::{CliError, CliResult};

/// Capsules each demo node declares.
const CAPSULES: [&[&str]; 3] = [&["echo"], &["wordcount", "summarize"], &["pipeline"]];

/// How long any demo step may take before it counts as failed.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Options of `murnode demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Exit after the walkthrough (status 0 only if every step behaved as expected).
    pub once: bool,
    /// Where to put the nodes' data directories (default: a new temporary directory).
    pub dir: Option<PathBuf>,
}

struct DemoNode {
    child: Child,
    name: String,
    peer_id: String,
    api: String,
    dial: String,
    data_dir: PathBuf,
}

impl Drop for DemoNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DemoNode {
    fn capsules(&self) -> Vec<String> {
        get(&format!("{}/v1/capsules", self.api))
            .ok()
            .and_then(|v| v["capsules"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    }
}

fn get(url: &str) -> anyhow::Result<Value> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(5)).build()?;
    Ok(client.get(url).send()?.json()?)
}

fn config(capsules: &[&str]) -> String {
    let mut text = String::from(
        "# murnode demo node: fast refresh so failures show within seconds.\n[adverts]\nrefresh_secs = 1\nttl_secs = 3\n",
    );
    for name in capsules {
        text.push_str(&format!("\n[[capsules]]\nname = \"{name}\"\nversion = \"0.1.0\"\n"));
    }
    text
}

fn start(
    exe: &Path,
    dir: &Path,
    name: &str,
    capsules: &[&str],
    bootstrap: Option<&str>,
) -> anyhow::Result<DemoNode> {
    let data_dir = dir.join(name);
    crate::data_dir::init(&data_dir)?;
    std::fs::write(data_dir.join(crate::config::CONFIG_FILE), config(capsules))?;
    let mut command = Command::new(exe);
    command
        .args([
            "run",
            "--json",
            "--api",
            "127.0.0.1:0",
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--no-mdns",
            "--data-dir",
        ])
        .arg(&data_dir)
        .env("MURNODE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(data_dir.join("murnode.log"))?);
    if let Some(peer) = bootstrap {
        command.args(["--bootstrap", peer]);
    }
    let mut child = command.spawn().context("starting murnode")?;
    let stdout = child.stdout.take().context("murnode stdout")?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next());
        for _ in lines {}
    });
    let line = match rx.recv_timeout(STEP_TIMEOUT) {
        Ok(Some(Ok(line))) => line,
        _ => {
            let _ = child.kill();
            bail!("{name} did not start; see {}", data_dir.join("murnode.log").display());
        }
    };
    let ready: Value = serde_json::from_str(&line)?;
    let peer_id = ready["peer_id"].as_str().context("peer_id")?.to_owned();
    let addr = ready["listen_addrs"][0].as_str().context("listen address")?;
    Ok(DemoNode {
        child,
        name: name.to_owned(),
        dial: format!("{addr}/p2p/{peer_id}"),
        api: format!("http://{}", ready["api_addr"].as_str().context("api_addr")?),
        peer_id,
        data_dir,
    })
}

/// Polls until `check` holds; returns how long it took.
fn until(what: &str, mut check: impl FnMut() -> bool) -> anyhow::Result<Duration> {
    let started = Instant::now();
    while !check() {
        if started.elapsed() > STEP_TIMEOUT {
            bail!("timed out after {STEP_TIMEOUT:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(started.elapsed())
}

fn step(n: usize, text: &str) {
    println!("\n{n}. {text}");
}

/// Runs the walkthrough.
pub fn run(options: &DemoOptions) -> CliResult {
    let exe = std::env::current_exe().map_err(CliError::failed)?;
    let temp;
    let dir = match &options.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new().prefix("murmur-demo-").tempdir().map_err(CliError::failed)?;
            temp.path().to_path_buf()
        }
    };
    walkthrough(&exe, &dir, options.once).map_err(CliError::failed)
}

fn walkthrough(exe: &Path, dir: &Path, once: bool) -> anyhow::Result<()> {
    println!("Murmur demo: a local mesh of three nodes on 127.0.0.1 (data in {})", dir.display());

    step(1, "Start three nodes, each bootstrapped only to the previous one.");
    let mut nodes: Vec<DemoNode> = Vec::new();
    for (i, capsules) in CAPSULES.iter().enumerate() {
        let bootstrap = nodes.last().map(|n| n.dial.clone());
        let node = start(exe, dir, &format!("node{}", i + 1), capsules, bootstrap.as_deref())?;
        println!("   {}  {}  api {}  hosts {}", node.name, node.peer_id, node.api, capsules.join(", "));
        nodes.push(node);
    }

    step(2, "Every node discovers the others and learns every capsule (gossip + anti-entropy).");
    let all: Vec<&str> = CAPSULES.iter().flat_map(|c| c.iter().copied()).collect();
    for node in &nodes {
        let took = until("every capsule", || {
            let listed = node.capsules();
            all.iter().all(|c| listed.iter().any(|l| l == c))
        })?;
        println!("   {} lists all {} capsules after {} ms", node.name, all.len(), took.as_millis());
    }

    step(3, "Add a capsule on node1 (config + SIGHUP); gossip carries it to every node.");
    std::fs::write(nodes[0].data_dir.join(crate::config::CONFIG_FILE), config(&["echo", "translate"]))?;
    let sent = Instant::now();
    signal(&nodes[0], "-HUP")?;
    until("translate at node3", || nodes[2].capsules().iter().any(|c| c == "translate"))?;
    println!("   node3 lists `translate` {} ms after the reload", sent.elapsed().as_millis());

    step(4, "Kill node2 (SIGKILL): its capsules leave every directory once its advert's TTL (3 s) passes.");
    let killed = Instant::now();
    let mut node2 = nodes.remove(1);
    node2.child.kill()?;
    let _ = node2.child.wait();
    for node in &nodes {
        until("node2's capsules to expire", || !node.capsules().iter().any(|c| c == "wordcount"))?;
    }
    println!("   gone from node1 and node3 after {} ms", killed.elapsed().as_millis());
    drop(node2);

    println!("\nEvery step behaved as expected.");
    if once {
        return Ok(());
    }
    println!("\nThe remaining nodes keep running. Try:");
    for node in &nodes {
        println!("   mur --node {} peers      mur --node {} capsules", node.api, node.api);
    }
    println!("Press Ctrl-C to stop them.");
    wait_for_interrupt();
    Ok(())
}

fn signal(node: &DemoNode, which: &str) -> anyhow::Result<()> {
    let status = Command::new("kill").arg(which).arg(node.child.id().to_string()).status()?;
    anyhow::ensure!(status.success(), "kill {which} failed");
    Ok(())
}

fn wait_for_interrupt() {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    runtime.block_on(crate::daemon::shutdown_signal());
}
