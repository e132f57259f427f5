//! The dashboard (`/ui`) and the API it reads: `GET /v1/tasks/events` reports every state
//! change of a task in order, `GET /v1/artifacts` lists the store, and the page itself,
//! loaded in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven
//! through WebDriver), shows a three-node mesh, a task sent through `mur` appearing and
//! completing, a killed peer leaving, and asks for a token where loopback is not trusted.
//!
//! Without `chromedriver` the browser test says so and passes, unless
//! `MURMUR_REQUIRE_BROWSER=1` (`.ci/run` installs the browser and sets it): then it fails.
//! `MURMUR_SCREENSHOT=FILE` saves the page as a PNG once the task completed (how the
//! screenshot in docs/src/dashboard.md was made).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use murmur_tests::{LOOPBACK, TestNode, install_manifest, mur_json, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(30);
const CONFIG: &str = "[adverts]\nrefresh_secs = 1\nttl_secs = 4\n";

fn node(toml: &str, bootstrap: Option<&TestNode>) -> TestNode {
    let dir = murmur_tests::init_data_dir_with(toml);
    install_manifest(dir.path(), "echo", "echo", "");
    let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = bootstrap {
        args.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestNode::start_owned(dir, &args).expect("node starts")
}

/// The `task` events of `/v1/tasks/events` as (state, seq), read until `done` says so.
fn task_events(api: &str, opened: std::sync::mpsc::Sender<()>, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let response = client.get(format!("{api}/v1/tasks/events")).send().unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    opened.send(()).unwrap();
    let mut events = Vec::new();
    let mut kind = String::new();
    for line in BufReader::new(response).lines() {
        let Ok(line) = line else { break }; // the node went away
        if let Some(name) = line.strip_prefix("event: ") {
            kind = name.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ") {
            assert_eq!(kind, "task", "{line}");
            let event: Value = serde_json::from_str(data).unwrap();
            let stop = done(&event);
            events.push(event);
            if stop {
                break;
            }
        }
    }
    events
}

#[test]
fn the_task_events_stream_reports_every_change_in_order_and_artifacts_list_the_store() {
    let a = node(CONFIG, None);
    let (opened, is_open) = std::sync::mpsc::channel();
    let watcher = {
        let api = a.api.clone();
        std::thread::spawn(move || task_events(&api, opened, |e| e["state"] == "completed"))
    };
    is_open.recv_timeout(Duration::from_secs(10)).expect("the stream opened");
    let answer = a.send("mesh://echo", "watched", "d-1", false).unwrap();
    let id = answer["result"]["task"]["id"].as_str().expect("a task").to_owned();
    let events = watcher.join().unwrap();
    assert!(events.iter().all(|e| e["task_id"] == id.as_str() && e["capsule"] == "echo"), "{events:?}");
    let states: Vec<&str> = events.iter().map(|e| e["state"].as_str().unwrap()).collect();
    assert_eq!(states.last(), Some(&"completed"), "{states:?}");
    assert!(states.contains(&"working"), "{states:?}");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order, each once: {seqs:?}");

    let artifact = murmur_tests::guest("wordcount");
    murmur_tests::add_artifact(&a.data_dir, &artifact, ("wordcount", "1.2.0"), "tool", &[]);
    let listed = a.get("/v1/artifacts").unwrap();
    let first = &listed["artifacts"][0];
    assert_eq!(first["name"], "wordcount", "{listed}");
    assert_eq!(first["version"], "1.2.0");
    assert_eq!(first["kind"], "tool");
    assert_eq!(first["size"], std::fs::metadata(&artifact).unwrap().len());
    assert!(first["content"].as_str().unwrap().starts_with("sha256:"), "{listed}");
    assert_eq!(listed["pulls"], json!([]));

    // The page and its assets: open (like /healthz), scripts from this node only.
    let page = reqwest::blocking::get(format!("{}/ui", a.api)).unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(page.text().unwrap().contains("/ui/app.js"));
    let script = reqwest::blocking::get(format!("{}/ui/app.js", a.api)).unwrap();
    assert!(script.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
}

#[test]
fn a_node_with_a_task_feed_open_still_stops_promptly() {
    let mut a = node(CONFIG, None);
    let (opened, is_open) = std::sync::mpsc::channel();
    let api = a.api.clone();
    // A client that never closes the feed (a dashboard left open).
    let _watcher = std::thread::spawn(move || task_events(&api, opened, |_| false));
    is_open.recv_timeout(Duration::from_secs(10)).expect("the stream opened");
    let stopping = Instant::now();
    let status = a.terminate(Duration::from_secs(20)).expect("the node stops with the feed open");
    assert!(status.success(), "{status}\n{}", a.stderr());
    assert!(stopping.elapsed() < Duration::from_secs(10), "stopped after {:?}", stopping.elapsed());
    assert!(a.stderr().contains("closed the API's streams still open"), "{}", a.stderr());
}

/// A headless Chromium under `chromedriver`, driven through WebDriver (fantoccini).
struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<fantoccini::Client>,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// None when this machine has no chromedriver (and the run does not require one).
    fn start() -> Option<Self> {
        let driver_path = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let Some(driver_path) = driver_path else {
            let required = std::env::var("MURMUR_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "MURMUR_REQUIRE_BROWSER=1 but no chromedriver: apt-get install chromium chromium-driver"
            );
            eprintln!(
                "SKIPPED: no chromedriver here (apt-get install chromium chromium-driver); the dashboard was not loaded in a browser"
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let url = format!("http://127.0.0.1:{port}");
        wait_for(CONVERGE, "chromedriver to answer", || {
            reqwest::blocking::get(format!("{url}/status")).ok().filter(|r| r.status().is_success())
        })
        .unwrap();
        // The flags this machine's closed network needs (no background connections).
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1440,1100",
        ];
        let mut args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let mut capabilities = serde_json::Map::new();
        capabilities
            .insert("goog:chromeOptions".into(), json!({ "binary": "/usr/bin/chromium", "args": args }));
        let client = runtime
            .block_on(
                fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(capabilities)
                    .connect(&url),
            )
            .expect("a Chromium session");
        Some(Self { runtime, client: Some(client), driver, _profile: profile })
    }

    fn client(&self) -> &fantoccini::Client {
        self.client.as_ref().expect("open")
    }

    fn goto(&self, url: &str) {
        self.runtime.block_on(self.client().goto(url)).expect("page loads");
    }

    /// Runs `script` (a function body with `arguments`) in the page.
    fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.runtime.block_on(self.client().execute(script, args)).expect("script runs")
    }

    /// Waits until `condition` (an expression over `arguments`) holds in the page.
    fn until(&self, what: &str, condition: &str, args: &[Value]) {
        let script = format!("return Boolean({condition});");
        let deadline = Instant::now() + CONVERGE;
        while Instant::now() < deadline {
            if self.eval(&script, args.to_vec()) == Value::Bool(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let page = self.eval("return document.body.innerText;", vec![]);
        panic!("timed out waiting for {what}; the page shows:\n{}", page.as_str().unwrap_or_default());
    }

    fn screenshot(&self) -> Vec<u8> {
        self.runtime.block_on(self.client().screenshot()).expect("a screenshot")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

const ROW: &str = "document.querySelector(`${arguments[0]} tr[data-${arguments[1]}=\"${arguments[2]}\"]`)";

#[test]
fn the_dashboard_shows_the_mesh_a_task_completing_and_a_peer_leaving_in_headless_chromium() {
    let Some(browser) = Browser::start() else { return };
    let a = node(CONFIG, None);
    let b = node(CONFIG, Some(&a));
    let mut c = node(CONFIG, Some(&a));
    browser.goto(&format!("{}/ui", a.api));
    let peer = |id: &str| vec![json!("#peers"), json!("peer"), json!(id)];
    for other in [&b, &c] {
        browser.until(
            "a connected peer row",
            &format!("{ROW}?.dataset.state === 'connected'"),
            &peer(other.peer_id()),
        );
    }
    browser.until(
        "the echo capsule hosted by three nodes",
        "document.querySelectorAll('#capsules tr[data-capsule=\"echo\"]').length === 3",
        &[],
    );
    browser.until("task changes followed live", "document.querySelector('#live').dataset.live === 'on'", &[]);
    browser.until("the node healthy", "document.querySelector('#health').dataset.health === 'ok'", &[]);

    // A task sent through `mur` appears and completes, without reloading the page.
    let sent =
        mur_json(&["send", "mesh://echo", "hello from the dashboard test", "--node", &a.api, "--json"]);
    let id = sent["id"]
        .as_str()
        .or_else(|| sent["task"]["id"].as_str())
        .unwrap_or_else(|| panic!("{sent}"))
        .to_owned();
    let task = vec![json!("#tasks"), json!("task"), json!(id)];
    browser.until("the task's row", ROW, &task);
    browser.until("the task completed", &format!("{ROW}?.dataset.state === 'completed'"), &task);
    browser.until(
        "its result",
        &format!("{ROW}?.innerText.includes('hello from the dashboard test')"),
        &task,
    );
    if let Ok(path) = std::env::var("MURMUR_SCREENSHOT") {
        std::fs::write(&path, browser.screenshot()).unwrap();
        eprintln!("screenshot written to {path}");
    }

    // C is killed: it leaves the peers table once its advert expires (4 s here).
    let gone = c.peer_id().to_owned();
    c.kill();
    browser.until("the killed peer gone", &format!("!{ROW}"), &peer(&gone));
    browser.until("B still there", &format!("{ROW}?.dataset.state === 'connected'"), &peer(b.peer_id()));
}

#[test]
fn the_dashboard_asks_for_a_token_where_loopback_is_not_trusted() {
    let Some(browser) = Browser::start() else { return };
    let token = "dashboard-token-for-tests";
    let a = node(
        &format!(
            "{CONFIG}[api]\nloopback_open = false\ntokens = [{{ name = \"ui\", token = \"{token}\", scopes = [\"read\"] }}]\n"
        ),
        None,
    );
    browser.goto(&format!("{}/ui", a.api));
    browser.until("the token form", "!document.querySelector('#login').hidden", &[]);
    browser.eval("document.querySelector('#token').value = arguments[0]; document.querySelector('#login').requestSubmit();", vec![json!("wrong-token-of-sixteen")]);
    browser.until(
        "the wrong token refused",
        "document.querySelector('#login-error').textContent.includes('refused')",
        &[],
    );
    browser.eval("document.querySelector('#token').value = arguments[0]; document.querySelector('#login').requestSubmit();", vec![json!(token)]);
    browser.until(
        "the panels with the node's id",
        "document.querySelector('#node-id').title === arguments[0]",
        &[json!(a.peer_id())],
    );
    browser.until("the node healthy", "document.querySelector('#health').dataset.health === 'ok'", &[]);
    browser.until("task changes followed live", "document.querySelector('#live').dataset.live === 'on'", &[]);
}
