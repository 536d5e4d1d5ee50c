//! A TLS client config for reaching nodes on their `--tls-port`: the CA that signs their
//! certificates, and this client's own certificate for nodes with `--tls-auth-clients yes`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// A client that trusts the certificates in `ca` (PEM) and presents `identity` (certificate
/// chain and key, PEM) if given.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientConfig, String> {
    let bad = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        format!("TLS: cannot load {what} {}: {e}", path.display())
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad("CA", ca, &e))? {
        roots
            .add(cert.map_err(|e| bad("CA", ca, &e))?)
            .map_err(|e| bad("CA", ca, &e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let Some((cert, key)) = identity else {
        return Ok(builder.with_no_client_auth());
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("certificate", cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("certificate", cert, &e))?;
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("key", key, &e))?;
    builder
        .with_client_auth_cert(chain, der)
        .map_err(|e| bad("key", key, &e))
}
