//! The foundation through its binaries: init, run, health, shutdown, keys and grants.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use murmur_tests::{TestNode, init_data_dir, mur, mur_json, murnode};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether `help` shows `example` as a line of its own (clap reflows doc comments into
/// one paragraph unless told to keep them as written).
fn shows_example(help: &[u8], example: &str) -> bool {
    text(help).lines().any(|line| line.trim() == example)
}

#[test]
fn help_teaches_with_examples() {
    let out = murnode(&["--help"]);
    assert!(out.status.success());
    assert!(shows_example(&out.stdout, "murnode init --data-dir ./node1"), "{}", text(&out.stdout));
    let out = mur(&["--help"]);
    assert!(shows_example(&out.stdout, "mur directory --json"), "{}", text(&out.stdout));
    let out = mur(&["grant", "sign", "--help"]);
    assert!(
        shows_example(&out.stdout, "mur grant sign --key authority.key --capsule pipeline \\"),
        "{}",
        text(&out.stdout)
    );
    for (command, example) in [
        (
            &["cert", "sign"][..],
            "mur cert sign --key authority.key --node 12D3KooW… --valid-for 365d --out node.cert",
        ),
        (&["artifact", "pull"][..], "mur artifact pull wordcount@1.0.0"),
        (&["bundle", "export"][..], "mur key gen --out publisher.key"),
        (&["tool", "run"][..], "mur tool run wordcount --data \"count these words\""),
    ] {
        let out = mur(&[command, &["--help"]].concat());
        assert!(shows_example(&out.stdout, example), "{command:?}: {}", text(&out.stdout));
    }
    let out = mur(&["grant", "bogus"]);
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

#[test]
fn init_creates_a_private_key_and_never_replaces_it() {
    let dir = init_data_dir();
    let key = dir.path().join("node.key");
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    let before = std::fs::read(&key).unwrap();
    let out = murnode(&["init", "--data-dir", dir.path().to_str().unwrap(), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["key_created"], false);
    assert!(json["peer_id"].as_str().unwrap().starts_with("12D3KooW"));
    assert_eq!(std::fs::read(&key).unwrap(), before);
}

#[test]
fn run_prints_ready_serves_health_and_stops_on_sigterm() {
    let mut node = TestNode::start(&["--no-mdns"]).unwrap();
    assert!(node.peer_id().starts_with("12D3KooW"));
    let health = node.get("/healthz").unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["peer_id"], node.peer_id());
    let status = node.terminate(Duration::from_secs(10)).unwrap();
    assert!(status.success(), "clean shutdown exits 0, got {status:?}");
}

#[test]
fn run_refuses_a_config_typo_naming_the_key() {
    let dir = init_data_dir();
    std::fs::write(dir.path().join("murnode.toml"), "[network]\nmdsn = false\n").unwrap();
    let out = murnode(&["run", "--data-dir", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("unknown field `mdsn`") && err.contains("line 2"), "{err}");
}

#[test]
fn run_without_init_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = murnode(&["run", "--data-dir", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("murnode init --data-dir"));
}

#[test]
fn run_refuses_a_key_file_others_can_read() {
    let dir = init_data_dir();
    let key = dir.path().join("node.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = murnode(&["run", "--data-dir", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("chmod 600"), "{}", text(&out.stderr));
}

struct Authority {
    _dir: tempfile::TempDir,
    key: String,
    public: String,
    path: std::path::PathBuf,
}

fn authority() -> Authority {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("authority.key");
    let json = mur_json(&["key", "gen", "--out", key.to_str().unwrap(), "--json"]);
    Authority {
        key: key.to_str().unwrap().to_owned(),
        public: json["public_key"].as_str().unwrap().to_owned(),
        path: dir.path().to_path_buf(),
        _dir: dir,
    }
}

fn sign(auth: &Authority, name: &str, extra: &[&str]) -> String {
    let out = auth.path.join(name);
    let out_s = out.to_str().unwrap().to_owned();
    let mut args =
        vec!["grant", "sign", "--key", &auth.key, "--capsule", "pipeline", "--out", &out_s, "--json"];
    args.extend(extra);
    mur_json(&args);
    out_s
}

fn verify(file: &str, authority: &str, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec!["grant", "verify", file, "--authority", authority, "--json"];
    args.extend(extra);
    let out = mur(&args);
    (out.status.code(), serde_json::from_slice(&out.stdout).unwrap_or_default())
}

#[test]
fn grants_sign_verify_and_show() {
    let auth = authority();
    let file = sign(
        &auth,
        "ok.grant",
        &["--allow", "mesh://echo", "--allow", "localhost:*", "--tools-allow", "wordcount"],
    );
    let (code, json) = verify(&file, &auth.public, &["--capsule", "pipeline"]);
    assert_eq!(code, Some(0));
    assert_eq!(json["valid"], true);
    assert_eq!(json["grant"]["network_allow"], serde_json::json!(["mesh://echo", "localhost:*"]));
    let shown = mur_json(&["grant", "show", &file, "--json"]);
    assert_eq!(shown["issuer"], auth.public.as_str());
    assert_eq!(shown["tools_allow"], serde_json::json!(["wordcount"]));
}

#[test]
fn bad_grants_fail_verification_with_the_reason() {
    let auth = authority();
    let other = authority();
    let file = sign(&auth, "g.grant", &["--allow", "mesh://echo", "--valid-for", "1h"]);

    assert_eq!(verify(&file, &other.public, &[]).1["reason"], "untrusted_issuer");
    assert_eq!(verify(&file, &auth.public, &["--capsule", "echo"]).1["reason"], "wrong_capsule");
    assert_eq!(verify(&file, &auth.public, &["--at", "2099-01-01T00:00:00Z"]).1["reason"], "expired");
    assert_eq!(verify(&file, &auth.public, &["--at", "2000-01-01T00:00:00Z"]).1["reason"], "not_yet_valid");

    let bytes = std::fs::read(&file).unwrap();
    let at = bytes.windows(8).position(|w| w == b"pipeline").unwrap();
    let mut tampered = bytes.clone();
    tampered[at] = b'q';
    let tampered_path = auth.path.join("tampered.grant");
    std::fs::write(&tampered_path, &tampered).unwrap();
    let (code, json) = verify(tampered_path.to_str().unwrap(), &auth.public, &[]);
    assert_eq!((code, json["reason"].as_str()), (Some(1), Some("bad_signature")));

    let truncated_path = auth.path.join("truncated.grant");
    std::fs::write(&truncated_path, &bytes[..bytes.len() / 2]).unwrap();
    let (code, json) = verify(truncated_path.to_str().unwrap(), &auth.public, &[]);
    assert_eq!((code, json["reason"].as_str()), (Some(1), Some("malformed")));
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "nothing stored was changed");
}

#[test]
fn bad_inputs_to_grant_sign_are_usage_errors() {
    let auth = authority();
    let out_path = auth.path.join("x.grant");
    let out_s = out_path.to_str().unwrap();
    let out = mur(&[
        "grant",
        "sign",
        "--key",
        &auth.key,
        "--capsule",
        "x",
        "--allow",
        "mesh://ec*o",
        "--out",
        out_s,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("may only end a component"), "{}", text(&out.stderr));
    assert!(!out_path.exists(), "nothing written on a refused input");
    let out =
        mur(&["grant", "sign", "--key", &auth.key, "--capsule", "x", "--valid-for", "5y", "--out", out_s]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_demo_walkthrough_succeeds_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = murnode(&["demo", "--once", "--dir", dir.path().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("Every step behaved as expected."), "{text}");
    for expected in [
        "lists all 4 capsules",
        "completed on node3",
        "node1 asked its owner for it: completed",
        "target_not_allowed",
        "0 echo tasks",
        "completed → Which colour should the mesh be? -> blue",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
}

#[test]
fn versions_name_the_revision_completions_parse_and_status_fits_one_screen() {
    // Both binaries name their version and, in a checkout, the git revision they were
    // built from (each package stamps itself when HEAD moves: a build of one package alone
    // may leave the other's stamp older).
    let version = text(&murnode(&["--version"]).stdout).trim().to_owned();
    let stamped = version.strip_prefix("murnode ").expect("murnode NAME VERSION").to_owned();
    let client = text(&mur(&["--version"]).stdout).trim().to_owned();
    let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.git").exists();
    for line in [&version, &client] {
        assert!(line.contains(env!("CARGO_PKG_VERSION")), "{line}");
        if checkout {
            let rev = line.split("(git ").nth(1).and_then(|r| r.strip_suffix(')')).unwrap_or_default();
            assert!(rev.len() == 10 && rev.chars().all(|c| c.is_ascii_hexdigit()), "{line}");
        }
    }

    // Completion scripts for both; bash's parses.
    for (bin, name) in [(murmur_tests::bin("mur"), "mur"), (murmur_tests::bin("murnode"), "murnode")] {
        let out = std::process::Command::new(&bin).args(["completions", "bash"]).output().unwrap();
        assert!(out.status.success() && text(&out.stdout).contains(&format!("_{name}()")), "{name}");
        let checked =
            std::process::Command::new("bash").args(["-n", "-c", &text(&out.stdout)]).output().unwrap();
        assert!(checked.status.success(), "{name}'s bash completion: {}", text(&checked.stderr));
        let zsh = std::process::Command::new(&bin).args(["completions", "zsh"]).output().unwrap();
        assert!(text(&zsh.stdout).starts_with(&format!("#compdef {name}")), "{name}");
    }
    let refused = mur(&["completions", "tcsh"]);
    assert_eq!(refused.status.code(), Some(2), "an unknown shell is a usage error");

    // Structured logs on request: every line on stderr is a JSON object.
    let node = TestNode::start(&["--no-mdns", "--log-format", "json"]).unwrap();
    let status = mur_json(&["status", "--json", "--node", &node.api]);
    assert_eq!(status["peer_id"], node.peer_id());
    assert_eq!(status["version"], stamped.as_str());
    assert_eq!((status["peers_connected"].as_u64(), status["directory_nodes"].as_u64()), (Some(0), Some(1)));
    assert!(status["listen_addrs"][0].as_str().unwrap().contains(node.peer_id()), "{status}");
    let screen = text(&mur(&["status", "--node", &node.api]).stdout);
    for part in
        ["node      ", "peers     ", "mesh      ", "runs      ", "agents    ", "tasks     ", "pulls     "]
    {
        assert!(screen.contains(part), "`mur status` lacks {part:?}:\n{screen}");
    }
    let log = node.stderr();
    let started = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .find(|l| l["fields"]["message"] == "node started")
        .unwrap_or_else(|| panic!("no `node started` line:\n{log}"));
    assert_eq!(started["fields"]["peer"], node.peer_id(), "the line names the node");
}
