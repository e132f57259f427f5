use super::*;
use crate::advert::HostedCapsule;
use crate::cert::NodeCert;
use crate::identity::{SecretKey, Signature};
use crate::signed::Signed;

const T0: Millis = Millis(1_800_000_000_000);
const TTL_MS: u64 = 90_000;

fn key(n: u8) -> SecretKey {
    SecretKey::from_seed([n; 32])
}

fn advert(seq: u64, issued_at: Millis, capsules: &[&str]) -> Advert {
    let mut advert = Advert::new(seq, issued_at, TTL_MS);
    advert.capsules = capsules
        .iter()
        .map(|name| HostedCapsule { name: (*name).into(), digest: None, version: "1.0.0".into() })
        .collect();
    advert
}

fn signed(key: &SecretKey, advert: Advert) -> Envelope {
    Signed::sign(advert, key).unwrap().into_envelope()
}

fn gossip(from: u8) -> Source {
    Source::Gossip { from: key(from).node_id(), token: 0 }
}

fn drain(dir: &mut Directory) -> Vec<Output> {
    std::iter::from_fn(|| dir.poll_output()).collect()
}

/// Hosts as of T0 (time filtering has its own test below).
fn hosts(dir: &Directory, name: &str) -> Vec<NodeId> {
    dir.hosts(T0, name).map(|(r, _)| r.node()).collect()
}

#[test]
fn accepts_a_signed_advert_and_answers_who_hosts() {
    let mut dir = Directory::new(DirectoryConfig::default());
    dir.handle(
        T0,
        Input::Advert { envelope: signed(&key(1), advert(1, T0, &["echo", "wc"])), source: gossip(9) },
    );
    dir.handle(
        T0,
        Input::Advert { envelope: signed(&key(2), advert(1, T0, &["echo"])), source: Source::Local },
    );
    let outputs = drain(&mut dir);
    assert!(matches!(outputs[0], Output::Accepted { seq: 1, .. }));
    let mut expected = vec![key(1).node_id(), key(2).node_id()];
    expected.sort();
    assert_eq!(hosts(&dir, "echo"), expected);
    assert_eq!(hosts(&dir, "wc"), vec![key(1).node_id()]);
    assert!(hosts(&dir, "nope").is_empty());
    assert_eq!(dir.capsule_names().collect::<Vec<_>>(), ["echo", "wc"]);
    assert_eq!(dir.stats().accepted, 2);
}

#[test]
fn a_newer_advert_replaces_the_old_one_and_its_capsules() {
    let mut dir = Directory::new(DirectoryConfig::default());
    dir.insert(T0, signed(&key(1), advert(1, T0, &["echo"])), Source::Local).unwrap();
    dir.insert(T0.plus(10), signed(&key(1), advert(2, T0.plus(10), &["wc"])), Source::Local).unwrap();
    assert!(hosts(&dir, "echo").is_empty());
    assert_eq!(hosts(&dir, "wc"), vec![key(1).node_id()]);
    assert_eq!(dir.len(), 1);
}

#[test]
fn forged_stale_and_duplicate_adverts_are_refused_and_counted() {
    let mut dir = Directory::new(DirectoryConfig::default());
    dir.insert(T0, signed(&key(1), advert(5, T0, &["echo"])), Source::Local).unwrap();
    let before = hosts(&dir, "echo");

    // Node 1's envelope with node 2's signature spliced in: claims node 1, signed by node 2.
    let genuine = signed(&key(1), advert(6, T0, &["evil"]));
    let forger = signed(&key(2), advert(6, T0, &["evil"]));
    let mut forged_value: ciborium::Value = ciborium::de::from_reader(genuine.encode().as_slice()).unwrap();
    let forger_value: ciborium::Value = ciborium::de::from_reader(forger.encode().as_slice()).unwrap();
    let sig_of = |v: &ciborium::Value| {
        v.as_map().unwrap().iter().find(|(k, _)| k.as_text() == Some("sig")).unwrap().1.clone()
    };
    let forged_sig = sig_of(&forger_value);
    for (k, v) in forged_value.as_map_mut().unwrap() {
        if k.as_text() == Some("sig") {
            *v = forged_sig.clone();
        }
    }
    let forged = Envelope::decode(&codec::encode(&forged_value)).unwrap();
    assert_eq!(dir.insert(T0, forged, gossip(3)), Err(Refusal::BadSignature));
    assert_eq!(
        dir.insert(T0, signed(&key(1), advert(5, T0, &["x"])), gossip(3)),
        Err(Refusal::Duplicate { seq: 5 })
    );
    assert_eq!(
        dir.insert(T0, signed(&key(1), advert(4, T0, &["x"])), gossip(3)),
        Err(Refusal::Stale { seq: 4, held: 5 })
    );
    assert_eq!(hosts(&dir, "echo"), before, "refusals change nothing held");
    assert!(hosts(&dir, "evil").is_empty() && hosts(&dir, "x").is_empty());
    let refused = &dir.stats().refused;
    assert_eq!((refused["bad_signature"], refused["duplicate"], refused["stale"]), (1, 1, 1));
    assert!(Refusal::BadSignature.is_misbehaviour() && !Refusal::Stale { seq: 0, held: 1 }.is_misbehaviour());
}

#[test]
fn adverts_expire_after_their_ttl_and_replays_stay_out() {
    let mut dir = Directory::new(DirectoryConfig::default());
    let old = signed(&key(1), advert(1, T0, &["echo"]));
    dir.insert(T0, old.clone(), Source::Local).unwrap();
    assert_eq!(dir.poll_timeout(), Some(T0.plus(TTL_MS)));
    drain(&mut dir);

    dir.handle(T0.plus(TTL_MS - 1), Input::Tick);
    assert_eq!(dir.len(), 1);
    dir.handle(T0.plus(TTL_MS), Input::Tick);
    assert_eq!(drain(&mut dir), vec![Output::Expired { node: key(1).node_id() }]);
    assert!(hosts(&dir, "echo").is_empty());

    // Within the skew allowance the old advert would pass freshness; the tombstone stops it.
    assert_eq!(
        dir.insert(T0.plus(TTL_MS + 1), old.clone(), gossip(2)),
        Err(Refusal::Replayed { seq: 1, held: 1 })
    );
    // After the allowance, freshness alone stops it and the tombstone is gone.
    let later = T0.plus(TTL_MS + dir.config().clock_skew_max_ms);
    dir.handle(later, Input::Tick);
    assert_eq!(dir.poll_timeout(), None);
    assert!(matches!(dir.insert(later, old, gossip(2)), Err(Refusal::Expired { .. })));
    // A genuinely newer advert is welcome again.
    dir.insert(later, signed(&key(1), advert(2, later, &["echo"])), gossip(2)).unwrap();
}

#[test]
fn late_copies_never_outlive_their_issue_time_plus_ttl_and_skew() {
    let mut dir = Directory::new(DirectoryConfig::default());
    let received = T0.plus(TTL_MS);
    dir.insert(received, signed(&key(1), advert(1, T0, &["echo"])), Source::Local).unwrap();
    let record = dir.get(&key(1).node_id()).unwrap();
    assert_eq!(record.expires_at(), T0.plus(TTL_MS + dir.config().clock_skew_max_ms));
}

#[test]
fn adverts_from_the_future_are_refused() {
    let mut dir = Directory::new(DirectoryConfig::default());
    let ahead = T0.plus(dir.config().clock_skew_max_ms + 1);
    assert_eq!(
        dir.insert(T0, signed(&key(1), advert(1, ahead, &["echo"])), gossip(2)),
        Err(Refusal::FromFuture { ahead_ms: 30_001 })
    );
}

#[test]
fn ttls_are_clamped_to_the_configured_maximum() {
    let config = DirectoryConfig { ttl_max_ms: 10_000, ..DirectoryConfig::default() };
    let mut dir = Directory::new(config);
    dir.insert(T0, signed(&key(1), advert(1, T0, &["echo"])), Source::Local).unwrap();
    assert_eq!(dir.poll_timeout(), Some(T0.plus(10_000)));
}

#[test]
fn closed_mesh_admits_only_certified_nodes() {
    let authority = key(100);
    let config = DirectoryConfig {
        admission: Admission::Closed { authorities: vec![authority.public()] },
        ..DirectoryConfig::default()
    };
    let mut dir = Directory::new(config);
    let cert_for = |node: &SecretKey, issuer: &SecretKey| {
        Signed::sign(NodeCert::new(node.node_id(), 1, T0, T0.plus(86_400_000)), issuer)
            .unwrap()
            .into_envelope()
    };

    let uncertified = advert(1, T0, &["echo"]);
    let err = dir.insert(T0, signed(&key(1), uncertified), gossip(9)).unwrap_err();
    assert!(err.to_string().contains("no node certificate"), "{err}");

    let mut self_certified = advert(1, T0, &["echo"]);
    self_certified.cert = Some(cert_for(&key(1), &key(1)));
    let err = dir.insert(T0, signed(&key(1), self_certified), gossip(9)).unwrap_err();
    assert!(err.to_string().contains("not a trusted authority"), "{err}");

    let mut borrowed = advert(1, T0, &["echo"]);
    borrowed.cert = Some(cert_for(&key(2), &authority));
    let err = dir.insert(T0, signed(&key(1), borrowed), gossip(9)).unwrap_err();
    assert!(err.to_string().contains("is for"), "{err}");

    let mut certified = advert(1, T0, &["echo"]);
    certified.cert = Some(cert_for(&key(1), &authority));
    dir.insert(T0, signed(&key(1), certified), gossip(9)).unwrap();
    assert_eq!(dir.stats().refused["not_admitted"], 3);
}

#[test]
fn a_full_directory_refuses_new_nodes_but_updates_known_ones() {
    let config = DirectoryConfig { nodes_max: 2, ..DirectoryConfig::default() };
    let mut dir = Directory::new(config);
    dir.insert(T0, signed(&key(1), advert(1, T0, &[])), Source::Local).unwrap();
    dir.insert(T0, signed(&key(2), advert(1, T0, &[])), Source::Local).unwrap();
    assert_eq!(
        dir.insert(T0, signed(&key(3), advert(1, T0, &[])), gossip(3)),
        Err(Refusal::Full { nodes_max: 2 })
    );
    dir.insert(T0, signed(&key(2), advert(2, T0, &[])), gossip(3)).unwrap();
}

#[test]
fn anti_entropy_sends_exactly_what_the_peer_lacks() {
    let mut a = Directory::new(DirectoryConfig::default());
    let mut b = Directory::new(DirectoryConfig::default());
    for n in 1..=5 {
        a.insert(T0, signed(&key(n), advert(2, T0, &["echo"])), Source::Local).unwrap();
    }
    b.insert(T0, signed(&key(1), advert(2, T0, &["echo"])), Source::Local).unwrap();
    b.insert(T0, signed(&key(2), advert(1, T0, &["echo"])), Source::Local).unwrap();
    b.insert(T0, signed(&key(9), advert(1, T0, &["echo"])), Source::Local).unwrap();

    let digest = DirectoryDigest::decode(&b.digest().encode()).unwrap();
    let (missing, more) = a.missing_for(&digest, 100, usize::MAX);
    let mut nodes: Vec<NodeId> = missing.iter().map(|e| NodeId::from_key(e.signer())).collect();
    nodes.sort();
    let mut expected: Vec<NodeId> = [2, 3, 4, 5].iter().map(|n| key(*n).node_id()).collect();
    expected.sort();
    assert_eq!((nodes, more), (expected, false));
    assert!(a.missing_for(&digest, 2, usize::MAX).1);

    for envelope in missing {
        b.insert(T0, envelope, Source::Sync { from: key(100).node_id() }).unwrap();
    }
    assert_eq!(a.missing_for(&b.digest(), 100, usize::MAX).0.len(), 0);
    assert_ne!(a.digest().fingerprint(), b.digest().fingerprint(), "b also holds node 9");
}

#[test]
fn a_newcomer_paging_through_the_directory_gets_what_changed_last_first() {
    let mut dir = Directory::new(DirectoryConfig::default());
    for n in 1..=6 {
        dir.insert(T0, signed(&key(n), advert(1, T0, &["echo"])), Source::Local).unwrap();
    }
    // Node 5 changes later, then node 2: the two adverts still spreading.
    let (t1, t2) = (T0.plus(1_000), T0.plus(2_000));
    dir.insert(t1, signed(&key(5), advert(2, t1, &["echo", "wc"])), gossip(9)).unwrap();
    dir.insert(t2, signed(&key(2), advert(2, t2, &["wc"])), gossip(9)).unwrap();
    let nodes = |page: &[Envelope]| page.iter().map(|e| NodeId::from_key(e.signer())).collect::<Vec<_>>();

    let (page, more) = dir.missing_for(&DirectoryDigest::default(), 3, usize::MAX);
    let older = [1, 3, 4, 6].map(|n| key(n).node_id());
    assert!(more);
    assert_eq!(nodes(&page)[..2], [key(2).node_id(), key(5).node_id()], "newest first");
    assert!(older.contains(&nodes(&page)[2]), "then one of the others");
    // The byte budget cuts the page in the same order.
    let one = page[0].body().len() + ENVELOPE_OVERHEAD_MAX;
    let (page, more) = dir.missing_for(&DirectoryDigest::default(), 3, one);
    assert_eq!((nodes(&page), more), (vec![key(2).node_id()], true));
    // What fits whole comes in node order, as before.
    let (page, more) = dir.missing_for(&DirectoryDigest::default(), 6, usize::MAX);
    let mut sorted = nodes(&page);
    sorted.sort();
    assert_eq!((nodes(&page), more), (sorted, false));
}

#[test]
fn digests_must_be_sorted_and_unique() {
    let n1 = key(1).node_id();
    let n2 = key(2).node_id();
    let (lo, hi) = if n1 < n2 { (n1, n2) } else { (n2, n1) };
    let unsorted = DirectoryDigest { entries: vec![DigestEntry(hi, 1), DigestEntry(lo, 1)] };
    assert!(DirectoryDigest::decode(&unsorted.encode()).is_err());
    let dup = DirectoryDigest { entries: vec![DigestEntry(lo, 1), DigestEntry(lo, 2)] };
    assert!(DirectoryDigest::decode(&dup.encode()).is_err());
    let built =
        DirectoryDigest::from_entries(vec![DigestEntry(hi, 1), DigestEntry(lo, 1), DigestEntry(lo, 3)]);
    assert_eq!(built.entries(), &[DigestEntry(lo, 3), DigestEntry(hi, 1)]);
}

#[test]
fn queries_never_show_an_expired_record_even_before_the_tick() {
    let mut dir = Directory::new(DirectoryConfig::default());
    dir.insert(T0, signed(&key(1), advert(1, T0, &["echo"])), Source::Local).unwrap();
    let expiry = T0.plus(TTL_MS);
    assert_eq!(dir.hosts(expiry.minus(1), "echo").count(), 1);
    assert_eq!(dir.hosts(expiry, "echo").count(), 0, "no Tick yet, but already expired");
    assert_eq!(dir.records(expiry).count(), 0);
    assert_eq!(dir.len(), 1, "still stored until the driver ticks");
}

#[test]
fn identical_bytes_are_a_duplicate_without_decoding() {
    let mut dir = Directory::new(DirectoryConfig::default());
    let env = signed(&key(1), advert(3, T0, &["echo"]));
    dir.insert(T0, env.clone(), Source::Local).unwrap();
    assert_eq!(dir.insert(T0, env, gossip(2)), Err(Refusal::Duplicate { seq: 3 }));
}

/// A notice from `witness` that `subject`'s advert `seq` departed, naming the advert `dir`
/// holds for it by its signature (a made-up one when `dir` holds another seq).
fn notice(dir: &Directory, witness: u8, subject: u8, seq: u64, at: Millis) -> Envelope {
    let node = key(subject).node_id();
    let held = dir.get(&node).filter(|r| r.advert().seq == seq).map(|r| *r.envelope().signature());
    named(witness, subject, seq, held.unwrap_or(Signature([7; 64])), at)
}

/// A notice naming the advert with `signature`.
fn named(witness: u8, subject: u8, seq: u64, signature: Signature, at: Millis) -> Envelope {
    let notice = Departure::new(key(subject).node_id(), seq, signature, at);
    Signed::sign(notice, &key(witness)).unwrap().into_envelope()
}

/// A directory holding nodes 1 (echo, seq 5) and 2 (wc, seq 1).
fn two_nodes() -> Directory {
    let mut dir = Directory::new(DirectoryConfig::default());
    dir.insert(T0, signed(&key(1), advert(5, T0, &["echo"])), gossip(9)).unwrap();
    dir.insert(T0, signed(&key(2), advert(1, T0, &["wc"])), gossip(9)).unwrap();
    drain(&mut dir);
    dir
}

#[test]
fn a_departure_notice_drops_the_advert_and_its_replays() {
    let mut dir = two_nodes();
    let now = T0.plus(1_000);
    let departure = notice(&dir, 2, 1, 5, now);
    assert_eq!(dir.depart(now, &departure, gossip(2)), Ok(key(1).node_id()));
    assert!(hosts(&dir, "echo").is_empty());
    assert_eq!(dir.len(), 1);
    assert_eq!(dir.stats().departed, 1);
    assert!(matches!(drain(&mut dir)[..], [Output::Departed { seq: 5, .. }]));
    // The departed advert cannot come back; a newer one (a restart, a refutation) can.
    let replay = dir.insert(now, signed(&key(1), advert(5, T0, &["echo"])), gossip(3));
    assert_eq!(replay, Err(Refusal::Replayed { seq: 5, held: 5 }));
    // The same notice again is a duplicate.
    assert_eq!(dir.depart(now, &departure, gossip(3)), Err(Refusal::Duplicate { seq: 5 }));
    assert_eq!(dir.insert(now, signed(&key(1), advert(6, now, &["echo"])), gossip(3)), Ok(6));
    assert_eq!(hosts(&dir, "echo"), vec![key(1).node_id()]);
}

#[test]
fn departure_notices_that_do_not_hold_change_nothing() {
    let now = T0.plus(1_000);
    let held = two_nodes();
    let cases: Vec<(Envelope, Refusal)> = vec![
        // The node republished since the witness last saw it.
        (notice(&held, 2, 1, 4, now), Refusal::Stale { seq: 4, held: 5 }),
        // A witness nobody knows.
        (notice(&held, 7, 1, 5, now), Refusal::UnknownWitness),
        // A node nobody knows.
        (notice(&held, 2, 8, 5, now), Refusal::NotHeld),
        // An advert the node has not published (yet): a notice never reaches ahead.
        (notice(&held, 2, 1, 6, now), Refusal::NotHeld),
        // The held sequence number, but another advert: a lie.
        (named(2, 1, 5, Signature([7; 64]), now), Refusal::WrongAdvert { seq: 5 }),
        // Signed too far in the future, or too long ago.
        (notice(&held, 2, 1, 5, now.plus(3_600_000)), Refusal::FromFuture { ahead_ms: 3_600_000 }),
        (
            notice(&held, 2, 1, 5, Millis(now.0 - 2 * crate::limits::ADVERT_TTL_MS_MAX)),
            Refusal::Expired { valid_until: Millis(now.0 - crate::limits::ADVERT_TTL_MS_MAX) },
        ),
        // Not a notice at all.
        (signed(&key(2), advert(9, now, &[])), Refusal::Malformed(String::new())),
    ];
    for (envelope, expected) in cases {
        let mut dir = two_nodes();
        let refused = dir.depart(now, &envelope, gossip(2)).unwrap_err();
        assert_eq!(refused.reason(), expected.reason(), "{refused}");
        if !matches!(expected, Refusal::Malformed(_)) {
            assert_eq!(refused, expected);
        }
        assert_eq!((dir.len(), hosts(&dir, "echo").len()), (2, 1), "{expected} changed nothing");
    }
    // A forged signature: witness 2's notice with one signature bit flipped.
    let mut dir = two_nodes();
    let genuine = notice(&dir, 2, 1, 5, now);
    let mut bytes = genuine.encode();
    let sig = genuine.signature().0;
    let at = bytes.windows(64).position(|w| w == sig).unwrap();
    bytes[at] ^= 1;
    let tampered = Envelope::decode(&bytes).unwrap();
    assert_eq!(dir.depart(now, &tampered, gossip(2)), Err(Refusal::BadSignature));
    assert_eq!(dir.len(), 2);
    // A node may announce its own departure.
    assert!(dir.depart(now, &notice(&dir, 1, 1, 5, now), gossip(2)).is_ok());
}

#[test]
fn notices_go_to_peers_whose_digest_still_lists_the_departed_advert() {
    let mut dir = two_nodes();
    let stale_peer = dir.digest();
    let now = T0.plus(1_000);
    let departure = notice(&dir, 2, 1, 5, now);
    let departed = dir.get(&key(1).node_id()).unwrap().envelope().clone();
    dir.depart(now, &departure, gossip(2)).unwrap();
    assert_eq!(dir.notices_for(&stale_peer, 16), vec![(departure.clone(), None)]);
    // A peer holding an older advert gets the departed one too, or the notice (which names
    // exactly that advert) could never apply there.
    let older = DirectoryDigest::from_entries(vec![DigestEntry(key(1).node_id(), 4)]);
    assert_eq!(dir.notices_for(&older, 16), vec![(departure, Some(departed))]);
    // A peer that already dropped it, or holds a newer advert, gets nothing.
    assert!(dir.notices_for(&dir.digest(), 16).is_empty());
    let newer = DirectoryDigest::from_entries(vec![DigestEntry(key(1).node_id(), 6)]);
    assert!(dir.notices_for(&newer, 16).is_empty());
}

#[test]
fn a_directory_on_a_shared_base_sees_the_base_and_keeps_its_own_changes() {
    let seed = two_nodes();
    let base = seed.freeze();
    let config = DirectoryConfig::default();
    let mut a = Directory::with_base(config.clone(), Arc::new(Ed25519Verifier), base.clone());
    let b = Directory::with_base(config, Arc::new(Ed25519Verifier), base.clone());
    assert_eq!((a.len(), b.len(), base.len()), (2, 2, 2));
    assert_eq!(a.digest(), seed.digest());
    assert_eq!(hosts(&a, "echo"), vec![key(1).node_id()]);
    // `a` replaces node 1's advert, drops node 2's and adds node 3's; `b` is untouched.
    let now = T0.plus(1_000);
    a.insert(now, signed(&key(1), advert(6, now, &["wc"])), gossip(9)).unwrap();
    a.depart(now, &notice(&a, 1, 2, 1, now), gossip(1)).unwrap();
    a.insert(now, signed(&key(3), advert(1, now, &["echo"])), gossip(9)).unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(hosts(&a, "echo"), vec![key(3).node_id()]);
    assert_eq!(hosts(&a, "wc"), vec![key(1).node_id()]);
    let mut expected = [DigestEntry(key(1).node_id(), 6), DigestEntry(key(3).node_id(), 1)];
    expected.sort();
    assert_eq!(a.digest().entries(), &expected[..]);
    let mut shadowed = vec![key(1).node_id(), key(2).node_id()];
    shadowed.sort();
    assert_eq!(a.shadowed().copied().collect::<Vec<_>>(), shadowed);
    assert_eq!(a.own_records().count(), 2);
    assert!(Arc::ptr_eq(a.base(), b.base()));
    assert_eq!(b.digest(), seed.digest());
    assert_eq!(hosts(&b, "echo"), vec![key(1).node_id()]);
    // Base adverts expire like any other, once per directory.
    let mut c = Directory::with_base(DirectoryConfig::default(), Arc::new(Ed25519Verifier), base);
    assert_eq!(c.poll_timeout(), Some(T0.plus(TTL_MS)));
    c.handle(T0.plus(TTL_MS), Input::Tick);
    assert!(c.is_empty());
    assert_eq!(c.stats().expired, 2);
}

#[test]
fn a_notice_naming_a_sequence_ahead_of_the_node_never_buries_its_next_adverts() {
    // A witness signs a departure notice for a sequence number its subject has not reached (u64::MAX):
    // were it applied, the tombstone would refuse every advert the node publishes next.
    let mut dir = two_nodes();
    let now = T0.plus(1_000);
    assert_eq!(dir.depart(now, &notice(&dir, 2, 1, u64::MAX, now), gossip(2)), Err(Refusal::NotHeld));
    // Nor can one be placed in advance for the node's next advert: it names an advert by
    // its signature, which nobody knows before the node signs it.
    assert_eq!(dir.depart(now, &notice(&dir, 2, 1, 6, now), gossip(2)), Err(Refusal::NotHeld));
    assert_eq!(hosts(&dir, "echo"), vec![key(1).node_id()], "nothing dropped");
    // The node's next advert is taken; the parked notice, judged again, still names an
    // advert the node never published.
    assert_eq!(dir.insert(now, signed(&key(1), advert(6, now, &["echo"])), gossip(3)), Ok(6));
    assert_eq!(hosts(&dir, "echo"), vec![key(1).node_id()]);
    // A notice for exactly seq 6 drops it, and only seq 6 stays refused.
    dir.depart(now, &notice(&dir, 2, 1, 6, now), gossip(2)).unwrap();
    assert!(hosts(&dir, "echo").is_empty());
    assert_eq!(dir.insert(now, signed(&key(1), advert(7, now, &["echo"])), gossip(3)), Ok(7));
}

#[test]
fn a_parked_notice_applies_when_the_advert_it_names_arrives() {
    let mut dir = two_nodes();
    let now = T0.plus(1_000);
    // Node 3's departure is heard of before its advert (a newcomer filling its directory).
    let late = signed(&key(3), advert(4, T0, &["late"]));
    let departure = named(2, 3, 4, *late.signature(), now);
    assert_eq!(dir.depart(now, &departure, gossip(2)), Err(Refusal::NotHeld));
    dir.insert(now, late, gossip(5)).unwrap();
    assert!(hosts(&dir, "late").is_empty(), "the parked notice dropped it on arrival");
    assert_eq!(dir.stats().departed, 1);
    // Parked notices expire.
    let later = signed(&key(4), advert(1, now, &["later"]));
    let departure = named(2, 4, 1, *later.signature(), now);
    assert_eq!(dir.depart(now, &departure, gossip(2)), Err(Refusal::NotHeld));
    dir.handle(now.plus(PENDING_NOTICE_MS), Input::Tick);
    dir.insert(now.plus(PENDING_NOTICE_MS), later, gossip(5)).unwrap();
    assert_eq!(
        dir.hosts(now.plus(PENDING_NOTICE_MS), "later").count(),
        1,
        "the expired notice was not applied"
    );
}

#[test]
fn bucket_reads_agree_with_a_full_scan_on_a_shared_base_too() {
    use crate::sync::{Buckets, Scope};
    // 40 nodes in the base; the directory replaces one, drops one and adds one of its own.
    let mut seed = Directory::new(DirectoryConfig::default());
    for n in 1..=40 {
        seed.insert(T0, signed(&key(n), advert(1, T0, &["echo"])), gossip(99)).unwrap();
    }
    let base = seed.freeze();
    let mut dir = Directory::with_base(DirectoryConfig::default(), Arc::new(Ed25519Verifier), base);
    let now = T0.plus(1_000);
    dir.insert(now, signed(&key(5), advert(2, now, &["wc"])), gossip(99)).unwrap();
    dir.depart(now, &notice(&dir, 1, 9, 1, now), gossip(1)).unwrap();
    dir.insert(now, signed(&key(41), advert(1, now, &["echo"])), gossip(99)).unwrap();
    let full = dir.digest();
    for count in [1, 4, 16] {
        let buckets = Buckets::new(7, count);
        let summary = dir.summary(&buckets);
        let all: Vec<u32> = (0..buckets.count()).collect();
        for &bucket in &all {
            assert_eq!(dir.bucket_sum(&buckets, bucket), summary.sums[bucket as usize]);
            // The digest of one bucket is the full digest's entries in that bucket.
            let scope = Scope::new(buckets, vec![bucket]);
            let expected: Vec<DigestEntry> =
                full.entries().iter().filter(|e| buckets.bucket(&e.0) == bucket).copied().collect();
            assert_eq!(dir.digest_in(&scope).entries(), &expected[..]);
            // What a peer holding nothing lacks in that bucket is exactly its adverts.
            let (missing, more) = dir.missing_in(&DirectoryDigest::default(), Some(&scope), 100, usize::MAX);
            assert!(!more);
            assert_eq!(missing.len(), expected.len());
            assert_eq!(dir.adverts_in(&scope, 100).map(|a| a.len()), Some(expected.len()));
        }
        // Scoped to every bucket, it is the whole digest.
        assert_eq!(dir.digest_in(&Scope::new(buckets, all)), full);
    }
    assert_eq!(dir.adverts_in(&Scope::new(Buckets::new(7, 1), vec![0]), 10), None, "more than 10");
}

/// An advert of node `n` issued at `issued_at`, claiming address `addr`.
fn at(n: u8, issued_at: Millis, addr: &str) -> Envelope {
    let mut advert = advert(1, issued_at, &[]);
    advert.addrs = vec![addr.into()];
    signed(&key(n), advert)
}

fn later(ms: u64) -> Millis {
    T0.plus(ms)
}

#[test]
fn a_full_directory_evicts_the_least_recently_refreshed_node_for_a_fresher_one() {
    // 16,384 long-TTL adverts minted once used to fill a directory for a day, refusing
    // every honest newcomer as "full".
    let config = DirectoryConfig { nodes_max: 3, ..DirectoryConfig::default() };
    let mut dir = Directory::new(config);
    dir.insert(T0, at(1, T0, "/ip4/10.0.1.1/tcp/1"), gossip(9)).unwrap();
    dir.insert(T0, at(2, later(10), "/ip4/10.0.2.1/tcp/1"), gossip(9)).unwrap();
    dir.insert(T0, at(3, later(20), "/ip4/10.0.3.1/tcp/1"), gossip(9)).unwrap();
    drain(&mut dir);
    // Issued no later than the stalest held: refused, nothing changes.
    assert_eq!(
        dir.insert(later(30), at(4, T0, "/ip4/10.0.4.1/tcp/1"), gossip(9)),
        Err(Refusal::Full { nodes_max: 3 })
    );
    assert_eq!(dir.len(), 3);
    // Fresher: node 1, refreshed least recently, makes room.
    dir.insert(later(30), at(5, later(30), "/ip4/10.0.5.1/tcp/1"), gossip(9)).unwrap();
    assert!(dir.get(&key(1).node_id()).is_none());
    assert!(dir.get(&key(5).node_id()).is_some());
    assert_eq!(dir.len(), 3);
    assert_eq!(
        drain(&mut dir)[1..],
        [
            Output::Evicted { node: key(1).node_id(), by: key(5).node_id() },
            Output::Accepted { node: key(5).node_id(), seq: 1, source: gossip(9) },
        ]
    );
    assert_eq!(dir.stats().evicted, 1);
    // Node 1's record coming back as it was is refused; a refresh of it is fresher.
    assert!(dir.insert(later(40), at(1, T0, "/ip4/10.0.1.1/tcp/1"), gossip(9)).is_err());
    let mut refreshed = advert(2, later(40), &[]);
    refreshed.addrs = vec!["/ip4/10.0.1.1/tcp/1".into()];
    dir.insert(later(40), signed(&key(1), refreshed), gossip(9)).unwrap();
    assert!(dir.get(&key(2).node_id()).is_none(), "node 2 was the stalest");
}

#[test]
fn connected_nodes_and_our_own_advert_are_never_evicted() {
    let config = DirectoryConfig { nodes_max: 3, ..DirectoryConfig::default() };
    let mut dir = Directory::new(config);
    dir.insert(T0, at(1, T0, "/ip4/10.0.1.1/tcp/1"), Source::Local).unwrap();
    dir.insert(T0, at(2, T0, "/ip4/10.0.2.1/tcp/1"), gossip(2)).unwrap();
    dir.anchor(key(2).node_id(), true);
    dir.insert(T0, at(3, later(10), "/ip4/10.0.3.1/tcp/1"), gossip(9)).unwrap();
    // The stalest evictable record is node 3's, however fresh node 1 and 2 are not.
    dir.insert(later(20), at(4, later(20), "/ip4/10.0.4.1/tcp/1"), gossip(9)).unwrap();
    assert!(dir.get(&key(3).node_id()).is_none());
    assert!(dir.get(&key(1).node_id()).is_some() && dir.get(&key(2).node_id()).is_some());
    // A connected newcomer gets in even when it is staler than everything held.
    dir.anchor(key(5).node_id(), true);
    dir.insert(later(20), at(5, T0, "/ip4/10.0.5.1/tcp/1"), gossip(5)).unwrap();
    assert!(dir.get(&key(4).node_id()).is_none());
    // Once every record is anchored or our own, a newcomer is refused.
    assert_eq!(
        dir.insert(later(30), at(6, later(30), "/ip4/10.0.6.1/tcp/1"), gossip(9)),
        Err(Refusal::Full { nodes_max: 3 })
    );
    // Disconnected, node 2 may be evicted again.
    dir.anchor(key(2).node_id(), false);
    dir.insert(later(30), at(6, later(30), "/ip4/10.0.6.1/tcp/1"), gossip(9)).unwrap();
    assert!(dir.get(&key(2).node_id()).is_none());
}

#[test]
fn one_address_range_and_one_peer_place_a_bounded_number_of_nodes() {
    let config = DirectoryConfig { range_max: 2, peer_max: 3, ..DirectoryConfig::default() };
    let mut dir = Directory::new(config);
    dir.insert(T0, at(1, T0, "/ip4/10.0.7.1/tcp/1"), gossip(8)).unwrap();
    dir.insert(T0, at(2, T0, "/ip4/10.0.7.200/udp/1/quic-v1"), gossip(9)).unwrap();
    // A third node claiming 10.0.7.0/24, whoever delivers it.
    assert_eq!(
        dir.insert(T0, at(3, T0, "/ip4/10.0.7.3/tcp/1"), gossip(7)),
        Err(Refusal::RangeFull { range_max: 2 })
    );
    // Refreshes of held nodes are not new nodes; a connected node is not bounded.
    let mut refresh = advert(2, later(1), &[]);
    refresh.addrs = vec!["/ip4/10.0.7.1/tcp/1".into()];
    dir.insert(later(1), signed(&key(1), refresh), gossip(8)).unwrap();
    dir.anchor(key(3).node_id(), true);
    dir.insert(T0, at(3, T0, "/ip4/10.0.7.3/tcp/1"), gossip(7)).unwrap();
    // IPv6 ranges are /48s, DNS names their last two labels.
    dir.insert(T0, at(4, T0, "/ip6/2001:db8:1:2::1/tcp/1"), gossip(6)).unwrap();
    dir.insert(T0, at(5, T0, "/ip6/2001:db8:1:ffff::9/tcp/1"), gossip(6)).unwrap();
    assert_eq!(
        dir.insert(T0, at(6, T0, "/ip6/2001:db8:1::7/tcp/1"), gossip(5)),
        Err(Refusal::RangeFull { range_max: 2 })
    );
    dir.insert(T0, at(6, T0, "/ip6/2001:db8:2::7/tcp/1"), gossip(5)).unwrap();
    dir.insert(T0, at(10, T0, "/dns4/a.example.org/tcp/1"), gossip(5)).unwrap();
    dir.insert(T0, at(11, T0, "/dns4/b.Example.org./tcp/1"), gossip(4)).unwrap();
    assert_eq!(
        dir.insert(T0, at(12, T0, "/dns/c.d.example.org/tcp/1"), gossip(3)),
        Err(Refusal::RangeFull { range_max: 2 })
    );
    // Peer 5 delivered nodes 6 and 10; a third is its last.
    dir.insert(T0, at(13, T0, "/ip4/10.1.0.1/tcp/1"), gossip(5)).unwrap();
    assert_eq!(
        dir.insert(T0, at(14, T0, "/ip4/10.2.0.1/tcp/1"), gossip(5)),
        Err(Refusal::PeerFull { peer_max: 3 })
    );
    assert_eq!(dir.stats().refused["range_full"], 3);
    assert_eq!(dir.stats().refused["peer_full"], 1);
    // The nodes refused changed nothing held.
    for n in [12, 14] {
        assert!(dir.get(&key(n).node_id()).is_none());
    }
}

#[test]
fn eviction_and_bounds_count_records_of_a_shared_base() {
    let config = DirectoryConfig { nodes_max: 3, range_max: 2, ..DirectoryConfig::default() };
    let mut seed = Directory::new(config.clone());
    seed.insert(T0, at(1, T0, "/ip4/10.0.9.1/tcp/1"), gossip(9)).unwrap();
    seed.insert(T0, at(2, later(5), "/ip4/10.0.9.2/tcp/1"), gossip(9)).unwrap();
    let base = seed.freeze();
    let mut dir = Directory::with_base(config, Arc::new(Ed25519Verifier), base);
    assert_eq!(
        dir.insert(T0, at(3, T0, "/ip4/10.0.9.3/tcp/1"), gossip(8)),
        Err(Refusal::RangeFull { range_max: 2 })
    );
    dir.insert(T0, at(3, later(10), "/ip4/10.0.8.3/tcp/1"), gossip(8)).unwrap();
    // Full: the base's node 1 is the stalest; evicting it frees a place in its range too.
    dir.insert(later(20), at(4, later(20), "/ip4/10.0.9.4/tcp/1"), gossip(8)).unwrap();
    assert!(dir.get(&key(1).node_id()).is_none() && dir.shadows(&key(1).node_id()));
    assert_eq!(dir.len(), 3);
}

#[test]
fn a_drained_burst_gives_back_its_output_capacity() {
    let mut dir = Directory::new(DirectoryConfig::default());
    for n in 0..250u8 {
        dir.handle(
            T0,
            Input::Advert { envelope: signed(&key(n), advert(1, T0, &[])), source: Source::Local },
        );
    }
    assert!(dir.outputs.capacity() >= 250);
    assert_eq!(drain(&mut dir).len(), 250);
    // Kept: a node of a 10,000-node mesh receives a burst like this from every sync.
    assert!(dir.outputs.capacity() <= crate::limits::OUTPUTS_KEPT, "{}", dir.outputs.capacity());
}
