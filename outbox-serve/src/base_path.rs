//! Mounting the API and the console under a path prefix behind a proxy (`--base-path`).
//!
//! Handlers write root-relative URLs (`/console/…`) and never learn the prefix: the router
//! is nested under it, and one layer at the edge adds it to what leaves the server — the
//! `href`, `action` and `src` attributes of the console's HTML (attribute values are always
//! escaped, so such a match is markup the console wrote, never content), `Location`, and the
//! session cookie's `Path`.

use std::fmt;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::Response;

/// A validated mount prefix: `/` (the root, the default) or `/a/b` — starting with `/`, no
/// trailing `/`, no empty, `.` or `..` segment, only letters, digits and `-._~` (nothing an
/// attribute, a cookie or a proxy would read differently).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BasePath(String);

impl BasePath {
    /// Check `path`; a clear error says what is wrong with it.
    pub fn new(path: &str) -> outboxkit_core::Result<BasePath> {
        let bad = |why: &str| {
            Err(outboxkit_core::Error::invalid_input(
                "base_path",
                format!("the base path {path:?} {why}"),
            ))
        };
        if path == "/" {
            return Ok(BasePath::default());
        }
        if !path.starts_with('/') {
            return bad("must start with /");
        }
        if path.ends_with('/') {
            return bad("must not end with / (write /outbox, not /outbox/)");
        }
        for seg in path[1..].split('/') {
            if seg.is_empty() {
                return bad("has an empty segment (//)");
            }
            if seg == "." || seg == ".." {
                return bad("must not contain . or .. segments");
            }
            if !seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
            {
                return bad("may hold only letters, digits and - . _ ~ between its slashes");
            }
        }
        Ok(BasePath(path.to_owned()))
    }

    /// The prefix to put before a root-relative path: empty at the root, else `/a/b`.
    pub fn prefix(&self) -> &str {
        &self.0
    }

    /// Whether this is the root (nothing to add).
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// `/console` under this prefix, say.
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }
}

impl fmt::Display for BasePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "/" } else { &self.0 })
    }
}

/// Add the prefix to root-relative URLs in `html`'s `href`, `action` and `src` attributes.
pub(crate) fn rewrite_html(html: &str, base: &BasePath) -> String {
    let mut out = html.to_owned();
    for attr in ["href=\"/", "action=\"/", "src=\"/"] {
        let with = format!("{}{}/", &attr[..attr.len() - 1], base.prefix());
        out = out.replace(attr, &with);
    }
    out
}

/// The edge layer of a mount under a prefix (see the module docs).
pub(crate) async fn under_prefix(
    State(base): State<BasePath>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let res = next.run(req).await;
    let (mut parts, body) = res.into_parts();
    if let Some(loc) = parts
        .headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
    {
        if loc.starts_with('/') && !loc.starts_with("//") {
            if let Ok(v) = HeaderValue::from_str(&base.join(loc)) {
                parts.headers.insert(header::LOCATION, v);
            }
        }
    }
    let cookies: Vec<HeaderValue> = parts
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|c| {
            HeaderValue::from_str(&c.replace("Path=/", &format!("Path={}/", base.prefix()))).ok()
        })
        .collect();
    if !cookies.is_empty() {
        parts.headers.remove(header::SET_COOKIE);
        for c in cookies {
            parts.headers.append(header::SET_COOKIE, c);
        }
    }
    let html = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"));
    if !html {
        return Response::from_parts(parts, body);
    }
    // The console's own pages: small, and complete before they are sent.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(_) => return Response::from_parts(parts, Body::empty()),
    };
    let text = String::from_utf8_lossy(&bytes);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(rewrite_html(&text, &base)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_and_bad_base_paths() {
        assert!(BasePath::new("/").unwrap().is_root());
        assert_eq!(BasePath::new("/outbox").unwrap().prefix(), "/outbox");
        assert_eq!(
            BasePath::new("/a/b-c").unwrap().join("/console"),
            "/a/b-c/console"
        );
        for (bad, why) in [
            ("outbox", "must start with /"),
            ("", "must start with /"),
            ("/outbox/", "must not end with /"),
            ("/a//b", "empty segment"),
            ("/a/../b", ". or .."),
            ("/..", ". or .."),
            ("/a b", "may hold only"),
            ("/a?x=1", "may hold only"),
            ("/a\"b", "may hold only"),
        ] {
            let e = BasePath::new(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn only_root_relative_attributes_get_the_prefix() {
        let base = BasePath::new("/p").unwrap();
        let html = "<a href=\"/console?x\">a</a><form action=\"/console/act\"></form>\
                    <script src=\"/console/static/x.js\"></script><a href=\"https://x/\">b</a>\
                    <pre>href=&quot;/evil</pre>";
        assert_eq!(
            rewrite_html(html, &base),
            "<a href=\"/p/console?x\">a</a><form action=\"/p/console/act\"></form>\
             <script src=\"/p/console/static/x.js\"></script><a href=\"https://x/\">b</a>\
             <pre>href=&quot;/evil</pre>"
        );
    }
}
