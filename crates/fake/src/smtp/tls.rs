//! STARTTLS for the fake SMTP listener: a throwaway CA and a server certificate it signs, made
//! at start (rcgen, ring), for localhost, 127.0.0.1, ::1 and the listening address. The CA's
//! PEM goes to `<log>.smtp-cert.pem` (0600) so clients can trust it (`ca_file=`, `cafile=`).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use sendonce_domain::error::{Error, Result};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The acceptor and where the CA certificate was written.
#[derive(Clone)]
pub struct Tls {
    pub(super) acceptor: tokio_rustls::TlsAcceptor,
    /// `<log>.smtp-cert.pem`.
    pub cert_file: PathBuf,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

/// `<log>.smtp-cert.pem`.
pub fn cert_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".smtp-cert.pem");
    PathBuf::from(s)
}

impl Tls {
    /// Make a CA and a server certificate (names: localhost and `ips` besides the loopback
    /// addresses) and write the CA to `<log>.smtp-cert.pem`.
    pub fn generate(log: &Path, ips: &[IpAddr]) -> Result<Self> {
        let fail = |what: &str, e: rcgen::Error| {
            Error::invalid(format!("fake provider: cannot make the SMTP {what}: {e}"))
        };
        let ca_key = KeyPair::generate().map_err(|e| fail("CA key", e))?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "sendonce fake-provider SMTP CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).map_err(|e| fail("CA", e))?;
        let issuer = Issuer::new(ca, ca_key);

        let key = KeyPair::generate().map_err(|e| fail("server key", e))?;
        let mut params = CertificateParams::new(vec!["localhost".to_string()])
            .map_err(|e| fail("certificate", e))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let mut all: Vec<IpAddr> =
            vec![[127, 0, 0, 1].into(), std::net::Ipv6Addr::LOCALHOST.into()];
        all.extend(ips.iter().filter(|ip| !ip.is_unspecified()));
        all.dedup();
        for ip in all {
            if !params.subject_alt_names.contains(&SanType::IpAddress(ip)) {
                params.subject_alt_names.push(SanType::IpAddress(ip));
            }
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| fail("certificate", e))?;

        let cert_file = cert_path(log);
        sendonce_domain::files::write_atomic(&cert_file, ca_cert.pem().as_bytes())?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth().with_single_cert(
                    vec![cert.der().clone(), ca_cert.der().clone()],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
                )
            })
            .map_err(|e| Error::invalid(format!("fake provider: SMTP TLS setup: {e}")))?;
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            cert_file,
        })
    }
}
