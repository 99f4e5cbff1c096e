//! TLS as a client: whom anteroom trusts when it connects out over TLS.
//!
//! Two outgoing connections use this module, both through rustls with the `ring` provider:
//!
//! - **Redis** (`rediss://`, one node or a Cluster; see `queue::redis`);
//! - **origins** (`https://`), through `hyper-rustls` on the pooled hyper-util client.
//!
//! Trust is the platform's CA store (`rustls-native-certs`: `/etc/ssl/certs` on Debian,
//! honouring `SSL_CERT_FILE` / `SSL_CERT_DIR`), unless a CA file is configured
//! (`redis.ca_file`, `origin_ca_file`), which then *replaces* the platform store for that
//! connection: a private CA is trusted only where the operator said so, and a public CA
//! cannot vouch for a private service. The platform store, not a bundled `webpki-roots`
//! copy, because operators already manage it (distribution updates, `update-ca-certificates`
//! for a corporate CA) and a copy frozen at build time would go stale with the binary.
//!
//! Certificate checks can never be turned off: there is no "insecure" switch, and Redis's
//! `#insecure` URL fragment is refused at `check` time.
//!
//! Kafka is the exception to "rustls everywhere": librdkafka does its own TLS with OpenSSL
//! (see `events`), configured through `kafka.properties`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Once};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A PEM file of CA certificates, read and checked when the configuration is loaded, so a
/// bad path or a file with no certificate is a config error naming the key, never a
/// failure at the first connection.
#[derive(Clone, PartialEq, Eq)]
pub struct CaFile {
    /// Where the file was read from, for messages.
    pub path: PathBuf,
    /// The file's bytes as read (PEM), for the Redis crate, which parses them itself.
    pub pem: Vec<u8>,
    /// How many certificates it holds (for `anteroom check`'s summary).
    pub certificates: usize,
}

impl std::fmt::Debug for CaFile {
    // The path and the count say all that matters; the PEM is long and public anyway.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("certificates", &self.certificates)
            .finish()
    }
}

/// Why a CA file, or the platform's trust store, cannot be used. The message says what is
/// wrong; the caller adds the key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("cannot read the CA file {}: {source}", path.display())]
    Read {
        /// The CA file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The file is not PEM.
    #[error("{} is not a PEM CA file: {reason}", path.display())]
    NotPem {
        /// The CA file.
        path: PathBuf,
        /// What the PEM parser said.
        reason: String,
    },
    /// The file holds no certificate.
    #[error(
        "{} holds no certificate (expected one or more -----BEGIN CERTIFICATE----- blocks)",
        path.display()
    )]
    NoCertificate {
        /// The CA file.
        path: PathBuf,
    },
    /// None of the file's certificates can be a trust anchor.
    #[error("{}: none of its {count} certificate(s) can be used as a trust anchor", path.display())]
    NoAnchor {
        /// The CA file.
        path: PathBuf,
        /// How many certificates it holds.
        count: usize,
    },
    /// No CA file was given and the platform's store is empty.
    #[error(
        "no CA certificates found in the system store (install the ca-certificates package, \
         or set origin_ca_file)"
    )]
    NoSystemRoots,
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Setup(#[from] rustls::Error),
}

impl CaFile {
    /// Reads `path` and checks that it holds at least one parsable PEM certificate.
    pub fn read(path: &Path) -> Result<CaFile, TlsError> {
        let pem = std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })?;
        let certs = parse_pem(&pem).map_err(|e| TlsError::NotPem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate {
                path: path.to_owned(),
            });
        }
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(certs.iter().cloned());
        if added == 0 {
            return Err(TlsError::NoAnchor {
                path: path.to_owned(),
                count: certs.len(),
            });
        }
        Ok(CaFile {
            path: path.to_owned(),
            pem,
            certificates: added,
        })
    }

    fn roots(&self) -> RootCertStore {
        let mut store = RootCertStore::empty();
        // Checked parsable in `read`; a certificate that is not is skipped, as there.
        store.add_parsable_certificates(parse_pem(&self.pem).unwrap_or_default());
        store
    }
}

fn parse_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, rustls::pki_types::pem::Error> {
    CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()
}

/// Makes `ring` rustls's process-wide provider. The Redis crate builds its rustls config
/// with the default provider; with exactly one provider compiled in rustls would pick it by
/// itself, but saying so keeps that true if a dependency ever adds another.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error means a provider is already installed, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The platform's trust store. Unreadable entries are skipped with a warning; an empty
/// store is an error, because then no `https://` origin could ever be reached.
fn platform_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "skipping part of the system CA store");
    }
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(found.certs);
    if store.is_empty() {
        return Err(TlsError::NoSystemRoots);
    }
    Ok(store)
}

/// The rustls configuration for `https://` origins: the CA file's certificates if one is
/// given, else the platform's store. ALPN is left to `hyper-rustls`, which offers only
/// `http/1.1` as the client is built (like the plain client, so the pool, keep-alive and
/// WebSocket upgrades behave the same over TLS).
pub fn origin_tls_config(ca: Option<&CaFile>) -> Result<rustls::ClientConfig, TlsError> {
    install_crypto_provider();
    let roots = match ca {
        Some(ca) => ca.roots(),
        None => platform_roots()?,
    };
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

/// A configuration that trusts no certificate: for clients that only speak plain HTTP.
pub fn no_trust() -> rustls::ClientConfig {
    install_crypto_provider();
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth()
}

/// A connector (a `tower` service from `Uri` to a connection) whose whole connect, TCP and
/// TLS handshake, must finish within a limit. hyper-util's own connect timeout covers only
/// TCP; an origin that accepts and then never answers the handshake would otherwise hold
/// the request until the response timeout.
#[derive(Clone, Debug)]
pub struct ConnectTimeout<C> {
    inner: C,
    limit: Duration,
}

impl<C> ConnectTimeout<C> {
    /// Wraps `inner` so that each whole connect must finish within `limit`.
    pub fn new(inner: C, limit: Duration) -> Self {
        ConnectTimeout { inner, limit }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<C> tower_service::Service<http::Uri> for ConnectTimeout<C>
where
    C: tower_service::Service<http::Uri>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(result) => result.map_err(Into::into),
                // TimedOut, so the proxy reports a timeout (504), not a refusal (502).
                Err(_) => Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connecting to the origin (TCP and TLS handshake) timed out",
                )) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_must_exist_and_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let missing = CaFile::read(&dir.path().join("nope.pem")).unwrap_err();
        assert!(
            missing.to_string().contains("cannot read the CA file"),
            "{missing}"
        );

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "just some text\n").unwrap();
        let err = CaFile::read(&empty).unwrap_err();
        assert!(err.to_string().contains("holds no certificate"), "{err}");

        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = CaFile::read(&broken).unwrap_err();
        assert!(err.to_string().contains("is not a PEM CA file"), "{err}");

        let ca = anteroom_fixtures::TestCa::new();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, ca.cert_pem()).unwrap();
        let read = CaFile::read(&good).unwrap();
        assert_eq!(read.certificates, 1);
        assert!(!format!("{read:?}").contains("BEGIN"), "Debug is short");
        assert!(origin_tls_config(Some(&read)).is_ok());
    }
}
