//! Trace context across the hop: the W3C `traceparent` (and `tracestate`) of the span a write
//! was made in, kept on the record, so the delivery minutes or days later can be tied back to
//! it.
//!
//! A [`TraceContext`] is set with [`NewRecord::trace_context`](crate::NewRecord::trace_context);
//! with the `opentelemetry` feature, [`NewRecord::new`](crate::NewRecord::new) takes it from
//! the current span (a `tracing` span bridged by `tracing-opentelemetry`, or the current
//! OpenTelemetry context) and the runner's delivery span links to it. Every store persists one
//! text ([`TraceContext::encode`]); `HttpSink` sends it as the `traceparent` and `tracestate`
//! headers. Off by default: a record made without one carries none.

use std::fmt;

use crate::error::{Error, Result};

/// The longest `tracestate` kept, in bytes (the W3C limit of 32 members of 256 bytes would
/// allow more; real headers are far shorter, and a record's text stays bounded).
pub const MAX_TRACESTATE: usize = 512;

/// A W3C trace context: a valid `traceparent` and an optional `tracestate`.
///
/// ```
/// use outbox_core::TraceContext;
///
/// let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// let cx = TraceContext::new(parent, Some("vendor=opaque".into()))?;
/// assert_eq!(cx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert_eq!(cx.span_id(), "00f067aa0ba902b7");
/// assert!(TraceContext::new("00-0000-0000-01", None).is_err());
/// assert_eq!(TraceContext::decode(&cx.encode()), Some(cx));
/// # Ok::<(), outbox_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// A context from its header values: `traceparent` as `00-<32 hex>-<16 hex>-<2 hex>`
    /// (lowercase, ids not all zero), `tracestate` at most [`MAX_TRACESTATE`] bytes of visible
    /// ASCII and spaces (an empty one is none). Anything else is
    /// [`Error::InvalidTraceContext`].
    pub fn new(traceparent: impl Into<String>, tracestate: Option<String>) -> Result<Self> {
        let traceparent = traceparent.into();
        check_traceparent(&traceparent).map_err(|reason| Error::InvalidTraceContext {
            reason: format!("traceparent {traceparent:?}: {reason}"),
        })?;
        let tracestate = tracestate.filter(|s| !s.trim().is_empty());
        if let Some(state) = &tracestate {
            let visible = state.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
            if state.len() > MAX_TRACESTATE || !visible {
                return Err(Error::InvalidTraceContext {
                    reason: format!(
                        "tracestate must be at most {MAX_TRACESTATE} bytes of visible ASCII"
                    ),
                });
            }
        }
        Ok(TraceContext {
            traceparent,
            tracestate,
        })
    }

    /// The `traceparent` header value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the span the write was made in: 16 lowercase hex digits.
    pub fn span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags: bit 0 is "sampled".
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0)
    }

    /// The stored form every store keeps: the `traceparent`, then a newline and the
    /// `tracestate` when there is one.
    pub fn encode(&self) -> String {
        match &self.tracestate {
            Some(state) => format!("{}\n{state}", self.traceparent),
            None => self.traceparent.clone(),
        }
    }

    /// Reads a stored context; text that is not one reads as none (a damaged context never
    /// makes its record unreadable: the delivery is only not linked).
    pub fn decode(text: &str) -> Option<TraceContext> {
        let (parent, state) = match text.split_once('\n') {
            Some((parent, state)) => (parent, Some(state.to_owned())),
            None => (text, None),
        };
        TraceContext::new(parent, state).ok()
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent)
    }
}

/// Why `value` is not a `traceparent` this crate keeps, if it is not.
fn check_traceparent(value: &str) -> std::result::Result<(), &'static str> {
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace, span, flags] = parts[..] else {
        return Err("not four fields separated by '-'");
    };
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if version != "00" {
        return Err("only version 00 is known");
    }
    if !hex(trace, 32) || trace.bytes().all(|b| b == b'0') {
        return Err("the trace id must be 32 lowercase hex digits, not all zero");
    }
    if !hex(span, 16) || span.bytes().all(|b| b == b'0') {
        return Err("the span id must be 16 lowercase hex digits, not all zero");
    }
    if !hex(flags, 2) {
        return Err("the flags must be 2 lowercase hex digits");
    }
    Ok(())
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TraceContext;

    impl TraceContext {
        /// The context of the current span (feature `opentelemetry`): the current `tracing`
        /// span's OpenTelemetry context (through `tracing-opentelemetry`), or else the current
        /// OpenTelemetry context; `None` when neither is in a sampled or unsampled valid span.
        pub fn current() -> Option<TraceContext> {
            let from_tracing = tracing::Span::current().context();
            let span = from_tracing.span();
            let mut cx = span.span_context().clone();
            if !cx.is_valid() {
                cx = opentelemetry::Context::current()
                    .span()
                    .span_context()
                    .clone();
            }
            TraceContext::of(&cx)
        }

        /// The context of an OpenTelemetry span context; `None` for an invalid one.
        pub fn of(cx: &SpanContext) -> Option<TraceContext> {
            if !cx.is_valid() {
                return None;
            }
            let parent = format!(
                "00-{}-{}-{:02x}",
                cx.trace_id(),
                cx.span_id(),
                cx.trace_flags().to_u8()
            );
            let state = cx.trace_state().header();
            TraceContext::new(parent, Some(state)).ok()
        }

        /// As an OpenTelemetry span context of a remote parent, for a link.
        pub fn span_context(&self) -> SpanContext {
            let trace = TraceId::from_hex(self.trace_id()).unwrap_or(TraceId::INVALID);
            let span = SpanId::from_hex(self.span_id()).unwrap_or(SpanId::INVALID);
            let state = self
                .tracestate()
                .and_then(|s| s.parse::<TraceState>().ok())
                .unwrap_or_default();
            SpanContext::new(trace, span, TraceFlags::new(self.flags()), true, state)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn only_well_formed_traceparents_are_kept() {
        assert!(TraceContext::new(PARENT, None).is_ok());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01",
        ] {
            assert!(
                matches!(
                    TraceContext::new(bad, None),
                    Err(Error::InvalidTraceContext { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(TraceContext::new(PARENT, Some("a=1\nb=2".into())).is_err());
        assert!(TraceContext::new(PARENT, Some("x".repeat(MAX_TRACESTATE + 1))).is_err());
        let blank = TraceContext::new(PARENT, Some("  ".into())).unwrap();
        assert_eq!(blank.tracestate(), None);
    }

    #[test]
    fn the_stored_form_reads_back_and_damage_reads_as_none() {
        let cx = TraceContext::new(
            PARENT,
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7".into()),
        )
        .unwrap();
        assert_eq!(TraceContext::decode(&cx.encode()), Some(cx.clone()));
        let plain = TraceContext::new(PARENT, None).unwrap();
        assert_eq!(plain.encode(), PARENT);
        assert_eq!(TraceContext::decode(PARENT), Some(plain));
        assert_eq!(TraceContext::decode("garbage"), None);
        assert_eq!(cx.flags(), 1);
    }
}
