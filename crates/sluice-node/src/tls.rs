//! TLS settings (rustls, ring provider): the server's config for `--tls-port`, the client's
//! config for `--tls-replication`, and the certificate and CA that follow their files.
//!
//! The certificate is chosen per handshake by [`ReloadingCert`], which looks at the files'
//! modification times at most once a second and loads them again when they changed: a renewed
//! certificate is served to new connections, and presented by new outgoing ones (a replica
//! connecting to its primary), without a restart; connections already open keep theirs. The
//! client checks its peers against the CA file the same way ([`ReloadingRoots`]). A pair or CA
//! that does not load (a half-written file, a key that does not match) is logged and the
//! previous one stays in use.
//!
//! `--tls-auth-clients` is Redis's: `yes` (the default) requires a client certificate signed by
//! `--tls-ca-cert-file`, `optional` checks one if the client sends it, `no` asks for none.

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
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use crate::config::{AuthClients, Config};

/// How often a handshake may look at the certificate files.
const RECHECK: Duration = Duration::from_secs(1);

/// The TLS side of a node: what its TLS listener serves, and how it connects as a client.
#[derive(Debug)]
pub struct Tls {
    pub server: Arc<ServerConfig>,
    /// For `--tls-replication` and `--tls-cluster`: trusts `--tls-ca-cert-file`, presents the node's certificate.
    pub client: Arc<ClientConfig>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn bad(what: &str, path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("TLS: cannot load {what} {}: {e}", path.display()))
}

/// The certificate chain and key at these paths, as rustls signs with them.
fn load_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> io::Result<CertifiedKey> {
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

fn load_roots(ca: &Path) -> io::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad("CA", ca, e))? {
        roots
            .add(cert.map_err(|e| bad("CA", ca, e))?)
            .map_err(|e| bad("CA", ca, e))?;
    }
    Ok(roots)
}

impl Tls {
    /// The TLS settings of `config`, or `None` when nothing in it uses TLS.
    pub fn from_config(config: &Config) -> io::Result<Option<Tls>> {
        let wanted = config.tls_port.is_some()
            || config.tls_replication
            || config.tls_cluster
            || config.metrics_tls
            || config.grpc_tls;
        if !wanted {
            return Ok(None);
        }
        if config.tls_cluster && config.tls_port.is_none() {
            return Err(io::Error::other(
                "TLS: --tls-cluster yes needs --tls-port (the other nodes reach this one there)",
            ));
        }
        let (Some(cert), Some(key)) = (&config.tls_cert_file, &config.tls_key_file) else {
            return Err(io::Error::other(
                "TLS: --tls-port, --tls-replication, --tls-cluster, --metrics-tls and --grpc-tls need --tls-cert-file and --tls-key-file",
            ));
        };
        let provider = provider();
        let roots = config
            .tls_ca_cert_file
            .as_deref()
            .map(load_roots)
            .transpose()?;
        let resolver = Arc::new(ReloadingCert::open(
            cert.clone(),
            key.clone(),
            provider.clone(),
        )?);
        let verifier = match (config.tls_auth_clients, &roots) {
            (AuthClients::No, _) => WebPkiClientVerifier::no_client_auth(),
            (_, None) => {
                return Err(io::Error::other(
                    "TLS: --tls-auth-clients yes|optional needs --tls-ca-cert-file (or set --tls-auth-clients no)",
                ));
            }
            (mode, Some(roots)) => {
                let b = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots.clone()),
                    provider.clone(),
                );
                let b = if mode == AuthClients::Optional {
                    b.allow_unauthenticated()
                } else {
                    b
                };
                b.build().map_err(io::Error::other)?
            }
        };
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(resolver.clone());
        let client = client_config(provider, config.tls_ca_cert_file.as_deref(), resolver)?;
        Ok(Some(Tls {
            server: Arc::new(server),
            client: Arc::new(client),
        }))
    }
}

impl Tls {
    /// The server config offering one ALPN protocol (`h2` for gRPC, whose clients insist on
    /// it; `http/1.1` for metrics); the certificate still follows its files.
    pub fn with_alpn(&self, protocol: &[u8]) -> Arc<ServerConfig> {
        let mut config = (*self.server).clone();
        config.alpn_protocols = vec![protocol.to_vec()];
        Arc::new(config)
    }
}

/// A client that trusts `--tls-ca-cert-file` and presents this node's own certificate (a
/// primary with `--tls-auth-clients yes` asks its replicas for one, as Redis does). Both follow
/// their files as the server's certificate does: each handshake presents the pair `cert`
/// serves now and checks the peer against the CA file as it is now.
fn client_config(
    provider: Arc<CryptoProvider>,
    ca: Option<&Path>,
    cert: Arc<ReloadingCert>,
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
    Ok(builder.with_client_cert_resolver(cert))
}

/// The server certificate, loaded again when its files change (see the module's docs).
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
        let pair = Arc::new(load_pair(&cert, &key, &provider)?);
        let stamps = (modified(&cert), modified(&key));
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
struct ReloadingRoots {
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
        let verifier = server_verifier(ca, &provider)?;
        Ok(ReloadingRoots {
            current: Mutex::new(CurrentRoots {
                verifier,
                stamp: modified(ca),
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

/// Connects to `host:port` over TLS and returns a plain loopback socket whose bytes a task on
/// the current runtime carries through the TLS session both ways: the replica's link code
/// reads and writes a `TcpStream` whatever the transport.
pub async fn connect_relay(
    host: &str,
    port: u16,
    config: Arc<ClientConfig>,
) -> io::Result<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
    let _ = tcp.set_nodelay(true);
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    let (mut near, far) = loopback_pair().await?;
    tokio::spawn(async move {
        let _ = tokio::io::copy_bidirectional(&mut tls, &mut near).await;
    });
    Ok(far)
}

/// Two ends of one loopback TCP connection.
pub async fn loopback_pair() -> io::Result<(tokio::net::TcpStream, tokio::net::TcpStream)> {
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let (far, near) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    let far = far?;
    let (near, from) = near?;
    // Another local process could have connected first: only our own socket is accepted.
    if from != far.local_addr()? {
        return Err(io::Error::other(
            "TLS relay: an unexpected local connection",
        ));
    }
    let _ = far.set_nodelay(true);
    let _ = near.set_nodelay(true);
    Ok((near, far))
}

/// How long a side port's client may take over its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS session accepted on a side port (metrics, gRPC), handshake done.
pub type Accepted = (
    tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    std::net::SocketAddr,
);

/// Accepts on `listener` and completes each handshake in a task of its own (a client that
/// stalls its handshake holds up only itself), handing finished sessions to the receiver.
pub fn accept_tls(
    listener: tokio::net::TcpListener,
    config: Arc<ServerConfig>,
) -> tokio::sync::mpsc::Receiver<Accepted> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(a) => a,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            if tx.is_closed() {
                return;
            }
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                if let Ok(Ok(tls)) =
                    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    let _ = tx.send((tls, peer)).await;
                }
            });
        }
    });
    rx
}

/// The metrics port over TLS, as axum serves it.
#[derive(Debug)]
pub struct TlsListener {
    sessions: tokio::sync::mpsc::Receiver<Accepted>,
    local: std::net::SocketAddr,
}

impl TlsListener {
    pub fn new(listener: tokio::net::TcpListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        Ok(TlsListener {
            sessions: accept_tls(listener, config),
            local,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.sessions.recv().await {
            Some(session) => session,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
