//! An HTTP [`Sink`](outbox_core::Sink) for `outbox`.
//!
//! [`HttpSink`] sends each record's payload (POST to one URL by default, or any method and URL
//! you map from the record) with an `Idempotency-Key` header carrying the record's stable key,
//! applies a per-request timeout, and turns the answer into an
//! [`Outcome`](outbox_core::Outcome) with a [`Classifier`](outbox_core::http::Classifier),
//! `Retry-After` read against the response's own `Date`. A connection error or a timeout
//! before any response is a no-answer: it spends no retry budget. So is an answer from
//! something other than our server (a redirect to another origin, a `511`, a server
//! certificate the client does not trust: a captive portal or an interceptor); redirects are
//! never followed. A request that cannot be built halts the runner: configuration to fix, not
//! a record to reject. No URL in a reason shows its query string or user info.
//!
//! The `Authorization` header comes from a [`CredentialSource`] read for every request, so
//! after a 401 halts the runner the application stores a new credential (for example in a
//! [`Token`]) and resumes.
//!
//! HTTPS needs the `tls` feature (rustls); plain HTTP needs nothing.
//!
//! ```
//! use std::time::Duration;
//! use outbox_http::{HttpSink, Token};
//!
//! let token = Token::bearer("secret");
//! let sink = HttpSink::post("http://127.0.0.1:8080/notes")
//!     .unwrap()
//!     .timeout(Duration::from_secs(10))
//!     .credentials(token.clone());
//! # let _ = sink;
//! ```
#![deny(missing_docs)]

mod credentials;
mod failure;
mod sink;
mod target;

pub use credentials::{CredentialSource, Token};
pub use sink::{
    if_match, HttpSink, CREATED_AT, IDEMPOTENCY_KEY, REASON_BYTES, TRACEPARENT, TRACESTATE,
};
pub use target::Target;
