//! A configured origin (`http[s]://authority[/prefix]`) and the target a request is sent
//! to on it: the origin's scheme and authority, its path prefix, then the request's path
//! and query. The request's own authority or absolute-form target is never used, so only
//! the configured origin is ever contacted, and a path with dot segments left in it is
//! refused rather than joined, so it never climbs out of the prefix.

use std::fmt;

use http::Uri;
use http::header::HeaderValue;
use http::uri::{Authority, PathAndQuery, Scheme};

use super::ProxyError;
use super::dot_segments::resolve_dot_segments;

/// A configured origin: `http://authority[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: Scheme,
    authority: Authority,
    /// Empty, or starts with `/` and has no trailing `/`.
    prefix: String,
    /// `authority` as the `Host` header sent (made once, not per request).
    pub(super) host_header: HeaderValue,
    /// `scheme://authority/`: where connections to the origin go.
    pub(super) base: Uri,
}

impl Origin {
    /// Parses an origin from an `http://` or `https://` URI with an authority and an
    /// optional path prefix (no query).
    pub fn new(uri: &Uri) -> Result<Origin, ProxyError> {
        let scheme = match uri.scheme() {
            Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS => s.clone(),
            Some(s) => {
                return Err(ProxyError::InvalidOrigin(format!(
                    "{uri}: scheme {s} is not supported (only http:// and https://)"
                )));
            }
            None => {
                return Err(ProxyError::InvalidOrigin(format!(
                    "{uri}: needs a scheme (http:// or https://)"
                )));
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| ProxyError::InvalidOrigin(format!("{uri}: needs a host")))?
            .clone();
        if authority.as_str().contains('@') {
            return Err(ProxyError::InvalidOrigin(format!(
                "{uri}: credentials in the origin URI are not supported"
            )));
        }
        if uri.query().is_some() {
            return Err(ProxyError::InvalidOrigin(format!(
                "{uri}: an origin cannot have a query"
            )));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        let host_header = HeaderValue::from_str(authority.as_str())
            .map_err(|e| ProxyError::InvalidOrigin(format!("{uri}: {e}")))?;
        let base = Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| ProxyError::InvalidOrigin(format!("{uri}: {e}")))?;
        Ok(Origin {
            scheme,
            authority,
            prefix,
            host_header,
            base,
        })
    }

    /// The origin's `host[:port]`, used as `Host` unless `preserve_host`.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The path prefix every forwarded path is put under (`""` for none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The URI a request for `path_and_query` is sent to on this origin.
    pub fn target(&self, path_and_query: Option<&PathAndQuery>) -> Result<Uri, ProxyError> {
        let path = self.target_path(path_and_query)?;
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| ProxyError::BadRequest(format!("request target: {e}")))
    }

    /// The origin-form target (prefix, path, query) a request for `path_and_query` is sent
    /// with on this origin.
    pub(super) fn target_path(
        &self,
        path_and_query: Option<&PathAndQuery>,
    ) -> Result<PathAndQuery, ProxyError> {
        let pq = path_and_query.map(PathAndQuery::as_str).unwrap_or("/");
        if !pq.starts_with('/') {
            return Err(ProxyError::BadRequest(format!(
                "request target {pq:?} is not a path"
            )));
        }
        // The gate resolves dot segments first; this is the last line of defence so that a
        // path never climbs out of the prefix.
        let path = path_and_query.map_or("/", PathAndQuery::path);
        if !matches!(resolve_dot_segments(path), Ok(None)) {
            return Err(ProxyError::BadRequest(format!(
                "request path {path:?} has unresolved dot segments"
            )));
        }
        let joined = match (self.prefix.is_empty(), path_and_query) {
            (true, Some(pq)) => return Ok(pq.clone()),
            (true, None) => return Ok(PathAndQuery::from_static("/")),
            (false, _) => format!("{}{}", self.prefix, pq),
        };
        PathAndQuery::try_from(joined)
            .map_err(|e| ProxyError::BadRequest(format!("request target: {e}")))
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}
