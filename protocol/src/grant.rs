//! Capability grants: signed allowlists saying what one capsule may do.
//!
//! An authority the node trusts signs a grant for a capsule (optionally pinned to the
//! digest of the artifact it runs). The grant lists the peer URLs the capsule may send to
//! (`network`), the binaries it may run (`shell`) and the tools it may invoke (`tools`),
//! for a validity window. The sending node checks a target against the grant before
//! anything leaves; the receiving node verifies the grant carried with the task before it
//! accepts.

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;
use crate::digest::Digest;
use crate::identity::PublicKey;
use crate::limits::{ALLOW_ENTRY_LEN_MAX, GRANT_ALLOW_ENTRIES_MAX, GRANT_BYTES_MAX};
use crate::names::check_capsule_name;
use crate::peer_url::{AllowPattern, PeerUrl, allowed};
use crate::signed::{DocKind, Document, Envelope, Signed};
use crate::time::Millis;
use crate::trust::{TrustError, check_window, open_trusted};

/// The grant version this build writes and reads.
pub const GRANT_VERSION: u16 = 1;

/// A signed capability allowlist for one capsule. The signer is the issuing authority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    // Fields are in canonical key order (see `codec`).
    /// Document version, [`GRANT_VERSION`].
    pub v: u16,
    /// `shell.allow`: binaries the capsule may execute (names or absolute paths).
    pub shell: Vec<String>,
    /// `tools.allow`: tools the capsule may invoke by name; a trailing `*` globs.
    pub tools: Vec<String>,
    /// Issuer-chosen serial number, for revocation lists and audit logs.
    pub serial: u64,
    /// The capsule this grant is for.
    pub capsule: String,
    /// `network.allow`: peer URL patterns the capsule may send tasks to.
    pub network: Vec<AllowPattern>,
    /// When set, the grant holds only for the capsule running this exact artifact.
    pub artifact: Option<Digest>,
    /// End of validity (exclusive).
    pub not_after: Millis,
    /// Start of validity (inclusive).
    pub not_before: Millis,
}

/// What the verifier expects a grant to be for.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrantExpectation<'a> {
    /// The capsule that presents the grant; `None` skips the check.
    pub capsule: Option<&'a str>,
    /// The digest of the artifact that capsule runs; `None` skips the check (only for
    /// tools that cannot know it: a node always passes the digest it runs).
    pub artifact: Option<&'a Digest>,
}

/// Why a grant was refused. [`GrantError::reason`] names the failed check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("grant {0}")]
    Trust(#[from] TrustError),
    #[error("grant is for capsule `{found}`, not `{expected}`")]
    WrongCapsule { expected: String, found: String },
    #[error("grant is pinned to artifact {pinned}, not {found}")]
    WrongArtifact { pinned: Digest, found: Digest },
}

impl GrantError {
    /// A stable machine-readable name for the failed check.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Trust(err) => err.reason(),
            Self::WrongCapsule { .. } => "wrong_capsule",
            Self::WrongArtifact { .. } => "wrong_artifact",
        }
    }
}

impl Grant {
    /// A grant for `capsule` valid in `[not_before, not_after)` that allows nothing yet.
    #[must_use]
    pub fn new(capsule: impl Into<String>, serial: u64, not_before: Millis, not_after: Millis) -> Self {
        Self {
            v: GRANT_VERSION,
            shell: Vec::new(),
            tools: Vec::new(),
            serial,
            capsule: capsule.into(),
            network: Vec::new(),
            artifact: None,
            not_after,
            not_before,
        }
    }

    /// Whether the grant lets its capsule send to `target`.
    #[must_use]
    pub fn allows_target(&self, target: &PeerUrl) -> bool {
        allowed(&self.network, target)
    }

    /// Whether the grant lets its capsule invoke tool `name`.
    #[must_use]
    pub fn allows_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|entry| match entry.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => entry == name,
        })
    }

    /// Whether the grant lets its capsule execute `binary` (compared as written; the shell
    /// host resolves paths before asking).
    #[must_use]
    pub fn allows_shell(&self, binary: &str) -> bool {
        self.shell.iter().any(|entry| entry == binary)
    }
}

/// Verifies a grant: trusted issuer, signature, validity at `now`, then the expectation.
pub fn verify_grant(
    envelope: Envelope,
    authorities: &[PublicKey],
    now: Millis,
    expect: GrantExpectation<'_>,
) -> Result<Signed<Grant>, GrantError> {
    let signed = open_trusted::<Grant>(envelope, authorities)?;
    let grant = signed.doc();
    check_window(grant.not_before, grant.not_after, now)?;
    if let Some(expected) = expect.capsule
        && expected != grant.capsule
    {
        return Err(GrantError::WrongCapsule { expected: expected.to_owned(), found: grant.capsule.clone() });
    }
    if let (Some(pinned), Some(found)) = (grant.artifact, expect.artifact)
        && pinned != *found
    {
        return Err(GrantError::WrongArtifact { pinned, found: *found });
    }
    Ok(signed)
}

impl Document for Grant {
    const KIND: DocKind = DocKind::Grant;
    const VERSION: u16 = GRANT_VERSION;
    const BYTES_MAX: usize = GRANT_BYTES_MAX;

    fn version(&self) -> u16 {
        self.v
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let invalid = |field, reason: String| DecodeError::Invalid { what: "grant", field, reason };
        check_capsule_name(&self.capsule).map_err(|r| invalid("capsule", r))?;
        if self.not_before >= self.not_after {
            return Err(invalid("not_after", "must be later than not_before".into()));
        }
        for (field, len) in
            [("network", self.network.len()), ("shell", self.shell.len()), ("tools", self.tools.len())]
        {
            if len > GRANT_ALLOW_ENTRIES_MAX {
                return Err(invalid(
                    field,
                    format!("has {len} entries, more than {GRANT_ALLOW_ENTRIES_MAX}"),
                ));
            }
        }
        for entry in &self.shell {
            if entry.is_empty() || entry.len() > ALLOW_ENTRY_LEN_MAX || entry.contains('\0') {
                return Err(invalid(
                    "shell",
                    format!("entry must be 1 to {ALLOW_ENTRY_LEN_MAX} bytes without NUL"),
                ));
            }
        }
        for entry in &self.tools {
            let name = entry.strip_suffix('*').unwrap_or(entry);
            if !(name.is_empty() && entry == "*") {
                check_capsule_name(name).map_err(|r| invalid("tools", r))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SecretKey;

    const T0: Millis = Millis(1_800_000_000_000);
    const DAY_MS: u64 = 86_400_000;

    fn authority() -> SecretKey {
        SecretKey::from_seed([9; 32])
    }

    fn grant() -> Grant {
        let mut grant = Grant::new("pipeline", 7, T0, T0.plus(30 * DAY_MS));
        grant.network.push("mesh://echo".parse().unwrap());
        grant.network.push("localhost:*".parse().unwrap());
        grant.shell.push("/usr/bin/git".into());
        grant.tools.push("wordcount".into());
        grant.tools.push("text-*".into());
        grant
    }

    fn signed(grant: Grant, key: &SecretKey) -> Envelope {
        Signed::sign(grant, key).unwrap().into_envelope()
    }

    fn verify(env: Envelope, now: Millis, expect: GrantExpectation<'_>) -> Result<Signed<Grant>, GrantError> {
        verify_grant(env, &[authority().public()], now, expect)
    }

    #[test]
    fn a_valid_grant_verifies_and_allows_what_it_lists() {
        let env = signed(grant(), &authority());
        let bytes = env.encode();
        crate::codec::tests::assert_canonical_key_order(&bytes);
        let verified = verify(
            Envelope::decode(&bytes).unwrap(),
            T0,
            GrantExpectation { capsule: Some("pipeline"), artifact: Some(&Digest::of(b"any")) },
        )
        .unwrap();
        let g = verified.doc();
        assert!(g.allows_target(&"mesh://echo".parse().unwrap()));
        assert!(g.allows_target(&"localhost:9".parse().unwrap()));
        assert!(!g.allows_target(&"mesh://other".parse().unwrap()));
        assert!(g.allows_tool("wordcount") && g.allows_tool("text-chunks") && !g.allows_tool("rm"));
        assert!(g.allows_shell("/usr/bin/git") && !g.allows_shell("git"));
    }

    #[test]
    fn each_failed_check_is_named() {
        let other = SecretKey::from_seed([10; 32]);
        let untrusted = verify(signed(grant(), &other), T0, GrantExpectation::default()).unwrap_err();
        assert_eq!(untrusted.reason(), "untrusted_issuer");
        assert!(untrusted.to_string().contains("not a trusted authority"));

        let expired =
            verify(signed(grant(), &authority()), T0.plus(31 * DAY_MS), GrantExpectation::default())
                .unwrap_err();
        assert_eq!(expired.reason(), "expired");
        assert!(expired.to_string().contains("expired at 2027-"), "{expired}");

        let early =
            verify(signed(grant(), &authority()), T0.minus(1), GrantExpectation::default()).unwrap_err();
        assert_eq!(early.reason(), "not_yet_valid");

        let wrong = verify(
            signed(grant(), &authority()),
            T0,
            GrantExpectation { capsule: Some("echo"), artifact: None },
        )
        .unwrap_err();
        assert_eq!(wrong.to_string(), "grant is for capsule `pipeline`, not `echo`");

        let mut pinned = grant();
        pinned.artifact = Some(Digest::of(b"v1"));
        let wrong_artifact = verify(
            signed(pinned, &authority()),
            T0,
            GrantExpectation { capsule: Some("pipeline"), artifact: Some(&Digest::of(b"v2")) },
        )
        .unwrap_err();
        assert_eq!(wrong_artifact.reason(), "wrong_artifact");
    }

    #[test]
    fn a_tampered_grant_fails_its_signature() {
        let env = signed(grant(), &authority());
        let mut bytes = env.encode();
        // Flip a byte inside the body's capsule name ("pipeline" → "pipelime").
        let at = bytes.windows(8).position(|w| w == b"pipeline").unwrap() + 7;
        bytes[at] = b'm';
        let err = verify(Envelope::decode(&bytes).unwrap(), T0, GrantExpectation::default()).unwrap_err();
        assert_eq!(err.reason(), "bad_signature");
    }

    #[test]
    fn invalid_grants_are_refused_at_signing() {
        let mut bad = grant();
        bad.not_after = bad.not_before;
        assert!(Signed::sign(bad, &authority()).is_err());
        let mut bad = grant();
        bad.tools.push("Bad Tool".into());
        assert!(Signed::sign(bad, &authority()).is_err());
    }
}
