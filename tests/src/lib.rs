//! Harness for end-to-end tests: real `murnode` processes on 127.0.0.1.
//!
//! Every node gets a temporary data dir, port 0 for everything, and is killed when its
//! [`TestNode`] drops. Waits are bounded and poll real state; nothing sleeps to
//! synchronize. The binaries are the ones cargo built for this workspace
//! (`target/<profile>/murnode` and `mur`), found next to the test executable.

pub mod crash;
pub mod hub;
pub mod netns;
pub mod peer;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// How long a node may take to print its ready line (debug builds on a loaded 2-core CI).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Path of a workspace binary (`murnode`, `mur`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Tests run from target/<profile>/deps/, binaries (the bench) from target/<profile>/.
    let here = exe.parent().expect("executable has a directory");
    let candidates = [here.join(name), here.parent().map(|p| p.join(name)).unwrap_or_default()];
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!(
            "{name} is not built next to {}; build the workspace first (`cargo build --workspace`, with --release for benchmarks)",
            exe.display()
        )
    })
}

/// Path of a guest component built by `capsules/build.sh`.
pub fn guest(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../capsules/target/wasm32-wasip2/release")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `bash capsules/build.sh` (tests/run.sh does)",
        path.display()
    );
    path
}

/// Runs `mur` with `args` and returns its output.
pub fn mur(args: &[&str]) -> Output {
    Command::new(bin("mur")).args(args).output().expect("mur runs")
}

/// Runs `mur`, requires exit 0, and parses its stdout as one JSON object.
pub fn mur_json(args: &[&str]) -> Value {
    let out = mur(args);
    assert!(out.status.success(), "mur {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("mur {args:?}: stdout is not JSON ({e})"))
}

/// Runs `murnode` with `args` to completion (for `init`, `--help`, failing `run`s).
pub fn murnode(args: &[&str]) -> Output {
    Command::new(bin("murnode")).args(args).env("MURNODE_LOG", "warn").output().expect("murnode runs")
}

/// Runs `murnode run` on `data_dir` (loopback only), expects it to refuse to start, and
/// returns what it said on stderr.
pub fn refused_run(data_dir: &Path) -> String {
    let mut args =
        vec!["run", "--data-dir", data_dir.to_str().expect("a UTF-8 path"), "--api", "127.0.0.1:0"];
    args.extend(LOOPBACK);
    let out = murnode(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the node must not start: {stderr}");
    stderr
}

/// A fresh data directory with a node key and the default config.
pub fn init_data_dir() -> tempfile::TempDir {
    let dir = init_data_dir_as_shipped();
    // A lab mesh: the clients of every test node reach every capsule.
    let path = dir.path().join("murnode.toml");
    let shipped = std::fs::read_to_string(&path).expect("read config");
    assert!(shipped.contains("\n[runtime]\n"), "the shipped config has a [runtime] table");
    let lab = shipped.replacen("\n[runtime]\n", &format!("\n[runtime]\n{LAB_AUDIENCE}"), 1);
    std::fs::write(&path, lab).expect("write config");
    dir
}

/// The audience test meshes give their capsules (`runtime.audience`): a lab mesh.
const LAB_AUDIENCE: &str = "audience = \"mesh\"\n";

/// A fresh data directory with the config exactly as `murnode init` writes it.
pub fn init_data_dir_as_shipped() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = murnode(&["init", "--data-dir", dir.path().to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "murnode init failed: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

/// A fresh data directory whose config is `toml` (instead of the commented defaults), in a
/// lab mesh (`runtime.audience = "mesh"`) unless `toml` has a `[runtime]` table.
pub fn init_data_dir_with(toml: &str) -> tempfile::TempDir {
    let dir = init_data_dir_as_shipped();
    let text = if toml.contains("[runtime]") {
        toml.to_owned()
    } else {
        format!("{toml}\n[runtime]\n{LAB_AUDIENCE}")
    };
    std::fs::write(dir.path().join("murnode.toml"), text).expect("write config");
    dir
}

/// Config text declaring `capsules` as hosted (name, version).
pub fn capsules_toml(capsules: &[(&str, &str)]) -> String {
    capsules
        .iter()
        .map(|(name, version)| format!("[[capsules]]\nname = \"{name}\"\nversion = \"{version}\"\n"))
        .collect()
}

/// Flags for a loopback-only node: TCP on 127.0.0.1, no mDNS.
pub const LOOPBACK: &[&str] = &["--listen", "/ip4/127.0.0.1/tcp/0", "--no-mdns"];

/// A running `murnode`, killed on drop.
#[derive(Debug)]
pub struct TestNode {
    child: Option<Child>,
    /// The data directory (owned here unless the caller passed its own).
    pub data_dir: PathBuf,
    _owned_dir: Option<tempfile::TempDir>,
    /// The ready line.
    pub ready: Value,
    /// `http://127.0.0.1:PORT` of the node's API.
    pub api: String,
    stderr_log: PathBuf,
    /// Bearer token sent with `get` / `get_text` (for a node reached from another host).
    pub token: Option<String>,
}

impl TestNode {
    /// Initializes a fresh data dir and starts a node with `extra` flags.
    pub fn start(extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_owned(init_data_dir(), extra)
    }

    /// Starts a node on loopback whose config is `toml`, optionally bootstrapping to `peer`.
    pub fn start_with(toml: &str, bootstrap: Option<&Self>) -> anyhow::Result<Self> {
        let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
        if let Some(peer) = bootstrap {
            args.push("--bootstrap".into());
            args.push(peer.dial_addrs().first().cloned().context("bootstrap peer has no address")?);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::start_owned(init_data_dir_with(toml), &args)
    }

    /// Starts a node in a data dir this node will own (and delete on drop).
    pub fn start_owned(dir: tempfile::TempDir, extra: &[&str]) -> anyhow::Result<Self> {
        let path = dir.path().to_path_buf();
        let mut node = Self::start_in(&path, extra)?;
        node._owned_dir = Some(dir);
        Ok(node)
    }

    /// Starts a node on an existing data dir (for restarts).
    pub fn start_in(data_dir: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        let mut args = vec!["--api", "127.0.0.1:0"];
        args.extend(extra);
        Self::launch(&[], data_dir, &args)
    }

    /// Starts a node on an existing data dir with extra environment variables.
    pub fn start_in_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut args = vec!["--api", "127.0.0.1:0"];
        args.extend(extra);
        Self::launch_env(&[], data_dir, &args, env)
    }

    /// Starts `murnode run` through `launcher` (e.g. `ip netns exec NS`), with `extra` flags.
    pub fn launch(launcher: &[String], data_dir: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        Self::launch_env(launcher, data_dir, extra, &[])
    }

    /// [`TestNode::launch`] with extra environment variables.
    pub fn launch_env(
        launcher: &[String],
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let stderr_log = data_dir.join(format!("stderr-{}.log", std::process::id()));
        let stderr = std::fs::File::create(&stderr_log)?;
        let mut args: Vec<&str> =
            vec!["run", "--json", "--data-dir", data_dir.to_str().context("utf-8 path")?];
        args.extend(extra);
        let murnode = bin("murnode");
        let mut command = match launcher.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(&murnode);
                c
            }
            None => Command::new(&murnode),
        };
        let mut child = command
            .args(&args)
            .env("MURNODE_LOG", std::env::var("MURNODE_LOG").unwrap_or_else(|_| "info".into()))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context("spawn murnode")?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Keep draining so the node never blocks on a full pipe.
            for _ in lines {}
        });
        let mut node = Self {
            child: Some(child),
            data_dir: data_dir.to_path_buf(),
            _owned_dir: None,
            ready: Value::Null,
            api: String::new(),
            stderr_log,
            token: None,
        };
        let line = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            other => bail!("murnode printed no ready line ({other:?}); stderr:\n{}", node.stderr()),
        };
        node.ready =
            serde_json::from_str(&line).with_context(|| format!("ready line is not JSON: {line}"))?;
        node.api = format!("http://{}", node.ready["api_addr"].as_str().context("api_addr")?);
        Ok(node)
    }

    /// The node's peer id.
    pub fn peer_id(&self) -> &str {
        self.ready["peer_id"].as_str().unwrap_or_default()
    }

    /// The node's resolved listen multiaddrs, each with `/p2p/<peer id>` appended.
    pub fn dial_addrs(&self) -> Vec<String> {
        self.ready["listen_addrs"]
            .as_array()
            .map(|addrs| {
                addrs
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|a| format!("{a}/p2p/{}", self.peer_id()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// GET a JSON document from the node's API.
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.get_request(path)?.json()?)
    }

    /// GET a text document (e.g. `/metrics`).
    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        Ok(self.get_request(path)?.text()?)
    }

    fn get_request(&self, path: &str) -> anyhow::Result<reqwest::blocking::Response> {
        let mut request = reqwest::blocking::Client::new().get(format!("{}{path}", self.api));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        Ok(request.send()?)
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child {
            let pid = i32::try_from(child.id()).expect("pid fits i32");
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        self.signal(Signal::SIGTERM);
        self.wait_exit(timeout)
    }

    /// Waits (bounded) for the process to exit by itself; SIGKILLs it past `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("murnode did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The capsule names the node's directory lists.
    pub fn capsule_names(&self) -> Vec<String> {
        self.get("/v1/capsules")
            .ok()
            .and_then(|v| v["capsules"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// Peer ids of peers with an open connection.
    pub fn connected_peers(&self) -> Vec<String> {
        self.get("/v1/peers")
            .ok()
            .and_then(|v| v["peers"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|p| p["connected"] == true)
            .filter_map(|p| p["peer_id"].as_str().map(str::to_owned))
            .collect()
    }

    /// One sample of a Prometheus metric (`name{labels}` exactly as exposed), or 0.
    pub fn metric(&self, series: &str) -> u64 {
        self.get_text("/metrics")
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Sends SIGHUP (config reload).
    pub fn reload(&self) {
        self.signal(Signal::SIGHUP);
    }

    /// The OS process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the node logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `check` every 50 ms until it returns `Some`, or fails after `timeout` with `what`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Calls JSON-RPC `method` at `url` (a node's A2A endpoint) with `headers`; returns the
/// whole answer (`result` or `error`).
pub fn rpc_at(url: &str, method: &str, params: Value, headers: &[(&str, &str)]) -> anyhow::Result<Value> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(90)).build()?;
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let mut request = client.post(url).json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Ok(request.send()?.json()?)
}

impl TestNode {
    /// Calls JSON-RPC `method` on the node's A2A endpoint (`POST /`).
    pub fn rpc(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        rpc_at(&format!("{}/", self.api), method, params, &[])
    }

    /// A2A 1.0 `SendMessage` of `text` to `target` (`mesh://NAME`), with `message_id`;
    /// blocking (waits for the result) unless `return_immediately`.
    pub fn send(
        &self,
        target: &str,
        text: &str,
        message_id: &str,
        return_immediately: bool,
    ) -> anyhow::Result<Value> {
        self.rpc(
            "SendMessage",
            serde_json::json!({
                "tenant": target,
                "message": { "messageId": message_id, "role": "ROLE_USER", "parts": [{ "text": text }] },
                "configuration": { "returnImmediately": return_immediately },
            }),
        )
    }

    /// A task as the node reports it (`GetTask`), or the JSON-RPC error.
    pub fn task(&self, id: &str) -> anyhow::Result<Value> {
        self.rpc("GetTask", serde_json::json!({ "id": id }))
    }

    /// The ids of the tasks this node owns or placed (`ListTasks`).
    pub fn task_ids(&self) -> Vec<String> {
        self.rpc("ListTasks", serde_json::json!({ "pageSize": 100 }))
            .ok()
            .and_then(|v| v["result"]["tasks"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|t| t["id"].as_str().map(str::to_owned))
            .collect()
    }
}

/// Generates a publisher key file `dir/publisher.key`; returns its path and public key.
pub fn publisher(dir: &Path) -> (String, String) {
    let path = dir.join("publisher.key");
    let out = mur(&["key", "gen", "--out", path.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = mur_json(&["key", "show", path.to_str().expect("utf-8 path"), "--json"]);
    (
        path.to_str().expect("utf-8 path").to_owned(),
        shown["public_key"].as_str().expect("public_key").to_owned(),
    )
}

/// A node config that trusts publisher key `public` (and nothing else).
#[must_use]
pub fn trusting(public: &str) -> String {
    format!("[trust]\npublishers = [\"{public}\"]\n")
}

/// `mur artifact add FILE` into the store of `data_dir` as `name@version` of `kind`, with
/// `extra` flags (`--sign-key KEY`): the added artifact as `--json` prints it.
pub fn add_artifact(
    data_dir: &Path,
    file: &Path,
    (name, version): (&str, &str),
    kind: &str,
    extra: &[&str],
) -> Value {
    let mut args = vec![
        "artifact",
        "add",
        file.to_str().expect("utf-8 path"),
        "--name",
        name,
        "--version",
        version,
        "--kind",
        kind,
        "--data-dir",
        data_dir.to_str().expect("utf-8 path"),
        "--json",
    ];
    args.extend(extra);
    mur_json(&args)
}

/// Writes a capsule manifest `NAME.toml` into `data_dir/capsules` for the guest component
/// `component`, with `extra` TOML lines appended.
pub fn install_manifest(data_dir: &Path, name: &str, component: &str, extra: &str) {
    let capsules = data_dir.join("capsules");
    std::fs::create_dir_all(&capsules).expect("capsules dir");
    let text = format!(
        "name = \"{name}\"\nversion = \"0.1.0\"\nkind = \"tool\"\nartifact = \"{}\"\n{extra}\n",
        guest(component).display()
    );
    std::fs::write(capsules.join(format!("{name}.toml")), text).expect("write manifest");
}

/// POSTs a JSON-RPC streaming call and reads its server-sent events as `(id, data JSON)`
/// until `stop` says so (then the connection is dropped) or the stream ends.
pub fn sse(
    url: &str,
    body: Value,
    headers: &[(&str, &str)],
    mut stop: impl FnMut(u64, &Value) -> bool,
) -> anyhow::Result<Vec<(u64, Value)>> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let mut request = client.post(url).header("Accept", "text/event-stream").json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send()?;
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if !content_type.starts_with("text/event-stream") {
        bail!("not a stream ({content_type}): {}", response.text().unwrap_or_default());
    }
    let mut events = Vec::new();
    let (mut id, mut data) = (0u64, String::new());
    for line in BufReader::new(response).lines() {
        let line = line?;
        if let Some(value) = line.strip_prefix("id:") {
            id = value.trim().parse().unwrap_or(0);
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.trim_start());
        } else if line.is_empty() && !data.is_empty() {
            let event: Value =
                serde_json::from_str(&data).with_context(|| format!("event data is not JSON: {data}"))?;
            data.clear();
            let done = stop(id, &event);
            events.push((id, event));
            if done {
                break;
            }
        }
    }
    Ok(events)
}

/// A minimal OTLP/HTTP collector on 127.0.0.1 that keeps every JSON export it receives
/// (nodes export with `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`).
#[derive(Debug)]
pub struct OtlpCollector {
    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    exports: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl OtlpCollector {
    /// Listens on a free port; serves until the process ends.
    pub fn start() -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let exports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = exports.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let sink = sink.clone();
                std::thread::spawn(move || serve_otlp(stream, &sink));
            }
        });
        Ok(Self { endpoint, exports })
    }

    /// Every span received so far, as (service.name, span name, trace id hex).
    pub fn spans(&self) -> Vec<(String, String, String)> {
        let exports = self.exports.lock().expect("collector lock");
        let mut spans = Vec::new();
        for export in exports.iter() {
            for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                let service = resource["resource"]["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["key"] == "service.name")
                    .and_then(|a| a["value"]["stringValue"].as_str())
                    .unwrap_or("?")
                    .to_owned();
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    for span in scope["spans"].as_array().into_iter().flatten() {
                        spans.push((
                            service.clone(),
                            span["name"].as_str().unwrap_or("?").to_owned(),
                            span["traceId"].as_str().unwrap_or("?").to_lowercase(),
                        ));
                    }
                }
            }
        }
        spans
    }
}

fn serve_otlp(stream: std::net::TcpStream, sink: &std::sync::Mutex<Vec<Value>>) {
    use std::io::{Read, Write};
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut writer = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length.min(64 << 20)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if let Ok(value) = serde_json::from_slice::<Value>(&body) {
            sink.lock().expect("collector lock").push(value);
        }
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}
