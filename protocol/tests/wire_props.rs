//! Property tests for every wire type: round trips, and hostile bytes never panic and are
//! never accepted.

use murmur_protocol::directory::{DigestEntry, DirectoryDigest};
use murmur_protocol::sync;
use murmur_protocol::*;
use proptest::prelude::*;

fn secret() -> impl Strategy<Value = SecretKey> {
    any::<[u8; 32]>().prop_map(SecretKey::from_seed)
}

fn digest() -> impl Strategy<Value = Digest> {
    any::<[u8; 32]>().prop_map(Digest)
}

fn capsule_name() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9._-]{0,20}"
}

fn millis() -> impl Strategy<Value = Millis> {
    (0u64..1 << 50).prop_map(Millis)
}

fn hosted() -> impl Strategy<Value = HostedCapsule> {
    (capsule_name(), proptest::option::of(digest()), "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}(-[a-z0-9.]{1,8})?")
        .prop_map(|(name, digest, version)| HostedCapsule { name, digest, version })
}

fn cert_envelope() -> impl Strategy<Value = Envelope> {
    (secret(), secret(), any::<u64>(), millis(), 1u64..1 << 40).prop_map(
        |(issuer, node, serial, from, len)| {
            Signed::sign(NodeCert::new(node.node_id(), serial, from, from.plus(len)), &issuer)
                .expect("valid cert")
                .into_envelope()
        },
    )
}

prop_compose! {
    fn advert()(
        seq in any::<u64>(),
        issued_at in millis(),
        ttl_ms in 1000u64..=600_000,
        load in 0u16..=1000,
        addrs in proptest::collection::vec("/ip4/127\\.0\\.0\\.1/tcp/[0-9]{1,5}", 0..4),
        capsules in proptest::collection::btree_map(capsule_name(), hosted(), 0..8),
        artifacts in proptest::collection::vec(digest(), 0..4),
        cert in proptest::option::of(cert_envelope()),
    ) -> Advert {
        let mut advert = Advert::new(seq, issued_at, ttl_ms);
        advert.load = load;
        advert.addrs = addrs;
        advert.capsules = capsules.into_iter().map(|(name, mut c)| { c.name = name; c }).collect();
        advert.artifacts = artifacts;
        advert.cert = cert;
        advert
    }
}

fn peer_url_text() -> impl Strategy<Value = String> {
    let node = secret().prop_map(|k| k.node_id().to_string());
    prop_oneof![
        capsule_name().prop_map(|n| format!("mesh://{n}")),
        (capsule_name(), node).prop_map(|(n, p)| format!("mesh://{n}@{p}")),
        ("[a-z]([a-z0-9-]{0,8}[a-z0-9])?(\\.[a-z]{2,5})?", 1u16..).prop_map(|(h, p)| format!("{h}:{p}")),
        (any::<bool>(), "[a-z]{1,8}", proptest::option::of(1u16..), "(/[a-zA-Z0-9_-]{1,6}){0,3}").prop_map(
            |(s, h, p, path)| {
                let scheme = if s { "https" } else { "http" };
                match p {
                    Some(p) => format!("{scheme}://{h}:{p}{path}"),
                    None => format!("{scheme}://{h}{path}"),
                }
            }
        ),
    ]
}

fn pattern_text() -> impl Strategy<Value = String> {
    prop_oneof![
        peer_url_text(),
        "[a-z]{0,6}".prop_map(|n| format!("mesh://{n}*")),
        capsule_name().prop_map(|n| format!("mesh://{n}@*")),
        "[a-z]{1,6}".prop_map(|h| format!("{h}:*")),
        "[a-z]{1,6}".prop_map(|h| format!("http://{h}:*/api/*")),
    ]
}

prop_compose! {
    fn grant()(
        capsule in capsule_name(),
        serial in any::<u64>(),
        from in millis(),
        len in 1u64..1 << 40,
        network in proptest::collection::vec(pattern_text(), 0..6),
        shell in proptest::collection::vec("/usr/bin/[a-z]{1,8}", 0..4),
        tools in proptest::collection::vec("[a-z]{1,8}\\*?", 0..4),
        artifact in proptest::option::of(digest()),
    ) -> Grant {
        let mut grant = Grant::new(capsule, serial, from, from.plus(len));
        grant.network = network.iter().map(|p| p.parse().expect("generated pattern parses")).collect();
        grant.shell = shell;
        grant.tools = tools;
        grant.artifact = artifact;
        grant
    }
}

/// Bytes that must never decode into something accepted: flipped, truncated, extended.
fn mutations(bytes: &[u8], bit: usize, cut: usize) -> [Vec<u8>; 3] {
    let mut flipped = bytes.to_vec();
    flipped[(bit / 8) % bytes.len()] ^= 1 << (bit % 8);
    let truncated = bytes[..cut % bytes.len()].to_vec();
    let mut extended = bytes.to_vec();
    extended.push(0);
    [flipped, truncated, extended]
}

fn accepted<T: Document>(bytes: &[u8]) -> bool {
    Envelope::decode(bytes).is_ok_and(|env| env.open::<T>().is_ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn advert_round_trips(key in secret(), advert in advert()) {
        let bytes = Signed::sign(advert.clone(), &key).unwrap().envelope().encode();
        let opened: Signed<Advert> = Envelope::decode(&bytes).unwrap().open().unwrap();
        prop_assert_eq!(opened.doc(), &advert);
        prop_assert_eq!(opened.signer(), key.public());
    }

    #[test]
    fn grant_round_trips(key in secret(), grant in grant()) {
        let bytes = Signed::sign(grant.clone(), &key).unwrap().envelope().encode();
        let opened: Signed<Grant> = Envelope::decode(&bytes).unwrap().open().unwrap();
        prop_assert_eq!(opened.doc(), &grant);
    }

    #[test]
    fn cert_round_trips(env in cert_envelope()) {
        let bytes = env.encode();
        let decoded = Envelope::decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &env);
        prop_assert!(decoded.open::<NodeCert>().is_ok());
    }

    #[test]
    fn digest_round_trips(keys in proptest::collection::vec((secret(), any::<u64>()), 0..20)) {
        let digest = DirectoryDigest::from_entries(keys.iter().map(|(k, s)| DigestEntry(k.node_id(), *s)).collect());
        prop_assert_eq!(DirectoryDigest::decode(&digest.encode()).unwrap(), digest);
    }

    #[test]
    fn peer_urls_round_trip_through_their_canonical_text(text in peer_url_text()) {
        let url: PeerUrl = text.parse().unwrap();
        let again: PeerUrl = url.to_string().parse().unwrap();
        prop_assert_eq!(&again, &url);
        prop_assert_eq!(again.to_string(), url.to_string());
    }

    #[test]
    fn patterns_round_trip_and_an_exact_pattern_matches_its_url(text in peer_url_text()) {
        let url: PeerUrl = text.parse().unwrap();
        let pattern: AllowPattern = url.to_string().parse().unwrap();
        prop_assert!(pattern.matches(&url));
        let again: AllowPattern = pattern.to_string().parse().unwrap();
        prop_assert_eq!(again, pattern);
    }

    #[test]
    fn mutated_adverts_are_never_accepted(key in secret(), advert in advert(), bit in any::<usize>(), cut in any::<usize>()) {
        let bytes = Signed::sign(advert, &key).unwrap().envelope().encode();
        for mutated in mutations(&bytes, bit, cut) {
            prop_assert!(!accepted::<Advert>(&mutated));
        }
    }

    #[test]
    fn mutated_grants_are_never_accepted(key in secret(), grant in grant(), bit in any::<usize>(), cut in any::<usize>()) {
        let bytes = Signed::sign(grant, &key).unwrap().envelope().encode();
        for mutated in mutations(&bytes, bit, cut) {
            prop_assert!(!accepted::<Grant>(&mutated));
        }
    }

    #[test]
    fn mutated_digests_never_panic(keys in proptest::collection::vec(secret(), 1..8), bit in any::<usize>(), cut in any::<usize>()) {
        let digest = DirectoryDigest::from_entries(keys.iter().map(|k| DigestEntry(k.node_id(), 1)).collect());
        for mutated in mutations(&digest.encode(), bit, cut) {
            let _ = DirectoryDigest::decode(&mutated);
        }
    }

    #[test]
    fn sync_messages_round_trip(keys in proptest::collection::vec((secret(), any::<u64>()), 0..10), cert in proptest::option::of(cert_envelope()), key in secret(), adverts in proptest::collection::vec(advert(), 0..4), more in any::<bool>()) {
        let digest = DirectoryDigest::from_entries(keys.iter().map(|(k, s)| DigestEntry(k.node_id(), *s)).collect());
        let request = sync::SyncRequest::new(cert, digest);
        prop_assert_eq!(sync::SyncRequest::decode(&request.encode()).unwrap(), request);
        let envelopes = adverts.into_iter().map(|a| Signed::sign(a, &key).unwrap().into_envelope()).collect();
        let response = sync::SyncResponse::new(envelopes, more);
        prop_assert_eq!(sync::SyncResponse::decode(&response.encode()).unwrap(), response);
    }

    #[test]
    fn summary_sync_messages_round_trip(keys in proptest::collection::vec((secret(), any::<u64>()), 0..10), salt in any::<u64>(), count in 1usize..5000, picks in proptest::collection::vec(any::<u32>(), 0..8)) {
        let buckets = sync::Buckets::new(salt, count);
        let entries: Vec<_> = keys.iter().map(|(k, s)| (k.node_id(), *s)).collect();
        let summary = buckets.summarize(entries.clone());
        prop_assert_eq!(summary.sums.len(), buckets.count() as usize);
        // Every node falls in the range of its bucket.
        for (node, _) in &entries {
            let (low, high) = buckets.range(buckets.bucket(node));
            prop_assert!(low <= *node && *node <= high);
        }
        let request = sync::SyncRequest::summarized(None, summary.clone());
        prop_assert_eq!(sync::SyncRequest::decode(&request.encode()).unwrap(), request);
        let mut chosen: Vec<u32> = picks.iter().map(|p| p % buckets.count()).collect();
        chosen.sort_unstable();
        chosen.dedup();
        let digest = DirectoryDigest::from_entries(entries.iter().map(|(n, s)| DigestEntry(*n, *s)).collect());
        let request = sync::SyncRequest::scoped(None, sync::Scope::new(buckets, chosen.clone()), digest);
        prop_assert_eq!(sync::SyncRequest::decode(&request.encode()).unwrap(), request);
        let differ = chosen.iter().map(|&b| sync::BucketSum(b, summary.sums[b as usize])).collect();
        let response = sync::SyncResponse::differing(differ, Vec::new());
        prop_assert_eq!(sync::SyncResponse::decode(&response.encode()).unwrap(), response);
    }

    #[test]
    fn mutated_summary_sync_messages_never_panic(key in secret(), salt in any::<u64>(), bit in any::<usize>(), cut in any::<usize>()) {
        let buckets = sync::Buckets::new(salt, 16);
        let request = sync::SyncRequest::summarized(None, buckets.summarize([(key.node_id(), 1)])).encode();
        for mutated in mutations(&request, bit, cut) {
            let _ = sync::SyncRequest::decode(&mutated);
        }
        let scope = sync::Scope::new(buckets, vec![2, 5]);
        let request = sync::SyncRequest::scoped(None, scope, DirectoryDigest::from_entries(vec![DigestEntry(key.node_id(), 1)])).encode();
        for mutated in mutations(&request, bit, cut) {
            let _ = sync::SyncRequest::decode(&mutated);
        }
        let response = sync::SyncResponse::differing(vec![sync::BucketSum(3, salt)], Vec::new()).encode();
        for mutated in mutations(&response, bit, cut) {
            let _ = sync::SyncResponse::decode(&mutated);
        }
    }

    #[test]
    fn mutated_sync_messages_never_panic(key in secret(), advert in advert(), bit in any::<usize>(), cut in any::<usize>()) {
        let envelope = Signed::sign(advert, &key).unwrap().into_envelope();
        let response = sync::SyncResponse::new(vec![envelope], false).encode();
        for mutated in mutations(&response, bit, cut) {
            let _ = sync::SyncResponse::decode(&mutated);
        }
        let request = sync::SyncRequest::new(None, DirectoryDigest::from_entries(vec![DigestEntry(key.node_id(), 1)])).encode();
        for mutated in mutations(&request, bit, cut) {
            let _ = sync::SyncRequest::decode(&mutated);
        }
    }

    #[test]
    fn task_messages_round_trip(text in "\\PC{0,200}", message in "[a-z0-9-]{1,40}", after in any::<u64>(), wait in any::<u32>(), settled in any::<bool>(), key in secret(), grant in grant(), seq in any::<u64>()) {
        let task = task::TaskId::derive("origin", &message);
        let signed = Signed::sign(grant, &key).unwrap().into_envelope();
        let submit = task::Submit {
            task,
            text: text.clone(),
            sender: task::Sender::Capsule { name: "relay".into(), grant: signed },
            capsule: "echo".into(),
            context: None,
            message: message.clone(),
            traceparent: None,
            settle_wait_ms: wait,
        };
        for request in [
            task::TaskRequest::Submit(submit),
            task::TaskRequest::Events { task, after, wait_ms: wait, settled },
            task::TaskRequest::Reply { task, text: text.clone() },
            task::TaskRequest::Cancel { task },
        ] {
            prop_assert_eq!(task::TaskRequest::decode(&request.encode()).unwrap(), request);
        }
        let snapshot = task::TaskSnapshot { seq, task, state: task::TaskState::Working, capsule: "echo".into(), context: message, message: Some(text) };
        let response = task::TaskResponse::Events { events: vec![task::TaskEvent { seq, text: None, state: task::TaskState::Failed }], snapshot, gap: true };
        prop_assert_eq!(task::TaskResponse::decode(&response.encode()).unwrap(), response);
    }

    #[test]
    fn mutated_task_messages_never_panic(key in secret(), grant in grant(), bit in any::<usize>(), cut in any::<usize>()) {
        let signed = Signed::sign(grant, &key).unwrap().into_envelope();
        let submit = task::TaskRequest::Submit(task::Submit {
            task: task::TaskId::derive("o", "m"),
            text: "hello".into(),
            sender: task::Sender::Capsule { name: "relay".into(), grant: signed },
            capsule: "echo".into(),
            context: Some("c".into()),
            message: "m".into(),
            traceparent: None,
            settle_wait_ms: 0,
        })
        .encode();
        for mutated in mutations(&submit, bit, cut) {
            let _ = task::TaskRequest::decode(&mutated);
            let _ = task::TaskResponse::decode(&mutated);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(env) = Envelope::decode(&bytes) {
            let _ = env.clone().open::<Advert>();
            let _ = env.clone().open::<Grant>();
            let _ = env.open::<NodeCert>();
        }
        let _ = DirectoryDigest::decode(&bytes);
        let _ = sync::SyncRequest::decode(&bytes);
        let _ = sync::SyncResponse::decode(&bytes);
        let _ = task::TaskRequest::decode(&bytes);
        let _ = task::TaskResponse::decode(&bytes);
        let _ = agent::AgentRequest::decode(&bytes);
        let _ = agent::AgentResponse::decode(&bytes);
    }

    #[test]
    fn agent_messages_round_trip_and_mutations_never_panic(
        to in "[a-z][a-z0-9-]{0,30}",
        from in "[a-z][a-z0-9_.]{0,30}",
        text in "\\PC{0,200}",
        bit in any::<usize>(),
        cut in any::<usize>(),
    ) {
        prop_assume!(to != agent::CLIENT_SENDER);
        let request = agent::AgentRequest::Message(agent::AgentMessage { to, from, text });
        let bytes = request.encode();
        prop_assert_eq!(agent::AgentRequest::decode(&bytes).unwrap(), request);
        for mutated in mutations(&bytes, bit, cut) {
            let _ = agent::AgentRequest::decode(&mutated);
            let _ = agent::AgentResponse::decode(&mutated);
        }
    }

    #[test]
    fn random_text_never_panics(text in "\\PC{0,80}") {
        let _ = text.parse::<PeerUrl>();
        let _ = text.parse::<AllowPattern>();
        let _ = text.parse::<PublicKey>();
        let _ = text.parse::<NodeId>();
        let _ = text.parse::<Digest>();
        let _ = text.parse::<agent::AgentAddress>();
    }

    #[test]
    fn random_cbor_shaped_input_never_panics(value in cbor_value(3)) {
        let bytes = murmur_protocol::codec::encode(&value);
        if let Ok(env) = Envelope::decode(&bytes) {
            let _ = env.open::<Advert>();
        }
    }
}

/// Random CBOR trees with the keys our documents use, so decoding gets past the first byte.
fn cbor_value(depth: u32) -> impl Strategy<Value = ciborium::Value> {
    use ciborium::Value;
    let key = prop_oneof![
        Just("v"),
        Just("sig"),
        Just("body"),
        Just("kind"),
        Just("signer"),
        Just("seq"),
        Just("capsules"),
        Just("name"),
        Just("ttl_ms"),
        Just("issued_at"),
    ];
    let leaf = prop_oneof![
        any::<u64>().prop_map(|n| Value::Integer(n.into())),
        proptest::collection::vec(any::<u8>(), 0..70).prop_map(Value::Bytes),
        "[a-z-]{0,12}".prop_map(Value::Text),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ];
    leaf.prop_recursive(depth, 64, 8, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|kv| Value::Map(kv.into_iter().map(|(k, v)| (Value::Text(k.into()), v)).collect())),
        ]
    })
}
