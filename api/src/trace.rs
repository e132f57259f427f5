//! The W3C trace context (`traceparent: 00-TRACEID-SPANID-FLAGS`) every hop of a task
//! carries: HTTP requests in and out, and `/murmur/task/1` submits. Exporting spans is the
//! node's business (its telemetry); this is only the header and its ids.

/// A W3C trace context (`traceparent: 00-TRACEID-SPANID-FLAGS`), carried on every hop a
/// task takes: HTTP requests in and out, and `/murmur/task/1` submits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl TraceContext {
    /// Reads a `traceparent` header (version 00; other versions are read by their first
    /// four fields, as the specification asks). Invalid or all-zero ids give `None`.
    #[must_use]
    pub fn parse(header: &str) -> Option<Self> {
        let mut fields = header.trim().split('-');
        let version = fields.next()?;
        let (trace, span, flags) = (fields.next()?, fields.next()?, fields.next()?);
        if version.len() != 2 || version == "ff" || (version == "00" && fields.next().is_some()) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        let mut flag = [0u8; 1];
        hex::decode_to_slice(trace, &mut trace_id).ok()?;
        hex::decode_to_slice(span, &mut span_id).ok()?;
        hex::decode_to_slice(flags, &mut flag).ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] || trace.chars().any(|c| c.is_ascii_uppercase()) {
            return None;
        }
        Some(Self { trace_id, span_id, sampled: flag[0] & 1 == 1 })
    }

    /// A new trace, for a hop that arrived without one.
    #[must_use]
    pub fn root() -> Self {
        let random = uuid::Uuid::new_v4().into_bytes();
        Self { trace_id: random, span_id: Self::new_span_id(), sampled: true }
    }

    /// The same trace with a new span id: what this node sends on the next hop.
    #[must_use]
    pub fn child(&self) -> Self {
        Self { span_id: Self::new_span_id(), ..*self }
    }

    fn new_span_id() -> [u8; 8] {
        let random = uuid::Uuid::new_v4().into_bytes();
        let mut id = [0u8; 8];
        id.copy_from_slice(&random[..8]);
        if id == [0; 8] {
            id[7] = 1;
        }
        id
    }

    /// The trace id as 32 lowercase hex digits.
    #[must_use]
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    /// The `traceparent` header value.
    #[must_use]
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            u8::from(self.sampled)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_rejects_bad_headers() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = TraceContext::parse(header).unwrap();
        assert_eq!(ctx.header(), header);
        assert!(ctx.sampled);
        let child = ctx.child();
        assert_eq!(child.trace_id, ctx.trace_id);
        assert_ne!(child.span_id, ctx.span_id);
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f35-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::parse(bad).is_none(), "{bad}");
        }
        // A future version with more fields is read by its first four.
        assert!(
            TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more").is_some()
        );
        assert_eq!(TraceContext::root().header().len(), 55);
    }
}
