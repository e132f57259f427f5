use super::*;
use crate::identity::SecretKey;
use crate::verify::Ed25519Verifier;

const T0: Millis = Millis(1_800_000_000_000);

fn authority() -> SecretKey {
    SecretKey::from_seed([21; 32])
}

fn node(n: u8) -> NodeId {
    SecretKey::from_seed([n; 32]).node_id()
}

fn list(seq: u64, nodes: Vec<NodeId>, grants: Vec<u64>, key: &SecretKey) -> Envelope {
    Signed::sign(Revocation::new(seq, T0, nodes, grants), key).unwrap().into_envelope()
}

fn store() -> Revocations {
    Revocations::new(vec![authority().public()], Plants::NONE)
}

#[test]
fn a_list_revokes_its_authoritys_grants_and_any_node_it_names() {
    let env = list(1, vec![node(2)], vec![7, 9], &authority());
    crate::codec::tests::assert_canonical_key_order(env.body());
    let mut revs = store();
    let taken = revs.insert(env, &Ed25519Verifier).unwrap();
    assert_eq!((taken.seq, taken.nodes.clone(), taken.grants), (1, vec![node(2)], 2));
    assert_eq!(revs.grant_revoked(&authority().public(), 7), Some(1));
    assert_eq!(revs.grant_revoked(&authority().public(), 8), None);
    // Serials are the issuer's own: the same serial of another authority is untouched.
    assert_eq!(revs.grant_revoked(&SecretKey::from_seed([22; 32]).public(), 7), None);
    assert_eq!(revs.node_revoked(&node(2)), Some((authority().public(), 1)));
    assert_eq!(revs.node_revoked(&node(3)), None);
}

#[test]
fn a_newer_list_replaces_the_old_and_older_copies_change_nothing() {
    let mut revs = store();
    revs.insert(list(2, vec![node(2)], vec![7], &authority()), &Ed25519Verifier).unwrap();
    // An authority may take an entry back (a mistaken revocation) with a newer list.
    let taken = revs.insert(list(3, vec![node(3)], vec![], &authority()), &Ed25519Verifier).unwrap();
    assert_eq!(taken.nodes, vec![node(3)], "only what is newly revoked");
    assert_eq!(revs.node_revoked(&node(2)), None);
    assert_eq!(revs.grant_revoked(&authority().public(), 7), None);
    for seq in [1, 3] {
        let err = revs.insert(list(seq, vec![node(2)], vec![7], &authority()), &Ed25519Verifier).unwrap_err();
        assert_eq!(err.reason(), "not_newer");
        assert!(!err.is_invalid());
    }
    assert_eq!(revs.seen(), vec![(authority().public(), 3)]);
}

#[test]
fn lists_from_untrusted_or_tampered_signers_are_refused_and_change_nothing() {
    let mut revs = store();
    let stranger = SecretKey::from_seed([23; 32]);
    let err = revs.insert(list(1, vec![node(2)], vec![], &stranger), &Ed25519Verifier).unwrap_err();
    assert_eq!(err.reason(), "untrusted_issuer");
    assert!(!err.is_invalid(), "an authority we do not trust may be someone else's");
    let env = list(1, vec![node(2)], vec![5], &authority());
    let mut bytes = env.encode();
    let last = bytes.len() - 40;
    bytes[last] ^= 1;
    if let Ok(tampered) = Envelope::decode(&bytes) {
        let err = revs.insert(tampered, &Ed25519Verifier).unwrap_err();
        assert!(err.is_invalid(), "{err}");
    }
    assert!(revs.is_empty());
    assert_eq!(revs.node_revoked(&node(2)), None);
}

#[test]
fn lists_are_bounded_and_canonical() {
    let too_many: Vec<NodeId> = (0..=REVOCATION_NODES_MAX as u32)
        .map(|i| {
            let mut seed = [0; 32];
            seed[..4].copy_from_slice(&i.to_le_bytes());
            SecretKey::from_seed(seed).node_id()
        })
        .collect();
    assert!(Signed::sign(Revocation::new(1, T0, too_many, vec![]), &authority()).is_err());
    let mut unsorted = Revocation::new(1, T0, vec![], vec![3, 1]);
    assert_eq!(unsorted.grants, vec![1, 3], "new() sorts");
    unsorted.grants = vec![3, 1];
    assert!(Signed::sign(unsorted, &authority()).is_err());
    assert!(Signed::sign(Revocation::new(0, T0, vec![], vec![]), &authority()).is_err());
    // The largest list fits an envelope.
    let nodes: Vec<NodeId> = (0..REVOCATION_NODES_MAX as u32)
        .map(|i| {
            let mut seed = [1; 32];
            seed[..4].copy_from_slice(&i.to_le_bytes());
            SecretKey::from_seed(seed).node_id()
        })
        .collect();
    let grants: Vec<u64> = (0..REVOCATION_GRANTS_MAX as u64).map(|i| u64::MAX - i).collect();
    let env =
        Signed::sign(Revocation::new(u64::MAX, T0, nodes, grants), &authority()).unwrap().into_envelope();
    assert!(Envelope::decode(&env.encode()).is_ok());
}

#[test]
fn a_peer_is_sent_only_the_lists_it_lacks() {
    let mut revs = store();
    revs.insert(list(4, vec![], vec![1], &authority()), &Ed25519Verifier).unwrap();
    let a = authority().public();
    assert_eq!(revs.newer_than(&[]).len(), 1);
    assert_eq!(revs.newer_than(&[(a, 3)]).len(), 1);
    assert!(revs.newer_than(&[(a, 4)]).is_empty());
    assert!(revs.newer_than(&[(a, 9)]).is_empty());
}
