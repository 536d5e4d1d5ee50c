//! Test certificates made with the `openssl` CLI: a CA and certificates it signs for
//! 127.0.0.1, the flags that give them to a node, `redis-cli --tls`, and etcd's TLS.

use crate::{Sluice, TempDir, output_text as text, redis_cli};

/// Whether the openssl CLI runs (it has no `--version`); a failure, not a skip, under CI.
pub fn have_openssl() -> bool {
    crate::have_command("openssl", "openssl", &["version"])
}

pub fn openssl(dir: &TempDir, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir.path())
        .args(args)
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", text(&out));
}

/// A test CA (`ca.crt`) and a certificate it signs for 127.0.0.1, good for a server and a
/// client: `NAME.crt` and `NAME.key`, with `NAME` as its common name.
#[derive(Debug)]
pub struct Certs(TempDir);

impl Default for Certs {
    fn default() -> Certs {
        Certs::new()
    }
}

impl Certs {
    pub fn new() -> Certs {
        let dir = TempDir::new("tls-certs");
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=Sluice Test CA",
            ],
        );
        std::fs::write(
            dir.path().join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        let certs = Certs(dir);
        certs.issue("node");
        certs
    }

    pub fn issue(&self, name: &str) {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            &self.0,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        openssl(
            &self.0,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
    }

    pub fn path(&self, file: &str) -> String {
        self.0.path().join(file).to_str().unwrap().to_string()
    }

    /// `--PREFIX-ca-cert-file`, `--PREFIX-cert-file`, `--PREFIX-key-file` with the test CA and
    /// the `node` certificate, in that order (the CA's two first).
    pub fn file_flags(&self, prefix: &str) -> Vec<String> {
        vec![
            format!("--{prefix}-ca-cert-file"),
            self.path("ca.crt"),
            format!("--{prefix}-cert-file"),
            self.path("node.crt"),
            format!("--{prefix}-key-file"),
            self.path("node.key"),
        ]
    }

    /// Replaces this set's CA, certificate and key in place with `other`'s, as a renewal
    /// does: whoever was given these paths finds new files there.
    pub fn install_from(&self, other: &Certs) {
        for f in ["ca.crt", "node.crt", "node.key"] {
            std::fs::copy(other.path(f), self.path(f)).expect("copy a test certificate file");
        }
    }

    /// The server flags for `--tls-port port` with the `node` certificate.
    pub fn server_flags(&self, port: u16, auth_clients: &str) -> Vec<String> {
        let mut flags = vec!["--tls-port".to_string(), port.to_string()];
        flags.extend(self.file_flags("tls"));
        flags.extend(["--tls-auth-clients".to_string(), auth_clients.to_string()]);
        flags
    }

    /// The sidecar with `args`, reaching its upstream over TLS: it trusts the test CA and
    /// presents the `node` certificate.
    pub fn start_proxy(&self, args: &[&str]) -> Sluice {
        let tls = self.file_flags("upstream-tls");
        let mut all = args.to_vec();
        all.extend(tls.iter().map(String::as_str));
        Sluice::start_proxy(&all)
    }

    /// redis-cli over TLS, presenting the `node` certificate if `with_cert`.
    pub fn cli(&self, port: u16, with_cert: bool, args: &[&str]) -> String {
        let (ca, crt, key) = (
            self.path("ca.crt"),
            self.path("node.crt"),
            self.path("node.key"),
        );
        let mut all = vec!["--tls", "--cacert", &ca];
        if with_cert {
            all.extend(["--cert", &crt, "--key", &key]);
        }
        all.extend_from_slice(args);
        text(&redis_cli(port, &all))
    }
}
