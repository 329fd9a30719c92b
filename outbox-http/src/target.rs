//! Where a record goes ([`Target`]), and how a URL is named in a message: without the query
//! string and user info, which often carry a secret (an API key, a signed token, a password).

use reqwest::{Method, Url};

/// Where and how one record is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// HTTP method.
    pub method: Method,
    /// Full URL.
    pub url: Url,
}

impl Target {
    /// `method` to `path` resolved against `base`, refused when the result would leave
    /// `base`: `path` is an absolute URL (`http://elsewhere.example/`), a scheme-relative one
    /// (`//elsewhere.example`), or climbs out of the base's path (`../admin`). Use it when
    /// the path comes from the record (its group, a field of its payload): it is the
    /// application's data, and a value that names a URL of its own must not send the payload
    /// and its headers there. The reason names the value and the base without its query.
    ///
    /// End `base` with a `/`: a path is resolved the way a link is, so against
    /// `https://api.example/docs` the path `doc-7` becomes `/doc-7`, outside `/docs`, and is
    /// refused. The base's own query is not carried over to the result.
    ///
    /// ```
    /// use outbox_http::Target;
    /// use reqwest::{Method, Url};
    ///
    /// let base = Url::parse("https://api.example/docs/?key=s3cret").unwrap();
    /// let target = Target::under(Method::PUT, &base, "doc-7").unwrap();
    /// assert_eq!(target.url.as_str(), "https://api.example/docs/doc-7");
    /// for escape in ["http://elsewhere.example/", "//elsewhere.example/x", "../admin", "/admin"] {
    ///     let reason = Target::under(Method::PUT, &base, escape).unwrap_err();
    ///     assert!(!reason.contains("s3cret"), "{reason}");
    /// }
    /// ```
    pub fn under(method: Method, base: &Url, path: &str) -> Result<Target, String> {
        let refuse = |why: &str| {
            Err(format!(
                "{path:?} {why}: refused as a path under {}",
                redact(base)
            ))
        };
        if Url::parse(path).is_ok() {
            return refuse("is an absolute URL");
        }
        let Ok(mut url) = base.join(path) else {
            return refuse("is not a URL path");
        };
        // The base's query is the base's (often a key); a path's own query is kept.
        if !path.contains('?') {
            url.set_query(None);
        }
        if url.origin() != base.origin() || !url.path().starts_with(base.path()) {
            return refuse("leaves the base URL");
        }
        Ok(Target { method, url })
    }
}

/// `url` as a message may show it: scheme, host, port and path; no user info, query string
/// or fragment.
pub(crate) fn redact(url: &Url) -> String {
    let mut url = url.clone();
    strip(&mut url);
    url.to_string()
}

/// Removes user info, query string and fragment from `url` in place.
pub(crate) fn strip(url: &mut Url) {
    // Both fail only for URLs that cannot have user info, which then have none to remove.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
}

/// The same for a URL given as text that may not parse: cut at the query or fragment, and
/// drop what stands before an `@` in the authority.
pub(crate) fn redact_text(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..end];
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |i| scheme_end + i);
    match url[scheme_end..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &url[..scheme_end], &url[scheme_end + at + 1..]),
        None => url.to_owned(),
    }
}

/// `text` (a server's explanation) with `url`'s query string and password replaced, should
/// the server have echoed the request back ("cannot POST /notes?key=...").
pub(crate) fn scrub(text: &str, url: &Url) -> String {
    let mut text = text.to_owned();
    for secret in [url.query(), url.password()].into_iter().flatten() {
        if !secret.is_empty() {
            text = text.replace(secret, "[redacted]");
        }
    }
    text
}

/// For a redirect from `request` to `location` (the `Location` header, absolute or
/// relative): the other origin it names, as a reason shows it (`portal.example`, with the
/// port when one is given, with the scheme when it changes), or `None` when it stays on the
/// request's origin or cannot be read.
pub(crate) fn elsewhere(request: &Url, location: &str) -> Option<String> {
    let to = request.join(location).ok()?;
    if to.origin() == request.origin() {
        return None;
    }
    let host = to.host_str().unwrap_or("an opaque origin");
    let host = match to.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    Some(if to.scheme() == request.scheme() {
        host
    } else {
        format!("{}://{host}", to.scheme())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_never_shows_the_query_or_the_user_info() {
        let url = Url::parse("http://user:pw@127.0.0.1:8080/notes?token=s3cret#frag").unwrap();
        assert_eq!(redact(&url), "http://127.0.0.1:8080/notes");
        for (text, shown) in [
            ("http://user:pw@host/x?token=s3cret", "http://host/x"),
            ("ftp://a@b@host?k=v", "ftp://host"),
            ("not a url?token=s3cret", "not a url"),
            ("host/path#s3cret", "host/path"),
        ] {
            assert_eq!(redact_text(text), shown, "{text}");
        }
    }

    #[test]
    fn an_echoed_secret_is_scrubbed_from_the_servers_words() {
        let url = Url::parse("http://me:pw-1@host/notes?key=s3cret&v=2").unwrap();
        assert_eq!(
            scrub("cannot POST /notes?key=s3cret&v=2 as me:pw-1", &url),
            "cannot POST /notes?[redacted] as me:[redacted]"
        );
        let plain = Url::parse("http://host/notes").unwrap();
        assert_eq!(scrub("busy", &plain), "busy");
    }

    #[test]
    fn a_redirect_names_the_origin_it_leaves_for() {
        let request = Url::parse("http://api.example/writes?key=s3cret").unwrap();
        for same in ["/login", "login", "http://api.example:80/x", "?page=2"] {
            assert_eq!(elsewhere(&request, same), None, "{same}");
        }
        for (location, named) in [
            ("http://portal.example/login?next=s3cret", "portal.example"),
            ("//portal.example:8080/login", "portal.example:8080"),
            ("https://api.example/writes", "https://api.example"),
            ("http://user:pw@10.0.0.1/", "10.0.0.1"),
        ] {
            assert_eq!(
                elsewhere(&request, location).as_deref(),
                Some(named),
                "{location}"
            );
        }
        assert_eq!(elsewhere(&request, "http://[::1"), None);
    }

    #[test]
    fn a_path_under_the_base_stays_under_it() {
        let base = Url::parse("http://api.example/v1/docs/?key=s3cret").unwrap();
        let url = |path| Target::under(Method::POST, &base, path).map(|t| t.url.to_string());
        assert_eq!(url("doc-7").unwrap(), "http://api.example/v1/docs/doc-7");
        assert_eq!(
            url("doc-7?rev=3").unwrap(),
            "http://api.example/v1/docs/doc-7?rev=3"
        );
        assert_eq!(url("a/b").unwrap(), "http://api.example/v1/docs/a/b");
        for escape in [
            "http://elsewhere.example/",
            "https://api.example/v1/docs/x",
            "mailto:me@example",
            "//elsewhere.example/v1/docs/",
            "../admin",
            "/v1/admin",
            "a/../../admin",
        ] {
            let reason = url(escape).unwrap_err();
            assert!(reason.contains(&format!("{escape:?}")), "{reason}");
            assert!(!reason.contains("s3cret"), "{reason}");
        }
    }
}
