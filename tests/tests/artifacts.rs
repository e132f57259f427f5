//! Artifacts with the real binaries: `mur artifact`, and carrying a capsule into an
//! isolated node as a signed bundle.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use murmur_tests::{TestNode, guest, init_data_dir, mur, mur_json, publisher, trusting};

/// `mur ARGS --data-dir DIR`.
fn mur_in(dir: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--data-dir", dir.to_str().unwrap()]);
    mur(&all)
}

/// `mur ARGS --data-dir DIR --json`, which must succeed; its JSON.
fn mur_json_in(dir: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--data-dir", dir.to_str().unwrap(), "--json"]);
    mur_json(&all)
}

/// Adds component `file` to the store of `dir` as NAME@1.0.0, a tool.
fn add(dir: &Path, file: &Path, name: &str) -> Value {
    mur_json_in(
        dir,
        &["artifact", "add", file.to_str().unwrap(), "--name", name, "--version", "1.0.0", "--kind", "tool"],
    )
}

/// Exports `reference` from the store of `dir` to `out`, signed with `key`.
fn export(dir: &Path, key: &str, reference: &str, out: &Path) -> Output {
    mur_in(dir, &["bundle", "export", reference, "--sign-key", key, "-o", out.to_str().unwrap()])
}

fn trust(data_dir: &Path, publisher: &str) {
    std::fs::write(data_dir.join("murnode.toml"), trusting(publisher)).unwrap();
}

#[test]
fn a_bundle_carries_a_capsule_to_an_isolated_node_that_then_runs_it() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());

    // The connected side: add the component to the store, export it.
    let source = init_data_dir();
    let echo = guest("echo");
    let added = add(source.path(), &echo, "echo");
    assert_eq!(added["name"], "echo");
    let listed = mur_json_in(source.path(), &["artifact", "ls"]);
    assert_eq!(listed["artifacts"].as_array().unwrap().len(), 1);
    let bundle = work.path().join("tools.bundle");
    let report = mur_json_in(
        source.path(),
        &["bundle", "export", "echo@1.0.0", "--sign-key", &key, "-o", bundle.to_str().unwrap()],
    );
    assert_eq!(report["artifacts"][0], "echo@1.0.0");
    assert_eq!(report["publisher"], public.as_str());
    let again = export(source.path(), &key, "echo", &bundle);
    assert_eq!(again.status.code(), Some(2), "an existing bundle is not overwritten");

    // The isolated side: a node that trusts the publisher, and nothing else.
    let target = init_data_dir();
    let untrusting = mur_in(target.path(), &["bundle", "import", bundle.to_str().unwrap()]);
    assert_eq!(untrusting.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&untrusting.stderr).contains("trust.publishers"));
    trust(target.path(), &public);
    let verified = mur_json_in(target.path(), &["bundle", "verify", bundle.to_str().unwrap()]);
    assert_eq!(verified["blobs"], 3);
    let imported = mur_json_in(target.path(), &["bundle", "import", bundle.to_str().unwrap()]);
    assert_eq!(imported["blobs_written"], 3);
    let shown = mur_json_in(target.path(), &["artifact", "show", "echo@1.0.0"]);
    assert_eq!(shown["content"], added["content"]);

    // A capsule manifest naming the imported artifact; the node has no peers at all.
    let capsules = target.path().join("capsules");
    std::fs::create_dir_all(&capsules).unwrap();
    std::fs::write(
        capsules.join("echo.toml"),
        "name = \"echo\"\nversion = \"1.0.0\"\nkind = \"tool\"\nartifact = \"echo@1.0.0\"\n",
    )
    .unwrap();
    let node = TestNode::start_owned(target, murmur_tests::LOOPBACK).unwrap();
    assert!(node.connected_peers().is_empty());
    let run = mur_json(&["tool", "run", "echo", "--data", "carried by hand", "--node", &node.api, "--json"]);
    assert_eq!(run["result"]["data"], "carried by hand");
}

#[test]
fn a_tampered_bundle_is_refused_and_the_store_stays_empty() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let source = init_data_dir();
    let echo = guest("echo");
    add(source.path(), &echo, "echo");
    let bundle = work.path().join("tools.bundle");
    let out = export(source.path(), &key, "echo", &bundle);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // One byte flipped inside the component's bytes in the bundle.
    let mut bytes = std::fs::read(&bundle).unwrap();
    let component = std::fs::read(&echo).unwrap();
    let needle = &component[component.len() / 2..component.len() / 2 + 64];
    let at = bytes.windows(64).position(|w| w == needle).expect("the component is in the bundle");
    bytes[at] ^= 0x01;
    let tampered = work.path().join("tampered.bundle");
    std::fs::write(&tampered, &bytes).unwrap();

    let target = init_data_dir();
    trust(target.path(), &public);
    for command in ["verify", "import"] {
        let out = mur_in(target.path(), &["bundle", command, tampered.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{command}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("refused") && stderr.contains("tampered or corrupt"), "{command}: {stderr}");
    }
    let listed = mur_json_in(target.path(), &["artifact", "ls"]);
    assert!(listed["artifacts"].as_array().unwrap().is_empty());
    let blobs = std::fs::read_dir(target.path().join("store/blobs/sha256")).unwrap().count();
    assert_eq!(blobs, 0, "no blob was written");
}

#[test]
fn an_import_killed_midway_converges_when_run_again() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let source = init_data_dir();
    // 64 MiB of content: an import takes long enough to be killed in the middle.
    let component = work.path().join("big.wasm");
    let bytes: Vec<u8> =
        (0..64u32 * 1024 * 1024).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(&component, &bytes).unwrap();
    add(source.path(), &component, "big");
    let bundle = work.path().join("big.bundle");
    let out = export(source.path(), &key, "big", &bundle);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let target = init_data_dir();
    trust(target.path(), &public);
    let staging = target.path().join("store/.import");
    let mut child = std::process::Command::new(murmur_tests::bin("mur"))
        .args(["bundle", "import", bundle.to_str().unwrap(), "--data-dir", target.path().to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once a blob is being staged.
    let started = std::time::Instant::now();
    while !std::fs::read_dir(&staging).is_ok_and(|mut d| d.next().is_some()) {
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "the import never staged a blob");
        assert!(child.try_wait().unwrap().is_none(), "the import finished before it could be killed");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let listed = mur_json_in(target.path(), &["artifact", "ls"]);
    assert!(listed["artifacts"].as_array().unwrap().is_empty(), "nothing indexed by the killed import");

    let imported = mur_json_in(target.path(), &["bundle", "import", bundle.to_str().unwrap()]);
    assert_eq!(imported["artifacts"][0], "big@1.0.0");
    assert!(!staging.exists(), "staging cleared");
    let shown = mur_json_in(target.path(), &["artifact", "show", "big"]);
    assert_eq!(shown["size"], 64 * 1024 * 1024);
    let again = mur_json_in(target.path(), &["bundle", "import", bundle.to_str().unwrap()]);
    assert_eq!(again["blobs_written"], 0);
}
