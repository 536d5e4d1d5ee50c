//! TLS to etcd: the CA that signs etcd's certificate and, for an etcd started with
//! `--client-cert-auth`, the certificate and key this process presents (PEM files).
//!
//! A process sets them once at start ([`use_tls`]); every [`Client::connect`](crate::Client::connect)
//! after that speaks TLS, whichever task connects (the slot table, the rules, the regions),
//! so no connecting call site needs to carry them.
//!
//! # Invariants
//!
//! - With TLS set, every URL is reached over TLS: `https://HOST:PORT`, or `HOST:PORT`; an
//!   `http://` URL is refused rather than sent in the clear.
//! - Without it, an `https://` URL is refused: there is no CA to check etcd's certificate with.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// The etcd TLS flags the node and the admin tool take.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Reach etcd over TLS, trusting this CA (PEM) for etcd's certificate (etcd's
    /// `--trusted-ca-file` signs it).
    #[arg(long = "etcd-tls-ca-cert-file", value_name = "FILE")]
    pub etcd_tls_ca_cert_file: Option<PathBuf>,

    /// The client certificate (PEM) presented to an etcd started with `--client-cert-auth`;
    /// with `--etcd-tls-key-file`.
    #[arg(
        long = "etcd-tls-cert-file",
        value_name = "FILE",
        requires = "etcd_tls_key_file",
        requires = "etcd_tls_ca_cert_file"
    )]
    pub etcd_tls_cert_file: Option<PathBuf>,

    /// The private key of `--etcd-tls-cert-file` (PEM).
    #[arg(
        long = "etcd-tls-key-file",
        value_name = "FILE",
        requires = "etcd_tls_cert_file"
    )]
    pub etcd_tls_key_file: Option<PathBuf>,
}

/// The process's TLS settings for etcd: `None` until [`use_tls`] sets some.
static TLS: RwLock<Option<ClientTlsConfig>> = RwLock::new(None);

fn read(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("etcd TLS: cannot read {what} {}: {e}", path.display()))
}

/// The PEM certificates in the file at `path`, which must hold at least one.
fn read_certs(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    let pem = read(what, path)?;
    let bad = |why: &str| format!("etcd TLS: cannot load {what} {}: {why}", path.display());
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no certificate in the file"));
    }
    Ok(pem)
}

/// The PEM private key in the file at `path`.
fn read_key(path: &Path) -> Result<Vec<u8>, String> {
    let pem = read("key", path)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("etcd TLS: cannot load key {}: {e}", path.display()))?;
    Ok(pem)
}

/// Loads the files `args` names and makes every later connection to etcd use them (nothing
/// when `args` names no CA).
///
/// # Errors
/// A file that cannot be read or does not hold what it should, in words for the start's log.
pub fn use_tls(args: &TlsArgs) -> Result<(), String> {
    let Some(ca) = &args.etcd_tls_ca_cert_file else {
        return Ok(());
    };
    let mut config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read_certs("CA", ca)?))
        .assume_http2(true);
    if let (Some(cert), Some(key)) = (&args.etcd_tls_cert_file, &args.etcd_tls_key_file) {
        config = config.identity(Identity::from_pem(
            read_certs("certificate", cert)?,
            read_key(key)?,
        ));
    }
    // tonic parses the PEM when an endpoint takes the settings: do it now, so a bad file
    // stops the start instead of every later connection.
    Endpoint::from_static("https://localhost")
        .tls_config(config.clone())
        .map_err(|e| format!("etcd TLS: {}", crate::chain(&e)))?;
    *TLS.write().unwrap_or_else(|p| p.into_inner()) = Some(config);
    Ok(())
}

/// The endpoint for `url` with the process's TLS settings, by the module's invariants.
pub(crate) fn endpoint(url: &str) -> Result<Endpoint, String> {
    let tls = TLS.read().unwrap_or_else(|p| p.into_inner()).clone();
    let url = match (url.split_once("://"), &tls) {
        (None, None) => format!("http://{url}"),
        (None, Some(_)) => format!("https://{url}"),
        (Some(("https", _)), None) => {
            return Err(format!(
                "{url} is https: give --etcd-tls-ca-cert-file to check etcd's certificate"
            ));
        }
        (Some(("http", _)), Some(_)) => {
            return Err(format!(
                "{url} is plain http while --etcd-tls-ca-cert-file is set: use https://"
            ));
        }
        _ => url.to_string(),
    };
    let endpoint = Endpoint::from_shared(url).map_err(|e| crate::chain(&e))?;
    match tls {
        Some(config) => endpoint
            .tls_config(config)
            .map_err(|e| format!("etcd TLS: {}", crate::chain(&e))),
        None => Ok(endpoint),
    }
}
