//! Artifacts with the real binaries: `mur artifact`, and carrying a capsule into an
//! isolated node as a signed bundle.

use std::path::Path;

use murmur_tests::{TestNode, guest, init_data_dir, mur, mur_json};

fn dir_arg(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

/// A publisher key file and its public key.
fn publisher(dir: &Path) -> (String, String) {
    let path = dir.join("publisher.key");
    let out = mur(&["key", "gen", "--out", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = mur_json(&["key", "show", path.to_str().unwrap(), "--json"]);
    (path.to_str().unwrap().to_owned(), shown["public_key"].as_str().unwrap().to_owned())
}

fn trust(data_dir: &Path, publisher: &str) {
    std::fs::write(data_dir.join("murnode.toml"), format!("[trust]\npublishers = [\"{publisher}\"]\n"))
        .unwrap();
}

#[test]
fn a_bundle_carries_a_capsule_to_an_isolated_node_that_then_runs_it() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());

    // The connected side: add the component to the store, export it.
    let source = init_data_dir();
    let echo = guest("echo");
    let added = mur_json(&[
        "artifact",
        "add",
        echo.to_str().unwrap(),
        "--name",
        "echo",
        "--version",
        "1.0.0",
        "--kind",
        "tool",
        "--data-dir",
        dir_arg(source.path()),
        "--json",
    ]);
    assert_eq!(added["name"], "echo");
    let listed = mur_json(&["artifact", "ls", "--data-dir", dir_arg(source.path()), "--json"]);
    assert_eq!(listed["artifacts"].as_array().unwrap().len(), 1);
    let bundle = work.path().join("tools.bundle");
    let report = mur_json(&[
        "bundle",
        "export",
        "echo@1.0.0",
        "--sign-key",
        &key,
        "-o",
        bundle.to_str().unwrap(),
        "--data-dir",
        dir_arg(source.path()),
        "--json",
    ]);
    assert_eq!(report["artifacts"][0], "echo@1.0.0");
    assert_eq!(report["publisher"], public.as_str());
    let again = mur(&[
        "bundle",
        "export",
        "echo",
        "--sign-key",
        &key,
        "-o",
        bundle.to_str().unwrap(),
        "--data-dir",
        dir_arg(source.path()),
    ]);
    assert_eq!(again.status.code(), Some(2), "an existing bundle is not overwritten");

    // The isolated side: a node that trusts the publisher, and nothing else.
    let target = init_data_dir();
    let untrusting =
        mur(&["bundle", "import", bundle.to_str().unwrap(), "--data-dir", dir_arg(target.path())]);
    assert_eq!(untrusting.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&untrusting.stderr).contains("trust.publishers"));
    trust(target.path(), &public);
    let verified = mur_json(&[
        "bundle",
        "verify",
        bundle.to_str().unwrap(),
        "--data-dir",
        dir_arg(target.path()),
        "--json",
    ]);
    assert_eq!(verified["blobs"], 3);
    let imported = mur_json(&[
        "bundle",
        "import",
        bundle.to_str().unwrap(),
        "--data-dir",
        dir_arg(target.path()),
        "--json",
    ]);
    assert_eq!(imported["blobs_written"], 3);
    let shown = mur_json(&["artifact", "show", "echo@1.0.0", "--data-dir", dir_arg(target.path()), "--json"]);
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
    let out = mur(&[
        "artifact",
        "add",
        echo.to_str().unwrap(),
        "--name",
        "echo",
        "--version",
        "1.0.0",
        "--kind",
        "tool",
        "--data-dir",
        dir_arg(source.path()),
    ]);
    assert!(out.status.success());
    let bundle = work.path().join("tools.bundle");
    let out = mur(&[
        "bundle",
        "export",
        "echo",
        "--sign-key",
        &key,
        "-o",
        bundle.to_str().unwrap(),
        "--data-dir",
        dir_arg(source.path()),
    ]);
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
        let out = mur(&["bundle", command, tampered.to_str().unwrap(), "--data-dir", dir_arg(target.path())]);
        assert_eq!(out.status.code(), Some(1), "{command}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("refused") && stderr.contains("tampered or corrupt"), "{command}: {stderr}");
    }
    let listed = mur_json(&["artifact", "ls", "--data-dir", dir_arg(target.path()), "--json"]);
    assert!(listed["artifacts"].as_array().unwrap().is_empty());
    let blobs = std::fs::read_dir(target.path().join("store/blobs/sha256")).unwrap().count();
    assert_eq!(blobs, 0, "no blob was written");
}
