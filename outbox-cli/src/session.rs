//! Who may use the page of `outbox serve`: whoever holds the token it printed, nobody else,
//! not even another user of the same machine.
//!
//! - Every request needs the token, the page and its script included. `serve` prints a URL
//!   that carries it (`/?token=...`); the first request with it gets the token back as an
//!   `HttpOnly; SameSite=Strict` cookie and is sent on to `/`, so the token leaves the
//!   address bar and page scripts cannot read it. A request with neither gets 401 and
//!   nothing else.
//! - A POST needs, besides the cookie, the `X-Outbox-Csrf` header with a second random value
//!   that only the page holds: a form or a page of another origin cannot send it (a custom
//!   header needs a CORS preflight this server never grants), and cookies, which browsers
//!   keep apart by host but not by port, cannot stand in for it.
//! - Requests addressed to another host name are refused (DNS rebinding); the page cannot be
//!   framed, types are never sniffed, and no page is cached or sends a referrer.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::CliError;

/// The header a POST must carry the page's second value in.
pub const CSRF_HEADER: &str = "x-outbox-csrf";

/// The secrets of one `serve` process.
#[derive(Clone)]
pub struct Session {
    token: String,
    csrf: String,
    port: u16,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// 128 bits from the operating system's random source, as hex.
fn random() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    #[cfg(unix)]
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    }
    #[cfg(not(unix))]
    {
        // std seeds each RandomState from the operating system's random source.
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(0);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    Ok(crate::view::hex(&bytes))
}

/// Compares without stopping at the first difference, so the time taken tells nothing.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Session {
    /// Fresh secrets for a server on 127.0.0.1:`port`.
    pub fn new(port: u16) -> Result<Session, CliError> {
        Ok(Session {
            token: random()?,
            csrf: random()?,
            port,
        })
    }

    /// The URL to open: the page, with the token.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/?token={}", self.port, self.token)
    }

    /// The value the page sends in [`CSRF_HEADER`].
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The cookie's name: one per port, so two servers on one machine keep their own.
    fn cookie_name(&self) -> String {
        format!("outbox_token_{}", self.port)
    }

    fn has_cookie(&self, headers: &HeaderMap) -> bool {
        let name = self.cookie_name();
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(key, value)| key == name && same(value.as_bytes(), self.token.as_bytes()))
    }

    fn has_query_token(&self, request: &Request) -> bool {
        request.uri().query().is_some_and(|query| {
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .any(|(key, value)| key == "token" && same(value.as_bytes(), self.token.as_bytes()))
        })
    }

    fn has_csrf(&self, headers: &HeaderMap) -> bool {
        headers
            .get(CSRF_HEADER)
            .is_some_and(|v| same(v.as_bytes(), self.csrf.as_bytes()))
    }

    /// The cookie the first request with the token gets.
    fn set_cookie(&self) -> String {
        format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/",
            self.cookie_name(),
            self.token
        )
    }

    fn host_is_ours(&self, headers: &HeaderMap) -> bool {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        host == format!("127.0.0.1:{}", self.port) || host == format!("localhost:{}", self.port)
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message });
    (status, axum::Json(body)).into_response()
}

/// The middleware in front of every route: the checks of the module documentation, and the
/// headers every answer carries.
pub async fn guard(State(session): State<Session>, request: Request, next: Next) -> Response {
    let mut response = if !session.host_is_ours(request.headers()) {
        refuse(
            StatusCode::FORBIDDEN,
            &format!(
                "this server answers to http://127.0.0.1:{}/ only",
                session.port
            ),
        )
    } else if request.method() == Method::GET
        && request.uri().path() == "/"
        && session.has_query_token(&request)
    {
        // The printed URL: the token becomes a cookie, and leaves the address bar.
        let mut redirect = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if let Ok(cookie) = HeaderValue::from_str(&session.set_cookie()) {
            redirect.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        redirect
    } else if session.has_cookie(request.headers()) {
        if request.method() == Method::POST && !session.has_csrf(request.headers()) {
            refuse(
                StatusCode::FORBIDDEN,
                "missing or wrong X-Outbox-Csrf header: the buttons work from this server's \
                 own page only",
            )
        } else {
            next.run(request).await
        }
    } else {
        refuse(
            StatusCode::UNAUTHORIZED,
            "this page needs its token: open the URL `outbox serve` printed",
        )
    };
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_strict_and_named_for_the_port() {
        let session = Session::new(8417).unwrap();
        let cookie = session.set_cookie();
        assert!(cookie.starts_with("outbox_token_8417="), "{cookie}");
        assert!(cookie.contains("; HttpOnly; SameSite=Strict"), "{cookie}");
        let mut headers = HeaderMap::new();
        let sent = cookie.split(';').next().unwrap().to_owned();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {sent}")).unwrap(),
        );
        assert!(session.has_cookie(&headers));
        let other = Session::new(8417).unwrap();
        assert!(!other.has_cookie(&headers), "another server's token");
        assert_ne!(session.token, session.csrf);
        assert_eq!(session.token.len(), 32);
    }
}
