//! Certificates for the TLS tests, made at run time: a CA, a server
//! certificate for 127.0.0.1 and localhost, client certificates, a token
//! file.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};

use super::tempdir;

/// The bearer token in the token file.
pub const TOKEN: &str = "client-a-0123456789abcdef";

/// A CA, a server certificate for 127.0.0.1 and localhost, and client
/// certificates: one from the CA, one from a CA nobody trusts. PEM files
/// in `dir`.
pub struct Pki {
    pub dir: tempdir::Dir,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempdir::Dir::new();
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
        };
        let (trusted, untrusted) = (ca("test CA"), ca("nobody's CA"));
        let write = |name: &str, text: String| {
            std::fs::write(dir.0.join(name), text).expect("write PEM");
        };
        write("ca.pem", trusted.pem());
        let leaf = |sans: Vec<String>, usage, issuer: &CertifiedIssuer<'_, KeyPair>, name: &str| {
            let mut params = CertificateParams::new(sans).expect("params");
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, issuer).expect("sign");
            write(&format!("{name}.pem"), cert.pem());
            write(&format!("{name}.key"), key.serialize_pem());
        };
        leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            &trusted,
            "server",
        );
        leaf(
            vec!["client-a".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &trusted,
            "client",
        );
        leaf(
            vec!["intruder".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &untrusted,
            "intruder",
        );
        write("tokens", format!("{TOKEN}\n"));
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.0.join(name).to_string_lossy().into_owned()
    }

    /// A client config trusting the test CA, with the client certificate
    /// `name` (`client`, `intruder`) or none.
    pub fn client(&self, name: Option<&str>) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.path("ca.pem")).expect("ca") {
            roots.add(c.expect("cert")).expect("add");
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        Arc::new(match name {
            None => builder.with_no_client_auth(),
            Some(name) => {
                let chain = CertificateDer::pem_file_iter(self.path(&format!("{name}.pem")))
                    .expect("chain")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("chain");
                let key =
                    PrivateKeyDer::from_pem_file(self.path(&format!("{name}.key"))).expect("key");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("client cert")
            }
        })
    }
}
