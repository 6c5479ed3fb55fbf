//! The checks that a bounce notification really came from its provider, pure (issue 45):
//! Mailgun's HMAC-SHA256 over `timestamp ‖ token` (hex, a timestamp within
//! [`TOLERANCE_SECS`]), SendGrid's ECDSA P-256 signature over `timestamp ‖ body` verified with
//! the public key the user configures (base64 DER SPKI, as SendGrid shows it), a bearer token
//! compared in constant time (Brevo), and Amazon SNS message signatures (version 1:
//! SHA1withRSA, version 2: SHA256withRSA over SNS's documented string to sign) verified with
//! the signing certificate the user configures, after the `SigningCertURL` is checked to be an
//! https URL on `sns.<region>.amazonaws.com`. ring does the cryptography; rustls-webpki parses
//! the certificate. No I/O: nothing is fetched.

use crate::webhook::{Refusal, TOLERANCE_SECS};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{
    AlgorithmIdentifier, CertificateDer, InvalidSignature, SignatureVerificationAlgorithm,
};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Longest Mailgun token looked at (Mailgun's are 50 characters).
const MAX_TOKEN: usize = 512;
/// Longest signature header or field looked at (an RSA-4096 signature is 684 base64 chars).
const MAX_SIGNATURE: usize = 2048;

/// The timestamp (Unix seconds, as text) parsed and within [`TOLERANCE_SECS`] of `now_secs`.
fn fresh(timestamp: &str, now_secs: i64) -> Result<(), Refusal> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| "the webhook timestamp is not a number of seconds".to_string())?;
    if now_secs.abs_diff(ts) > TOLERANCE_SECS.unsigned_abs() {
        return Err(format!(
            "the webhook timestamp is more than {TOLERANCE_SECS} s away from this server's clock"
        ));
    }
    Ok(())
}

fn hmac(key: &[u8]) -> HmacSha256 {
    match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

/// Mailgun's signature of (timestamp, token): HMAC-SHA256 with the webhook signing key, hex.
pub fn mailgun_sign(key: &[u8], timestamp: &str, token: &str) -> String {
    let mut m = hmac(key);
    m.update(timestamp.as_bytes());
    m.update(token.as_bytes());
    hex(&m.finalize().into_bytes())
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Check a Mailgun webhook's `signature` object: the timestamp is fresh, the token is present
/// and bounded, and `signature` is the hex HMAC-SHA256 of `timestamp ‖ token` (constant-time).
pub fn mailgun_verify(
    key: &[u8],
    timestamp: &str,
    token: &str,
    signature: &str,
    now_secs: i64,
) -> Result<(), Refusal> {
    fresh(timestamp, now_secs)?;
    if token.is_empty() || token.len() > MAX_TOKEN {
        return Err("the Mailgun token is empty or too long".into());
    }
    let tag = unhex(signature.trim()).ok_or("the Mailgun signature is not hex")?;
    let mut m = hmac(key);
    m.update(timestamp.as_bytes());
    m.update(token.as_bytes());
    m.verify_slice(&tag)
        .map_err(|_| "the Mailgun signature does not match".to_string())
}

/// The DER prefix of every P-256 public key in SubjectPublicKeyInfo form with an uncompressed
/// point (DER is canonical: `SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING
/// 04‖X‖Y }` has exactly these bytes before the 65-byte point). SendGrid shows its
/// verification key in this form.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A SendGrid verification key: the uncompressed P-256 point of its SPKI.
#[derive(Clone, PartialEq, Eq)]
pub struct SendgridKey(Vec<u8>);

impl std::fmt::Debug for SendgridKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SendgridKey(..)")
    }
}

impl SendgridKey {
    /// The key as SendGrid shows it: base64 of the DER SubjectPublicKeyInfo (a PEM's
    /// `-----BEGIN PUBLIC KEY-----` lines are taken off first). The error never quotes it.
    pub fn parse(text: &str) -> Result<SendgridKey, Refusal> {
        let b64: String = text
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .flat_map(|l| l.split_whitespace())
            .collect();
        let der = STANDARD
            .decode(b64)
            .map_err(|_| "the SendGrid verification key is not base64".to_string())?;
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 0x04 => Ok(SendgridKey(point.to_vec())),
            _ => Err(
                "the SendGrid verification key is not a P-256 public key (base64 DER \
                      SubjectPublicKeyInfo, as SendGrid shows it)"
                    .into(),
            ),
        }
    }
}

/// Check a SendGrid Event Webhook request: the timestamp header is fresh and `signature`
/// (base64 of an ASN.1 DER ECDSA signature) is the key's signature of `timestamp ‖ body`.
pub fn sendgrid_verify(
    key: &SendgridKey,
    timestamp: &str,
    body: &[u8],
    signature: &str,
    now_secs: i64,
) -> Result<(), Refusal> {
    fresh(timestamp, now_secs)?;
    sendgrid_signature(key, timestamp, body, signature)
}

/// The ECDSA check of [`sendgrid_verify`] alone (no clock: the published examples are old).
pub fn sendgrid_signature(
    key: &SendgridKey,
    timestamp: &str,
    body: &[u8],
    signature: &str,
) -> Result<(), Refusal> {
    if signature.len() > MAX_SIGNATURE {
        return Err("the signature header is too long".into());
    }
    let sig = STANDARD
        .decode(signature.trim())
        .map_err(|_| "the SendGrid signature is not base64".to_string())?;
    let mut msg = Vec::with_capacity(timestamp.len() + body.len());
    msg.extend_from_slice(timestamp.as_bytes());
    msg.extend_from_slice(body);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_ASN1, &key.0)
        .verify(&msg, &sig)
        .map_err(|_| "the SendGrid signature does not match".to_string())
}

/// Whether an `Authorization: Bearer ...` header carries exactly `expected`, compared in
/// constant time on the digests (lengths do not show).
pub fn bearer_matches(header: Option<&str>, expected: &str) -> bool {
    let presented = header
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or_default();
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    crate::token::same_hash(&a, &b) && header.is_some()
}

/// An SNS signing certificate, as the user configured it (PEM or DER).
#[derive(Clone)]
pub struct SnsCert(CertificateDer<'static>);

impl std::fmt::Debug for SnsCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnsCert(..)")
    }
}

impl SnsCert {
    /// The certificate of a PEM file (`-----BEGIN CERTIFICATE-----`) or of DER bytes, checked
    /// to parse as an X.509 certificate.
    pub fn parse(bytes: &[u8]) -> Result<SnsCert, Refusal> {
        let der = match CertificateDer::from_pem_slice(bytes) {
            Ok(c) => c,
            Err(_) => CertificateDer::from(bytes.to_vec()),
        };
        webpki::EndEntityCert::try_from(&der)
            .map_err(|e| format!("the SNS signing certificate does not parse: {e}"))?;
        Ok(SnsCert(der))
    }
}

/// `sha1WithRSAEncryption` (1.2.840.113549.1.1.5) with NULL parameters, the DER content of its
/// AlgorithmIdentifier (as `rustls_pki_types::alg_id` writes the others).
const SHA1_WITH_RSA: [u8; 13] = [
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05, 0x05, 0x00,
];

/// SNS signature version 1 (SHA1withRSA): ring's legacy PKCS#1 v1.5 SHA-1 verification, for
/// rustls-webpki to call with the certificate's RSA key. rustls-webpki has no SHA-1 algorithm
/// of its own (it is refused for TLS), and SNS still signs with it unless a topic asks for 2.
#[derive(Debug)]
struct Sha1Rsa;

impl SignatureVerificationAlgorithm for Sha1Rsa {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
            public_key,
        )
        .verify(message, signature)
        .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        rustls_pki_types::alg_id::RSA_ENCRYPTION
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        AlgorithmIdentifier::from_slice(&SHA1_WITH_RSA)
    }
}

/// The fields of one SNS message that its signature covers (and that sendonce reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnsMessage {
    pub kind: String,
    pub message_id: String,
    pub topic_arn: String,
    pub subject: Option<String>,
    pub message: String,
    pub timestamp: String,
    pub token: Option<String>,
    pub subscribe_url: Option<String>,
    pub signature_version: String,
    pub signature: String,
    pub signing_cert_url: String,
}

impl SnsMessage {
    /// The fields of an SNS HTTP(S) message body (a JSON object of strings).
    pub fn parse(body: &[u8]) -> Result<SnsMessage, Refusal> {
        let v: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| format!("the SNS message is not JSON: {e}"))?;
        let text = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        let need = |k: &str| text(k).ok_or_else(|| format!("the SNS message has no {k}"));
        Ok(SnsMessage {
            kind: need("Type")?,
            message_id: need("MessageId")?,
            topic_arn: need("TopicArn")?,
            subject: text("Subject"),
            message: need("Message")?,
            timestamp: need("Timestamp")?,
            token: text("Token"),
            subscribe_url: text("SubscribeURL"),
            signature_version: need("SignatureVersion")?,
            signature: need("Signature")?,
            signing_cert_url: need("SigningCertURL")?,
        })
    }

    /// SNS's string to sign: `Key\nvalue\n` for each signed key in byte order of the key
    /// names; a Notification signs Message, MessageId, Subject (if present), Timestamp,
    /// TopicArn, Type; a (Un)SubscriptionConfirmation signs Message, MessageId, SubscribeURL,
    /// Timestamp, Token, TopicArn, Type.
    pub fn string_to_sign(&self) -> Result<String, Refusal> {
        let mut pairs: Vec<(&str, &str)> =
            vec![("Message", &self.message), ("MessageId", &self.message_id)];
        match self.kind.as_str() {
            "Notification" => {
                if let Some(s) = &self.subject {
                    pairs.push(("Subject", s));
                }
                pairs.push(("Timestamp", &self.timestamp));
            }
            "SubscriptionConfirmation" | "UnsubscribeConfirmation" => {
                let url = self
                    .subscribe_url
                    .as_deref()
                    .ok_or("SubscribeURL is missing")?;
                let token = self.token.as_deref().ok_or("Token is missing")?;
                pairs.push(("SubscribeURL", url));
                pairs.push(("Timestamp", &self.timestamp));
                pairs.push(("Token", token));
            }
            other => return Err(format!("unknown SNS message Type {other:?}")),
        }
        pairs.push(("TopicArn", &self.topic_arn));
        pairs.push(("Type", &self.kind));
        Ok(pairs.iter().map(|(k, v)| format!("{k}\n{v}\n")).collect())
    }
}

/// Whether `url` is an https URL of SNS's certificates: host `sns.<region>.amazonaws.com`
/// (or `.amazonaws.com.cn`), no user, port or query, a path ending in `.pem`.
pub fn sns_cert_url_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://") else {
        return false;
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let region = host
        .strip_prefix("sns.")
        .and_then(|h| {
            h.strip_suffix(".amazonaws.com")
                .or_else(|| h.strip_suffix(".amazonaws.com.cn"))
        })
        .unwrap_or("");
    let region_ok = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    region_ok && path.ends_with(".pem") && !path.contains(['?', '#', '@'])
}

/// Check an SNS message: its `SigningCertURL` is SNS's, and its signature (version 1 or 2,
/// base64) verifies with `cert` over its string to sign.
pub fn sns_verify(cert: &SnsCert, m: &SnsMessage) -> Result<(), Refusal> {
    if !sns_cert_url_ok(&m.signing_cert_url) {
        return Err("the SigningCertURL is not an https URL on sns.<region>.amazonaws.com".into());
    }
    if m.signature.len() > MAX_SIGNATURE {
        return Err("the SNS Signature is too long".into());
    }
    let sig = STANDARD
        .decode(m.signature.trim())
        .map_err(|_| "the SNS Signature is not base64".to_string())?;
    let text = m.string_to_sign()?;
    let ee = webpki::EndEntityCert::try_from(&cert.0)
        .map_err(|_| "the SNS signing certificate does not parse".to_string())?;
    let alg: &dyn SignatureVerificationAlgorithm = match m.signature_version.as_str() {
        "1" => &Sha1Rsa,
        "2" => webpki::ring::RSA_PKCS1_2048_8192_SHA256,
        v => return Err(format!("unknown SNS SignatureVersion {v:?} (1 or 2)")),
    };
    ee.verify_signature(alg, text.as_bytes(), &sig)
        .map_err(|_| "the SNS signature does not verify with the configured certificate".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twilio SendGrid's own example (the sendgrid-python SDK's test/unit/test_eventwebhook.py:
    /// its public key, signature, timestamp and payload).
    const SG_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==";
    const SG_SIGNATURE: &str = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";
    const SG_TIMESTAMP: &str = "1600112502";
    const SG_PAYLOAD: &str = "[{\"email\":\"hello@world.com\",\"event\":\"dropped\",\"reason\":\"Bounced Address\",\"sg_event_id\":\"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA\",\"sg_message_id\":\"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0\",\"smtp-id\":\"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>\",\"timestamp\":1600112492}]\r\n";

    #[test]
    fn sendgrids_published_example_verifies_and_changes_do_not() {
        let key = SendgridKey::parse(SG_KEY).unwrap();
        let body = SG_PAYLOAD.as_bytes();
        assert_eq!(
            sendgrid_signature(&key, SG_TIMESTAMP, body, SG_SIGNATURE),
            Ok(())
        );
        let now = 1_600_112_510;
        assert_eq!(
            sendgrid_verify(&key, SG_TIMESTAMP, body, SG_SIGNATURE, now),
            Ok(())
        );
        assert!(sendgrid_verify(&key, SG_TIMESTAMP, body, SG_SIGNATURE, now + 400).is_err());
        assert!(sendgrid_signature(&key, "1600112503", body, SG_SIGNATURE).is_err());
        assert!(sendgrid_signature(&key, SG_TIMESTAMP, b"payload", SG_SIGNATURE).is_err());
        // The SDK's "bad key" and "bad signature".
        let other = SendgridKey::parse("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTxd43gyp8IOEto2LdIfjRQrIbsd4SXZkLW6jDutdhXSJCWHw8REntlo7aNDthvj+y7GjUuFDb/R1NGe1OPzpA==").unwrap();
        assert!(sendgrid_signature(&other, SG_TIMESTAMP, body, SG_SIGNATURE).is_err());
        let bad = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH3j/0=";
        assert!(sendgrid_signature(&key, SG_TIMESTAMP, body, bad).is_err());
        assert!(SendgridKey::parse("AAAA").is_err());
        let pem = format!("-----BEGIN PUBLIC KEY-----\n{SG_KEY}\n-----END PUBLIC KEY-----\n");
        assert_eq!(SendgridKey::parse(&pem).unwrap(), key);
    }

    #[test]
    fn mailgun_signatures() {
        let key = b"key-0123456789abcdef";
        let sig = mailgun_sign(key, "1770920772", "e0b5477167110d68991efc6b9f89f0a1");
        assert_eq!(sig.len(), 64);
        let ok = |ts: &str, tok: &str, sig: &str, now| mailgun_verify(key, ts, tok, sig, now);
        let tok = "e0b5477167110d68991efc6b9f89f0a1";
        assert_eq!(ok("1770920772", tok, &sig, 1_770_920_800), Ok(()));
        assert!(ok("1770920772", tok, &sig.to_uppercase(), 1_770_920_800).is_ok());
        assert!(ok("1770920773", tok, &sig, 1_770_920_800).is_err());
        assert!(ok("1770920772", "e0b5", &sig, 1_770_920_800).is_err());
        assert!(ok("1770920772", tok, &sig, 1_770_921_800).is_err());
        assert!(ok("1770920772", "", &sig, 1_770_920_800).is_err());
        assert!(ok("1770920772", tok, "zz", 1_770_920_800).is_err());
        assert!(mailgun_verify(b"other", "1770920772", tok, &sig, 1_770_920_800).is_err());
    }

    #[test]
    fn bearer_is_exact() {
        assert!(bearer_matches(Some("Bearer tok-1"), "tok-1"));
        assert!(!bearer_matches(Some("Bearer tok-2"), "tok-1"));
        assert!(!bearer_matches(Some("Basic tok-1"), "tok-1"));
        assert!(!bearer_matches(None, ""));
    }

    /// A real SNS notification and the real certificate that signed it (SignatureVersion 1),
    /// as published in the AWS::SNS::Verify Perl distribution's author test (author.t/01_verify.t);
    /// tests/fixtures/bounces/README.md says more.
    #[test]
    fn snss_published_example_verifies_and_changes_do_not() {
        let cert = SnsCert::parse(include_bytes!(
            "../../../tests/fixtures/bounces/sns-published.cert.pem"
        ))
        .unwrap();
        let body = include_bytes!("../../../tests/fixtures/bounces/sns-published-v1.json");
        let m = SnsMessage::parse(body).unwrap();
        assert_eq!(sns_verify(&cert, &m), Ok(()));
        let changed = |f: &dyn Fn(&mut SnsMessage)| {
            let mut c = m.clone();
            f(&mut c);
            sns_verify(&cert, &c)
        };
        assert!(changed(&|c| c.message = "TAMPERED MESSAGE".into()).is_err());
        assert!(changed(&|c| c.subject = None).is_err());
        assert!(changed(&|c| c.topic_arn.push('x')).is_err());
        assert!(changed(&|c| c.signature_version = "2".into()).is_err());
        assert!(changed(&|c| c.signature_version = "3".into()).is_err());
        assert!(changed(&|c| c.kind = "SubscriptionConfirmation".into()).is_err());
        assert!(changed(&|c| c.signing_cert_url = "https://evil.org/x.pem".into()).is_err());
        let other = SnsCert::parse(include_bytes!(
            "../../../tests/fixtures/bounces/sns-test.cert.pem"
        ))
        .unwrap();
        assert!(sns_verify(&other, &m).is_err());
        assert!(SnsCert::parse(b"Nopes").is_err());
    }

    #[test]
    fn sns_cert_urls() {
        for good in [
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem",
        ] {
            assert!(sns_cert_url_ok(good), "{good}");
        }
        for bad in [
            "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.us-east-1.amazonaws.com.evil.org/x.pem",
            "https://evil.org/sns.us-east-1.amazonaws.com/x.pem",
            "https://sns..amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com/x.txt",
            "https://sns.us-east-1.amazonaws.com:8443/x.pem",
            "https://user@sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.US-EAST-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com/x.pem?a=b.pem",
        ] {
            assert!(!sns_cert_url_ok(bad), "{bad}");
        }
    }
}
