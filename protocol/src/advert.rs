//! Node adverts: what a node hosts and where to reach it, signed by the node.
//!
//! A node republishes its advert when what it hosts changes and on a refresh interval;
//! every directory drops it after its TTL unless a newer one arrived. `seq` orders a
//! node's adverts (a directory never lets an older one replace a newer one); `issued_at`
//! bounds how long any copy can stay alive, so an old advert replayed later is refused
//! even by a directory that has never seen the node before.

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;
use crate::digest::Digest;
use crate::limits::{
    ADDR_LEN_MAX, ADVERT_ADDRS_MAX, ADVERT_AGENTS_MAX, ADVERT_ARTIFACTS_MAX, ADVERT_BYTES_MAX,
    ADVERT_CAPSULES_MAX, ADVERT_TTL_MS_MAX, ADVERT_TTL_MS_MIN,
};
use crate::names::{check_capsule_name, check_version};
use crate::signed::{DocKind, Document, Envelope};
use crate::time::Millis;

/// The advert version this build writes and reads.
pub const ADVERT_VERSION: u16 = 1;

/// Load is reported in thousandths of capacity; 1000 means saturated.
pub const LOAD_PERMILLE_MAX: u16 = 1000;

/// A node's signed statement of what it hosts. The signer is the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Advert {
    // Fields are in canonical key order (see `codec`).
    /// Document version, [`ADVERT_VERSION`].
    pub v: u16,
    /// Strictly increasing per node; a directory keeps the highest it has seen.
    pub seq: u64,
    /// Closed-mesh admission: a [`crate::NodeCert`] envelope for this node, signed by an
    /// authority. `None` in an open mesh.
    pub cert: Option<Envelope>,
    /// Current load in thousandths of capacity (0..=1000), for routing.
    pub load: u16,
    /// Multiaddrs the node listens on, as text.
    pub addrs: Vec<String>,
    /// Agents (brains) the node runs, by name: `send-agent` reaches them, and only this
    /// node may send as them. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Models agents of the node serve on the OpenAI-compatible endpoint, by name: any
    /// node's `/v1` routes requests for them here (see [`crate::model`]). Absent when
    /// none (wire 1.3: a 1.2 node refuses an advert that lists models).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// How long after `issued_at` this advert stays valid without a newer one.
    pub ttl_ms: u64,
    /// Capsules the node hosts, one entry per name.
    pub capsules: Vec<HostedCapsule>,
    /// Digests of artifacts the node can serve to others.
    pub artifacts: Vec<Digest>,
    /// The node's clock when it signed this advert.
    pub issued_at: Millis,
}

/// One capsule a node hosts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostedCapsule {
    // Fields are in canonical key order (see `codec`).
    /// The capsule's name, as in `mesh://NAME`.
    pub name: String,
    /// The digest of the artifact the capsule runs, when it comes from the artifact store.
    pub digest: Option<Digest>,
    /// The capsule's version.
    pub version: String,
}

impl Advert {
    /// An advert with nothing hosted, for the node to fill in.
    #[must_use]
    pub const fn new(seq: u64, issued_at: Millis, ttl_ms: u64) -> Self {
        Self {
            v: ADVERT_VERSION,
            seq,
            cert: None,
            load: 0,
            addrs: Vec::new(),
            agents: Vec::new(),
            models: Vec::new(),
            ttl_ms,
            capsules: Vec::new(),
            artifacts: Vec::new(),
            issued_at,
        }
    }

    /// The last instant at which any copy of this advert may be held.
    #[must_use]
    pub const fn valid_until(&self) -> Millis {
        self.issued_at.plus(self.ttl_ms)
    }

    /// Whether this advert lists agent `name`.
    #[must_use]
    pub fn runs_agent(&self, name: &str) -> bool {
        self.agents.iter().any(|a| a == name)
    }

    /// Whether this advert lists model `name`.
    #[must_use]
    pub fn serves_model(&self, name: &str) -> bool {
        self.models.iter().any(|m| m == name)
    }

    /// Whether this advert lists capsule `name`.
    #[must_use]
    pub fn hosts(&self, name: &str) -> Option<&HostedCapsule> {
        self.capsules.iter().find(|c| c.name == name)
    }
}

impl Document for Advert {
    const KIND: DocKind = DocKind::NodeAdvert;
    const VERSION: u16 = ADVERT_VERSION;
    const BYTES_MAX: usize = ADVERT_BYTES_MAX;

    fn version(&self) -> u16 {
        self.v
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let invalid = |field, reason: String| DecodeError::Invalid { what: "node-advert", field, reason };
        if !(ADVERT_TTL_MS_MIN..=ADVERT_TTL_MS_MAX).contains(&self.ttl_ms) {
            return Err(invalid(
                "ttl_ms",
                format!("is {} but must be {ADVERT_TTL_MS_MIN}..={ADVERT_TTL_MS_MAX}", self.ttl_ms),
            ));
        }
        if self.load > LOAD_PERMILLE_MAX {
            return Err(invalid("load", format!("is {} but must be at most {LOAD_PERMILLE_MAX}", self.load)));
        }
        check_count("addrs", self.addrs.len(), ADVERT_ADDRS_MAX).map_err(|r| invalid("addrs", r))?;
        for addr in &self.addrs {
            if addr.len() > ADDR_LEN_MAX || !addr.starts_with('/') {
                return Err(invalid(
                    "addrs",
                    format!("entry is not a multiaddr of at most {ADDR_LEN_MAX} bytes"),
                ));
            }
        }
        check_count("capsules", self.capsules.len(), ADVERT_CAPSULES_MAX)
            .map_err(|r| invalid("capsules", r))?;
        for (i, capsule) in self.capsules.iter().enumerate() {
            check_capsule_name(&capsule.name).map_err(|r| invalid("capsules", r))?;
            check_version(&capsule.version).map_err(|r| invalid("capsules", r))?;
            if self.capsules[..i].iter().any(|c| c.name == capsule.name) {
                return Err(invalid("capsules", format!("lists `{}` twice", capsule.name)));
            }
        }
        check_count("agents", self.agents.len(), ADVERT_AGENTS_MAX).map_err(|r| invalid("agents", r))?;
        for (i, agent) in self.agents.iter().enumerate() {
            crate::agent::check_agent_name(agent).map_err(|r| invalid("agents", r))?;
            if self.agents[..i].contains(agent) {
                return Err(invalid("agents", format!("lists `{agent}` twice")));
            }
        }
        check_count("models", self.models.len(), crate::model::ADVERT_MODELS_MAX)
            .map_err(|r| invalid("models", r))?;
        for (i, model) in self.models.iter().enumerate() {
            crate::model::check_model_name(model).map_err(|r| invalid("models", r))?;
            if self.models[..i].contains(model) {
                return Err(invalid("models", format!("lists `{model}` twice")));
            }
        }
        check_count("artifacts", self.artifacts.len(), ADVERT_ARTIFACTS_MAX)
            .map_err(|r| invalid("artifacts", r))?;
        if let Some(cert) = &self.cert
            && cert.kind() != DocKind::NodeCert
        {
            return Err(invalid("cert", format!("holds a {} document, not a node-cert", cert.kind())));
        }
        Ok(())
    }
}

fn check_count(field: &str, len: usize, len_max: usize) -> Result<(), String> {
    if len > len_max {
        return Err(format!("{field} has {len} entries, more than {len_max}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SecretKey;
    use crate::signed::Signed;

    pub(crate) fn sample(seq: u64) -> Advert {
        let mut advert = Advert::new(seq, Millis(1_700_000_000_000), 90_000);
        advert.addrs.push("/ip4/127.0.0.1/tcp/7421".into());
        advert.capsules.push(HostedCapsule {
            name: "echo".into(),
            digest: Some(Digest::of(b"echo.wasm")),
            version: "0.1.0".into(),
        });
        advert
    }

    #[test]
    fn signed_advert_round_trips() {
        let key = SecretKey::from_seed([1; 32]);
        let signed = Signed::sign(sample(5), &key).unwrap();
        let bytes = signed.envelope().encode();
        crate::codec::tests::assert_canonical_key_order(&bytes);
        crate::codec::tests::assert_canonical_key_order(signed.envelope().body());
        let opened: Signed<Advert> = Envelope::decode(&bytes).unwrap().open().unwrap();
        assert_eq!(opened.doc(), &sample(5));
        assert_eq!(opened.signer(), key.public());
    }

    #[test]
    fn invalid_adverts_are_not_signed() {
        let key = SecretKey::from_seed([1; 32]);
        let mut bad = sample(1);
        bad.capsules.push(bad.capsules[0].clone());
        assert!(Signed::sign(bad, &key).unwrap_err().to_string().contains("twice"));
        let mut bad = sample(1);
        bad.ttl_ms = 10;
        assert!(Signed::sign(bad, &key).unwrap_err().to_string().contains("ttl_ms"));
        let mut bad = sample(1);
        bad.capsules[0].name = "Echo".into();
        assert!(Signed::sign(bad, &key).is_err());
    }
}
