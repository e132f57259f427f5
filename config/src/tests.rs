use super::*;

fn parse(text: &str) -> Result<Config, String> {
    let raw = RawConfig::parse(text).map_err(|e| e.to_string())?;
    Config::from_raw(&raw, Path::new("/data")).map_err(|e| e.to_string())
}

#[test]
fn the_shipped_default_file_is_the_default_config() {
    let shipped = parse(DEFAULT_CONFIG_TOML).unwrap();
    assert_eq!(shipped, parse("").unwrap());
    assert_eq!(shipped.api_listen.to_string(), "127.0.0.1:7420");
    assert_eq!(shipped.adverts.ttl, Duration::from_secs(90));
    assert_eq!(shipped.trust.cert, PathBuf::from("/data/node.cert"));
}

#[test]
fn every_commented_key_in_the_shipped_file_is_a_real_key() {
    // Uncomment every `# key = value` line and every `# [[table]]`: all must still parse.
    let uncommented: String = DEFAULT_CONFIG_TOML
        .lines()
        .map(|line| {
            let body = line.strip_prefix("# ").unwrap_or(line);
            let is_setting = body.starts_with('[')
                || body
                    .split_once(" = ")
                    .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            if line.starts_with("# ") && is_setting { body.to_owned() } else { line.to_owned() }
        })
        .map(|line| line + "\n")
        .collect();
    assert!(uncommented.contains("\nttl_secs = 90\n"));
    let config = parse(&uncommented).unwrap();
    assert_eq!(config.capsules.len(), 1);
    assert_eq!(config.pins.len(), 1);
    assert_eq!(config.credentials.len(), 2);
    assert_eq!(config.credentials["openai"], Credential::File(PathBuf::from("/data/secrets/openai.key")));
}

#[test]
fn credentials_are_values_or_files_and_never_shown() {
    let config = parse(
        "[credentials]
openai = \"sk-secret\"
local = { file = \"/run/key\" }
",
    )
    .unwrap();
    assert_eq!(config.credentials["openai"].read().unwrap(), "sk-secret");
    assert_eq!(config.credentials["local"], Credential::File(PathBuf::from("/run/key")));
    assert!(!format!("{config:?}").contains("sk-secret"), "Debug must not show a secret");
    let err = parse(
        "[credentials]
\"bad key\" = \"x\"
",
    )
    .unwrap_err();
    assert!(err.contains("config key `credentials.bad key`"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), "from-a-file\n").unwrap();
    assert_eq!(Credential::File(dir.path().join("key")).read().unwrap(), "from-a-file");
    assert!(Credential::File(dir.path().join("missing")).read().unwrap_err().contains("cannot read"));
}

#[test]
fn a_typo_names_the_key() {
    let err = parse("[adverts]\nttl_sec = 90\n").unwrap_err();
    assert!(err.contains("unknown field `ttl_sec`") && err.contains("ttl_secs"), "{err}");
    let err = parse("[netwrk]\n").unwrap_err();
    assert!(err.contains("unknown field `netwrk`"), "{err}");
}

#[test]
fn bad_values_name_their_keys_all_at_once() {
    let err = parse(
        r#"
[api]
listen = "localhost:7420"
[network]
bootstrap = ["/ip4/10.0.0.1/tcp/7421"]
listen = ["/dns4/x/tcp/1"]
ping_timeout_secs = 0
[adverts]
refresh_secs = 100
[trust]
closed = true
authorities = ["ed25519:xyz"]
[[capsules]]
name = "Echo"
version = "1"
digest = "sha256:00"
[tasks]
finished_in_memory = 9
"#,
    )
    .unwrap_err();
    for key in [
        "`api.listen`",
        "`network.bootstrap`",
        "`network.listen`",
        "`network.ping_timeout_secs`",
        "`adverts.refresh_secs`",
        "`trust.authorities`",
        "`capsules[0].name`",
        "`capsules[0].digest`",
        "`tasks.finished_in_memory`",
    ] {
        assert!(err.contains(key), "missing {key} in:\n{err}");
    }
    assert!(err.starts_with("9 problems:"), "{err}");
    assert!(err.contains("is 9 but must be 10..=50000"), "{err}");
}

#[test]
fn wrong_types_are_errors_with_a_line() {
    let err = parse("[network]\nmdns = \"yes\"\n").unwrap_err();
    assert!(err.contains("line 2") || err.contains("mdns"), "{err}");
}

#[test]
fn bootstrap_needs_a_peer_id() {
    let peer = murmur_protocol::SecretKey::from_seed([1; 32]).node_id();
    let ok = format!("[network]\nbootstrap = [\"/ip4/10.0.0.1/tcp/7421/p2p/{peer}\"]\n");
    let config = parse(&ok).unwrap();
    assert_eq!(config.network.bootstrap[0].0, peer.to_peer_id());
}

#[test]
fn pins_name_an_artifact_and_a_bounded_factor() {
    let config = parse("[[pins]]\nartifact = \"model@1.0.0\"\n").unwrap();
    assert_eq!(config.pins, vec![Pin { name: "model".into(), version: "1.0.0".into(), replicas: 3 }]);
    let err = parse("[[pins]]\nartifact = \"model\"\n").unwrap_err();
    assert!(err.contains("pins[0].artifact") && err.contains("NAME@VERSION"), "{err}");
    let err = parse("[[pins]]\nartifact = \"model@1\"\nreplicas = 0\n").unwrap_err();
    assert!(err.contains("pins[0].replicas"), "{err}");
    let err = parse("[[pins]]\nartifact = \"m@1\"\n[[pins]]\nartifact = \"m@1\"\n").unwrap_err();
    assert!(err.contains("pinned twice"), "{err}");
}

#[test]
fn tokens_name_clients_with_scopes_and_are_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ci.token"), "ci-secret-0123456789abcdef\n").unwrap();
    let text = r#"
[api]
tokens = [
  "plain-secret-0123456789",
  { name = "dash", token = "dash-secret-0123456789", scopes = ["read"] },
  { name = "ci", token_file = "ci.token", scopes = ["read", "send"] },
]
"#;
    let raw = RawConfig::parse(text).unwrap();
    let config = Config::from_raw(&raw, dir.path()).unwrap();
    let policy = &config.api_policy;
    let remote: std::net::IpAddr = "192.0.2.7".parse().unwrap();
    let client = |token| policy.client(remote, Some(token)).map(|c| (c.name, c.scope));
    assert_eq!(client("plain-secret-0123456789"), Some(("token-1".into(), Scope::Admin)));
    assert_eq!(client("dash-secret-0123456789"), Some(("dash".into(), Scope::Read)));
    assert_eq!(client("ci-secret-0123456789abcdef"), Some(("ci".into(), Scope::Send)), "read from its file");
    assert_eq!(client("nobody-0123456789abcdef"), None);
    assert_eq!(policy.client(remote, None), None);
    let local = policy.client("127.0.0.1".parse().unwrap(), None).unwrap();
    assert_eq!((local.name.as_str(), local.scope), ("local", Scope::Admin));
    assert!(!format!("{policy:?}").contains("secret"), "Debug never shows a token");

    let bad = r#"
[api]
tokens = [
  { name = "a", token = "short", scopes = ["read"] },
  { name = "b", token = "b-secret-0123456789", token_file = "x", scopes = ["read"] },
  { name = "c", token = "c-secret-0123456789", scopes = [] },
  { name = "Local", token = "d-secret-0123456789", scopes = ["read"] },
  { name = "e", token_file = "missing.token", scopes = ["read"] },
]
"#;
    let err = Config::from_raw(&RawConfig::parse(bad).unwrap(), dir.path()).unwrap_err().to_string();
    for part in [
        "`a`: a token must be",
        "`b`: give exactly one",
        "`c`: scopes is empty",
        "`Local`: a client name",
        "`e`: cannot read token_file",
    ] {
        assert!(err.contains(part), "{part}: {err}");
    }
    assert!(
        RawConfig::parse(
            "[api]\ntokens = [{ name = \"x\", token = \"x-secret-0123456789\", scopes = [\"root\"] }]"
        )
        .is_err()
    );
}
