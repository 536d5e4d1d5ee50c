//! TLS settings (rustls, ring provider): the server's config for `--tls-port`, the client's
//! config for `--tls-replication`, and the certificate and CA that follow their files.
//!
//! The certificate is chosen per handshake by `sluice_client::tls::ReloadingCert`, which loads
//! its files again when they change: a renewed certificate is served to new connections, and
//! presented by new outgoing ones (a replica connecting to its primary), without a restart.
//! The client checks its peers against the CA file as it is now, the same way.
//!
//! `--tls-auth-clients` is Redis's: `yes` (the default) requires a client certificate signed by
//! `--tls-ca-cert-file`, `optional` checks one if the client sends it, `no` asks for none.
//!
//! A handshake the node refuses (a certificate it does not accept, no protocol in common, an
//! alert from the client) is logged at verbose with the peer and rustls's reason, and counted
//! (`tls_handshakes_refused` in INFO's stats): [`refused`], on the failure path only.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};
use sluice_client::tls::{ReloadingCert, load_roots, provider, reloading_config};

use crate::config::{AuthClients, Config};

/// The TLS side of a node: what its TLS listener serves, and how it connects as a client.
#[derive(Debug)]
pub struct Tls {
    pub server: Arc<ServerConfig>,
    /// For `--tls-replication` and `--tls-cluster`: trusts `--tls-ca-cert-file`, presents the node's certificate.
    pub client: Arc<ClientConfig>,
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
        let client =
            reloading_config(provider, config.tls_ca_cert_file.as_deref(), Some(resolver))?;
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

/// Notes one refused TLS handshake from `peer`: a verbose log line with rustls's reason, and
/// [`crate::stats::TLS_HANDSHAKES_REFUSED`].
pub fn refused(peer: &dyn std::fmt::Display, why: &dyn std::fmt::Display) {
    crate::stats::TLS_HANDSHAKES_REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    sluice_log::verbose(&format!("TLS handshake refused from {peer}: {why}"));
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
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send((tls, peer)).await;
                    }
                    // tokio-rustls's word for rustls's own errors; a client that just went
                    // away (EOF, reset) refused nothing.
                    Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => refused(&peer, &e),
                    _ => {}
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
