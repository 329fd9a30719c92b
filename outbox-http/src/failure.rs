//! What a request that got no HTTP answer means: a link that is down, something other than
//! our server in the way, or the sink's own configuration.

use outbox_core::Outcome;

use crate::target::strip;

/// Each error of the chain, outermost first.
fn chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source())
}

/// The error and its causes in one line, the URL named without its query string and user
/// info (reqwest's own text would show both).
pub(crate) fn describe(mut err: reqwest::Error) -> String {
    if let Some(url) = err.url_mut() {
        strip(url);
    }
    chain(&err)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// What a failed request that got no HTTP answer means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The TLS handshake failed over the server's certificate (unknown issuer, expired, wrong
    /// name, none presented): whatever answered could not show it is our server. A captive
    /// portal or an interceptor does this, and so does a server whose certificate expired.
    Untrusted,
    /// The server refused the client's certificate: a credential, not the link.
    ClientCertificateRefused,
    /// An https URL while reqwest was built without TLS: no server can ever answer.
    NoTls,
    /// Anything else: no route, refused, reset, timed out before a response.
    Link,
}

impl Failure {
    /// Reads the failure from the error chain.
    ///
    /// The TLS stacks reqwest can use share no error type for a certificate, but each names
    /// it in its message (rustls: "invalid peer certificate", OpenSSL: "certificate verify
    /// failed", ...), and each reports the server's refusal of our certificate as an alert
    /// ("received fatal alert: CertificateRequired", "tlsv13 alert certificate required"), so
    /// the message is what is matched. reqwest's connector refuses an https URL it has no TLS
    /// for with "scheme is not http".
    pub(crate) fn of(err: &(dyn std::error::Error + 'static)) -> Failure {
        let says =
            |what: &str| chain(err).any(|e| e.to_string().to_ascii_lowercase().contains(what));
        if says("certificate") && says("alert") {
            Failure::ClientCertificateRefused
        } else if says("certificate") {
            Failure::Untrusted
        } else if says("scheme is not http") {
            Failure::NoTls
        } else {
            Failure::Link
        }
    }

    /// The outcome for this failure, `detail` being the transport's own words.
    pub(crate) fn outcome(self, detail: &str) -> Outcome {
        match self {
            Failure::Untrusted => Outcome::no_answer(format!(
                "certificate not trusted: interception or an expired certificate? ({detail})"
            )),
            Failure::ClientCertificateRefused => Outcome::halt(format!(
                "the server refused the client certificate (a credential, not this record): \
                 {detail}"
            )),
            Failure::NoTls => Outcome::halt(format!(
                "https needs TLS support (outbox-http's `tls` feature) (configuration, not this \
                 record): {detail}"
            )),
            Failure::Link => Outcome::no_answer(detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::Failure;

    /// A connect error wrapping what the TLS stack said, as reqwest's chain does.
    #[derive(Debug)]
    struct Connect(io::Error);

    impl std::fmt::Display for Connect {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }

    impl std::error::Error for Connect {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn of(says: &str) -> Failure {
        Failure::of(&Connect(io::Error::new(
            io::ErrorKind::InvalidData,
            says.to_owned(),
        )))
    }

    #[test]
    fn a_server_certificate_not_trusted_is_something_else_answering() {
        for says in [
            "invalid peer certificate: UnknownIssuer",
            "invalid peer certificate: Expired",
            "invalid peer certificate: certificate not valid for name \"api.example\"",
            "error:0A000086:SSL routines::certificate verify failed",
            "peer sent no certificates",
        ] {
            assert_eq!(of(says), Failure::Untrusted, "{says}");
            let outcome = of(says).outcome(says);
            assert!(outcome.is_unanswered(), "{says}: {outcome:?}");
        }
    }

    #[test]
    fn a_refused_client_certificate_or_missing_tls_is_a_halt() {
        for says in [
            "received fatal alert: CertificateRequired",
            "received fatal alert: BadCertificate",
            "error:0A000412:SSL routines::sslv3 alert bad certificate",
            "error:0A00045C:SSL routines::tlsv13 alert certificate required",
        ] {
            assert_eq!(of(says), Failure::ClientCertificateRefused, "{says}");
        }
        assert_eq!(of("invalid URL, scheme is not http"), Failure::NoTls);
        for failure in [Failure::ClientCertificateRefused, Failure::NoTls] {
            assert!(matches!(
                failure.outcome("x"),
                outbox_core::Outcome::Halt { .. }
            ));
        }
    }

    #[test]
    fn a_link_that_is_down_is_neither() {
        for says in [
            "Connection refused (os error 111)",
            "connection reset by peer",
            "received corrupt message of type InvalidContentType",
            "received fatal alert: HandshakeFailure",
        ] {
            assert_eq!(of(says), Failure::Link, "{says}");
        }
    }
}
