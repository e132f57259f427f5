use super::*;
use crate::identity::SecretKey;

fn node(n: u8) -> NodeId {
    SecretKey::from_seed([n; 32]).node_id()
}

fn url(text: &str) -> PeerUrl {
    text.parse().unwrap_or_else(|err| panic!("{text}: {err}"))
}

fn pattern(text: &str) -> AllowPattern {
    text.parse().unwrap_or_else(|err| panic!("{text}: {err}"))
}

fn allows(p: &str, target: &str) -> bool {
    pattern(p).matches(&url(target))
}

#[test]
fn parses_every_form() {
    assert_eq!(url("mesh://echo"), PeerUrl::Mesh { capsule: "echo".into(), node: None });
    let n = node(1);
    assert_eq!(url(&format!("mesh://echo@{n}")), PeerUrl::Mesh { capsule: "echo".into(), node: Some(n) });
    assert_eq!(url("localhost:52322"), PeerUrl::Direct { host: "localhost".into(), port: 52322 });
    assert_eq!(url("[::1]:8080"), PeerUrl::Direct { host: "[::1]".into(), port: 8080 });
    assert_eq!(
        url("https://agents.example.com/a2a/"),
        PeerUrl::Http { secure: true, host: "agents.example.com".into(), port: 443, path: "/a2a".into() }
    );
    assert_eq!(
        url("http://10.0.0.5:9000"),
        PeerUrl::Http { secure: false, host: "10.0.0.5".into(), port: 9000, path: String::new() }
    );
}

#[test]
fn display_is_canonical_and_round_trips() {
    let n = node(2);
    for (input, canonical) in [
        ("mesh://echo/", "mesh://echo".to_owned()),
        (&format!(" mesh://echo@{n} "), format!("mesh://echo@{n}")),
        ("http://h:80/", "http://h".to_owned()),
        ("https://h:443/x/y//", "https://h/x/y".to_owned()),
        ("http://h:8080/x", "http://h:8080/x".to_owned()),
        ("h:1", "h:1".to_owned()),
    ] {
        let parsed = url(input);
        assert_eq!(parsed.to_string(), canonical, "{input}");
        assert_eq!(url(&canonical), parsed);
    }
}

#[test]
fn refuses_ambiguous_or_malformed_urls_with_reasons() {
    for (bad, reason) in [
        ("", "empty"),
        ("mesh://", "missing capsule name"),
        ("mesh://Echo", "a-z"),
        ("MESH://echo", "lowercase"),
        ("mesh://echo@", "missing peer id"),
        ("mesh://echo@notapeer", "not a libp2p peer id"),
        ("mesh://echo/sub", "no path"),
        ("mesh://a@b@c", "more than one"),
        ("localhost", "missing port"),
        ("localhost:0", "1 to 65535"),
        ("localhost:080", "leading zeros"),
        ("localhost:70000", "1 to 65535"),
        ("Example.com:80", "lowercase"),
        ("ftp://x:1", "unknown scheme"),
        ("http://user@h", "user info"),
        ("http://h/a/../b", "`..`"),
        ("http://h/a?b=1", "queries"),
        ("http://h/a b", "whitespace"),
        ("::1:80", "brackets"),
        ("[::1", "unclosed"),
        ("[0:0::1]:80", "shortest"),
        ("999.1.1.1:80", "IPv4"),
        ("h:80/x", "http://"),
        ("mesh://echo*", "only allowed in allowlist patterns"),
    ] {
        let err = bad.parse::<PeerUrl>().unwrap_err();
        assert!(err.to_string().contains(reason), "{bad:?}: {err}");
    }
    let long = format!("mesh://{}", "a".repeat(600));
    assert!(long.parse::<PeerUrl>().unwrap_err().to_string().contains("longer than"));
}

#[test]
fn exact_patterns_match_only_their_target() {
    assert!(allows("mesh://echo", "mesh://echo"));
    assert!(allows("mesh://echo", "mesh://echo/"));
    assert!(!allows("mesh://echo", "mesh://echo2"));
    assert!(!allows("mesh://echo", "mesh://ech"));
    assert!(allows("localhost:52322", "localhost:52322"));
    assert!(!allows("localhost:52322", "localhost:52323"));
    assert!(!allows("localhost:52322", "127.0.0.1:52322"), "no name resolution in matching");
    assert!(!allows("localhost:80", "http://localhost"), "HOST:PORT and http:// are different targets");
    assert!(allows("http://h/a2a", "http://h:80/a2a/"), "default port and trailing slash");
    assert!(!allows("http://h/a2a", "https://h/a2a"));
    assert!(!allows("http://h/A2A", "http://h/a2a"), "paths are case-sensitive");
}

#[test]
fn star_never_crosses_the_at() {
    let n = node(3);
    let pinned = format!("mesh://echo@{n}");
    assert!(allows("mesh://ec*", "mesh://echo"));
    assert!(allows("mesh://*", "mesh://anything"));
    assert!(!allows("mesh://ec*", &pinned), "a name glob must not swallow `@peer`");
    assert!(!allows("mesh://*", &pinned));
    assert!(!allows("mesh://echo", &pinned), "unpinned pattern does not admit pinned targets");
    assert!(allows("mesh://echo@*", &pinned));
    assert!(allows("mesh://*@*", &pinned));
    assert!(!allows("mesh://echo@*", "mesh://echo"));
    assert!(allows(&pinned, &pinned));
    assert!(!allows(&pinned, &format!("mesh://echo@{}", node(4))));
}

#[test]
fn star_stays_within_host_port_and_path() {
    assert!(allows("10.0.0.*:8080", "10.0.0.5:8080"));
    assert!(!allows("10.0.0.*:8080", "10.0.0.5:8081"), "host glob must not swallow the port");
    assert!(allows("localhost:*", "localhost:1"));
    assert!(!allows("localhost:*", "localhost.evil.com:1"), "port glob must not widen the host");
    assert!(allows("http://h/api/*", "http://h/api/x/y"));
    assert!(!allows("http://h/api/*", "http://h/apix"));
    assert!(!allows("http://h/api/*", "http://h:8080/api/x"), "path glob keeps the default port");
    assert!(allows("http://h:*/api/*", "http://h:8080/api/x"));
    assert!(allows("http://h*", "http://host.example.com"));
    assert!(!allows("http://h*", "http://host.example.com/x"), "host glob must not swallow the path");
}

#[test]
fn refuses_bad_patterns() {
    for (bad, reason) in [
        ("mesh://e*o", "may only end"),
        ("mesh://echo@12D3*", "complete or `*`"),
        ("localhost:80*", "number or `*`"),
        ("mesh://E*", "a-z"),
    ] {
        let err = bad.parse::<AllowPattern>().unwrap_err();
        assert!(err.to_string().contains(reason), "{bad:?}: {err}");
    }
}

#[test]
fn pattern_text_round_trips() {
    let n = node(5);
    for text in [
        "mesh://echo".to_owned(),
        "mesh://ec*".to_owned(),
        "mesh://*@*".to_owned(),
        format!("mesh://echo@{n}"),
        "localhost:*".to_owned(),
        "http://h:*/api/*".to_owned(),
        "https://h/x".to_owned(),
    ] {
        assert_eq!(pattern(&text).to_string(), text);
    }
}
