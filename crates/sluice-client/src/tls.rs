//! TLS for clients of the nodes (the sidecar, `sluice-client`, a replica, a node calling its
//! peers) and the certificate a node serves: rustls with the ring provider.
//!
//! A certificate is chosen per handshake by [`ReloadingCert`], which looks at the files'
//! modification times at most once a second and loads them again when they changed: a renewed
//! certificate is served to new connections, and presented by new outgoing ones, without a
//! restart; connections already open keep theirs. A client checks its peers against the CA
//! file the same way ([`ReloadingRoots`]). A pair or CA that does not load (a half-written
//! file, a key that does not match) is logged and the previous one stays in use.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How often a handshake may look at the certificate files.
const RECHECK: Duration = Duration::from_secs(1);

/// The one crypto provider every TLS config here is built with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn bad(what: &str, path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("TLS: cannot load {what} {}: {e}", path.display()))
}

/// The certificate chain and key at these paths, as rustls signs with them.
pub fn load_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> io::Result<CertifiedKey> {
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("certificate", cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("certificate", cert, e))?;
    if certs.is_empty() {
        return Err(bad("certificate", cert, "no certificate in the file"));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("key", key, e))?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| bad("key", key, e))?;
    let pair = CertifiedKey::new(certs, signing);
    pair.keys_match().map_err(|e| bad("key", key, e))?;
    Ok(pair)
}

pub fn load_roots(ca: &Path) -> io::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad("CA", ca, e))? {
        roots
            .add(cert.map_err(|e| bad("CA", ca, e))?)
            .map_err(|e| bad("CA", ca, e))?;
    }
    Ok(roots)
}

/// A client that checks its peers against the CA file `ca` as it is now (or trusts no one
/// without it) and presents the pair `cert` serves now, if given: both follow their files (see
/// the module's docs). A node's primary with `--tls-auth-clients yes` asks its replicas for a
/// certificate, as Redis does; so do nodes the sidecar reaches.
pub fn reloading_config(
    provider: Arc<CryptoProvider>,
    ca: Option<&Path>,
    cert: Option<Arc<ReloadingCert>>,
) -> io::Result<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?;
    let builder = match ca {
        Some(ca) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ReloadingRoots::open(ca, provider)?)),
        None => builder.with_root_certificates(RootCertStore::empty()),
    };
    Ok(match cert {
        Some(cert) => builder.with_client_cert_resolver(cert),
        None => builder.with_no_client_auth(),
    })
}

/// A client that trusts the certificates in `ca` (PEM) and presents `identity` (certificate
/// chain and key, PEM) if given; both are read again when their files change.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientConfig, String> {
    let provider = provider();
    let cert = identity
        .map(|(cert, key)| {
            ReloadingCert::open(cert.to_path_buf(), key.to_path_buf(), provider.clone())
        })
        .transpose()
        .map_err(|e| e.to_string())?;
    reloading_config(provider, Some(ca), cert.map(Arc::new)).map_err(|e| e.to_string())
}

/// A certificate and its key, loaded again when their files change (see the module's docs):
/// served by a server, or presented by a client.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    pair: Arc<CertifiedKey>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl ReloadingCert {
    pub fn open(
        cert: PathBuf,
        key: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> io::Result<ReloadingCert> {
        // The stamps before the load: a file written in between changes them again, so the
        // next look reloads it.
        let stamps = (modified(&cert), modified(&key));
        let pair = Arc::new(load_pair(&cert, &key, &provider)?);
        Ok(ReloadingCert {
            current: Mutex::new(Current {
                pair,
                stamps,
                checked: Instant::now(),
            }),
            cert,
            key,
            provider,
        })
    }

    /// The pair to serve now, reloaded first if the files changed since the last look.
    pub fn pair(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock();
        if current.checked.elapsed() >= RECHECK {
            current.checked = Instant::now();
            let stamps = (modified(&self.cert), modified(&self.key));
            if stamps != current.stamps {
                match load_pair(&self.cert, &self.key, &self.provider) {
                    Ok(pair) => {
                        current.pair = Arc::new(pair);
                        current.stamps = stamps;
                        sluice_log::log(&format!(
                            "TLS certificate reloaded from {}",
                            self.cert.display()
                        ));
                    }
                    Err(e) => sluice_log::log(&format!("{e}; keeping the previous certificate")),
                }
            }
        }
        current.pair.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.pair())
    }
}

impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.pair())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The CA a client checks its peers against, loaded again when its file changes (at most one
/// look a second, as [`ReloadingCert`]); a file that does not load is logged and the previous
/// CA stays in use. The check itself is rustls's WebPKI verifier over the current roots.
#[derive(Debug)]
pub struct ReloadingRoots {
    ca: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<CurrentRoots>,
}

#[derive(Debug)]
struct CurrentRoots {
    verifier: Arc<WebPkiServerVerifier>,
    stamp: Option<SystemTime>,
    checked: Instant,
}

fn server_verifier(
    ca: &Path,
    provider: &Arc<CryptoProvider>,
) -> io::Result<Arc<WebPkiServerVerifier>> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(load_roots(ca)?), provider.clone())
        .build()
        .map_err(|e| bad("CA", ca, e))
}

impl ReloadingRoots {
    fn open(ca: &Path, provider: Arc<CryptoProvider>) -> io::Result<ReloadingRoots> {
        let stamp = modified(ca); // before the load, as in `ReloadingCert::open`
        let verifier = server_verifier(ca, &provider)?;
        Ok(ReloadingRoots {
            current: Mutex::new(CurrentRoots {
                verifier,
                stamp,
                checked: Instant::now(),
            }),
            ca: ca.to_path_buf(),
            provider,
        })
    }

    /// The verifier to check with now, reloaded first if the CA file changed.
    fn verifier(&self) -> Arc<WebPkiServerVerifier> {
        let mut current = self.current.lock();
        if current.checked.elapsed() >= RECHECK {
            current.checked = Instant::now();
            let stamp = modified(&self.ca);
            if stamp != current.stamp {
                match server_verifier(&self.ca, &self.provider) {
                    Ok(verifier) => {
                        current.verifier = verifier;
                        current.stamp = stamp;
                        sluice_log::log(&format!("TLS CA reloaded from {}", self.ca.display()));
                    }
                    Err(e) => sluice_log::log(&format!("{e}; keeping the previous CA")),
                }
            }
        }
        current.verifier.clone()
    }
}

impl ServerCertVerifier for ReloadingRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}
