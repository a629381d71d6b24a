//! HTTPS: the server's certificate (the operator's `--tls-cert`/`--tls-key`,
//! or a self-signed one made and kept in `DATA_DIR/tls`) and the TLS
//! handshake of each accepted connection. ALPN offers `h2` and `http/1.1`;
//! which one a connection speaks is then hyper's business (`http/mod.rs`).
//!
//! The self-signed set is a small CA of this grid (`ca.pem`, the file clients
//! trust; its key `ca-key.pem` never leaves the data dir) and a server
//! certificate it signs for loopback, the listen address and the
//! `--base-url` host. Both are kept across restarts: the CA for as long as
//! its key is there, the server certificate while it still names every
//! address and is valid for another 30 days.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use grid_core::time::Millis;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Longest a client may take over its TLS handshake; one that stalls does
/// not hold a connection task for longer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A kept server certificate is replaced when it expires within this.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 86_400);
/// Validity of a server certificate: within the 398 days clients such as
/// Apple's accept for any TLS server certificate.
const LEAF_DAYS: u64 = 397;
const CA_DAYS: u64 = 3_650;

/// Where the certificate comes from.
pub enum Source {
    /// The operator's PEM files: a chain (server certificate first) and its key.
    Files { cert: PathBuf, key: PathBuf },
    /// Made and kept in `dir`, naming `names` (DNS names or IP addresses).
    SelfSigned { dir: PathBuf, names: Vec<String> },
}

pub struct Tls {
    pub acceptor: TlsAcceptor,
    /// The CA clients must trust, for a self-signed set.
    pub ca_cert: Option<PathBuf>,
}

/// The addresses a self-signed certificate names: loopback, the listen
/// address and the host of `--base-url`.
pub fn self_signed_names(listen: SocketAddr, base_url: Option<&str>) -> Vec<String> {
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !listen.ip().is_unspecified() {
        names.push(listen.ip().to_string());
    }
    let host = base_url.and_then(|b| url::Url::parse(b).ok()).and_then(|u| match u.host()? {
        url::Host::Domain(d) => Some(d.to_string()),
        url::Host::Ipv4(ip) => Some(ip.to_string()),
        url::Host::Ipv6(ip) => Some(ip.to_string()),
    });
    names.extend(host);
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// Loads or makes the certificate; errors name the flag whose file is wrong.
pub fn load(source: Source, now: Millis) -> anyhow::Result<Tls> {
    let (chain, key, ca_cert) = match source {
        Source::Files { cert, key } => {
            // One line each, flag first: what an operator reads when the start fails.
            let chain = read_chain(&cert).map_err(|e| anyhow!("--tls-cert {}: {e:#}", cert.display()))?;
            let key_der = read_key(&key).map_err(|e| anyhow!("--tls-key {}: {e:#}", key.display()))?;
            certified(&chain, &key_der).map_err(|e| match e {
                KeyProblem::Unusable(e) => anyhow!("--tls-key {}: not a usable private key: {e}", key.display()),
                KeyProblem::Mismatch => anyhow!(
                    "--tls-key {} does not belong to the certificate in --tls-cert {}",
                    key.display(),
                    cert.display()
                ),
            })?;
            (chain, key_der, None)
        }
        Source::SelfSigned { dir, names } => {
            let (chain, key) = self_signed(&dir, &names, now)
                .map_err(|e| anyhow!("--tls-self-signed: the certificate in {}: {e:#}", dir.display()))?;
            // Absolute: it is printed for clients to find from anywhere.
            let ca = dir.join(CA_CERT);
            (chain, key, Some(std::fs::canonicalize(&ca).unwrap_or(ca)))
        }
    };
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("TLS server certificate")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Tls { acceptor: TlsAcceptor::from(Arc::new(config)), ca_cert })
}

/// The TLS handshake of an accepted connection; None when it fails or
/// stalls (logged at debug: scanners and plain-HTTP clients do this).
pub async fn handshake(acceptor: &TlsAcceptor, stream: TcpStream) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

/// The ring provider: the one the lock file already carries through reqwest.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_chain(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).context("cannot read it")?;
    let chain = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().context("not PEM")?;
    if chain.is_empty() {
        bail!("no certificate (-----BEGIN CERTIFICATE-----) in it");
    }
    Ok(chain)
}

fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let pem = std::fs::read(path).context("cannot read it")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            anyhow!("no private key (PKCS#8, PKCS#1 or SEC1 PEM) in it")
        }
        e => anyhow!("not PEM: {e}"),
    })
}

enum KeyProblem {
    Unusable(rustls::Error),
    Mismatch,
}

/// Checks that `key` is usable and belongs to the chain's first certificate.
fn certified(chain: &[CertificateDer<'static>], key: &PrivateKeyDer<'static>) -> Result<(), KeyProblem> {
    let signer = provider().key_provider.load_private_key(key.clone_key()).map_err(KeyProblem::Unusable)?;
    match rustls::sign::CertifiedKey::new(chain.to_vec(), signer).keys_match() {
        Ok(()) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => Err(KeyProblem::Mismatch),
        // A key rustls cannot compare (or a certificate it cannot parse) is
        // refused at the handshake instead; the config step reports the latter.
        Err(_) => Ok(()),
    }
}

const CA_CERT: &str = "ca.pem";
const CA_KEY: &str = "ca-key.pem";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server-key.pem";

/// The kept (or new) self-signed set in `dir`: the server chain and its key.
fn self_signed(
    dir: &Path,
    names: &[String],
    now: Millis,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    private_dir(dir)?;
    let (ca_key_path, ca_cert_path) = (dir.join(CA_KEY), dir.join(CA_CERT));
    let ca_key = if ca_key_path.exists() {
        let pem =
            std::fs::read_to_string(&ca_key_path).with_context(|| format!("reading {}", ca_key_path.display()))?;
        KeyPair::from_pem(&pem).with_context(|| format!("{} is not a private key", ca_key_path.display()))?
    } else {
        let key = KeyPair::generate().context("making the CA key")?;
        write_private(&ca_key_path, key.serialize_pem().as_bytes())?;
        // A CA certificate without its key can sign nothing: replaced below.
        let _ = std::fs::remove_file(&ca_cert_path);
        tracing::info!(key = %ca_key_path.display(), "made a new CA for the self-signed certificate");
        key
    };
    let ca_params = ca_params(&ca_key, now);
    if !ca_cert_path.exists() {
        // The CA's name and key identifier follow from its key, so a CA
        // certificate issued again from a kept key is the same trust anchor.
        let cert = ca_params.self_signed(&ca_key).context("signing the CA certificate")?;
        write_private(&ca_cert_path, cert.pem().as_bytes())?;
    }
    let ca_der = CertificateDer::from_pem_file(&ca_cert_path)
        .with_context(|| format!("{} is not a PEM certificate", ca_cert_path.display()))?;
    let (server_cert, server_key) = (dir.join(SERVER_CERT), dir.join(SERVER_KEY));
    let renew_check = UnixTime::since_unix_epoch(millis_since_epoch(now) + RENEW_BEFORE);
    if let Some((chain, key)) = kept_leaf(&server_cert, &server_key) {
        if verifies(&ca_der, &chain, names, renew_check).is_ok() {
            return Ok((chain, key));
        }
        tracing::info!(
            cert = %server_cert.display(),
            "the kept server certificate does not name every address or expires soon; making a new one"
        );
    }
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().context("making the server key")?;
    let leaf = leaf_params(names, now)?.signed_by(&leaf_key, &issuer).context("signing the server certificate")?;
    write_private(&server_key, leaf_key.serialize_pem().as_bytes())?;
    write_private(&server_cert, leaf.pem().as_bytes())?;
    let chain = vec![leaf.der().clone()];
    let key = PrivateKeyDer::try_from(leaf_key.serialize_der())
        .map_err(|e| anyhow!("the new server key does not encode: {e}"))?;
    verifies(&ca_der, &chain, names, UnixTime::since_unix_epoch(millis_since_epoch(now))).map_err(|e| {
        anyhow!(
            "{} does not verify the server certificate its key signed ({e}); {} and {} do not belong together: remove both to make a new CA",
            ca_cert_path.display(),
            ca_cert_path.display(),
            ca_key_path.display()
        )
    })?;
    Ok((chain, key))
}

/// The kept server certificate and key, when both read and belong together.
fn kept_leaf(cert: &Path, key: &Path) -> Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = read_chain(cert).ok()?;
    let key = read_key(key).ok()?;
    certified(&chain, &key).ok()?;
    Some((chain, key))
}

/// Whether `chain` verifies under the CA `ca` for every name at `at`, as a
/// client trusting only that CA would check it.
fn verifies(
    ca: &CertificateDer<'static>,
    chain: &[CertificateDer<'static>],
    names: &[String],
    at: UnixTime,
) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).map_err(|e| e.to_string())?;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| e.to_string())?;
    let (leaf, intermediates) = chain.split_first().ok_or("empty chain")?;
    for name in names {
        let server_name = ServerName::try_from(name.as_str()).map_err(|e| format!("{name}: {e}"))?;
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            verifier.as_ref(),
            leaf,
            intermediates,
            &server_name,
            &[],
            at,
        )
        .map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// The CA's parameters, all but the validity derived from its key.
fn ca_params(key: &KeyPair, now: Millis) -> CertificateParams {
    let mut params = CertificateParams::default();
    let id = params.key_identifier(key);
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Grid");
    name.push(DnType::CommonName, format!("Grid self-signed CA {}", hex::encode(&id[..6])));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, now, CA_DAYS);
    params.serial_number = Some(serial());
    params
}

fn leaf_params(names: &[String], now: Millis) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(names.to_vec()).context("server certificate names")?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, names.first().map_or("grid", String::as_str));
    params.distinguished_name = name;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, now, LEAF_DAYS);
    params.serial_number = Some(serial());
    Ok(params)
}

/// From the day before `now` (clients whose clock is a little behind) for
/// `days` days.
fn set_validity(params: &mut CertificateParams, now: Millis, days: u64) {
    let today = chrono::DateTime::from_timestamp_millis(now.0).unwrap_or_default().date_naive();
    let ymd = |d: chrono::NaiveDate| {
        use chrono::Datelike;
        rcgen::date_time_ymd(d.year(), d.month() as u8, d.day() as u8)
    };
    params.not_before = ymd(today - chrono::Days::new(1));
    params.not_after = ymd(today + chrono::Days::new(days));
}

/// A random positive 128-bit serial: no two certificates of this CA share one.
fn serial() -> SerialNumber {
    let mut bytes = crate::ids::random_bytes::<16>();
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

fn millis_since_epoch(now: Millis) -> Duration {
    Duration::from_millis(now.0.max(0) as u64)
}

/// Creates `dir` as 0700, or makes an existing one 0700.
fn private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", dir.display()))
}

/// Writes `path` as 0600, whole or not at all (a temporary file renamed).
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("pem.tmp");
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = Millis(1_800_000_000_000);

    fn names() -> Vec<String> {
        vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_self_signed_set_is_kept_private_and_verifies_for_every_name() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tls");
        let (chain, _) = self_signed(&dir, &names(), NOW).unwrap();
        assert_eq!(mode(&dir), 0o700);
        for f in [CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        let ca = CertificateDer::from_pem_file(dir.join(CA_CERT)).unwrap();
        let at = UnixTime::since_unix_epoch(millis_since_epoch(NOW));
        verifies(&ca, &chain, &names(), at).unwrap();
        assert!(verifies(&ca, &chain, &["grid.example".into()], at).is_err());
        // Expired a little after its 397 days.
        let later = UnixTime::since_unix_epoch(millis_since_epoch(NOW) + Duration::from_secs(399 * 86_400));
        assert!(verifies(&ca, &chain, &names(), later).is_err());
    }

    #[test]
    fn a_restart_keeps_the_ca_and_the_server_certificate() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tls");
        let (first, _) = self_signed(&dir, &names(), NOW).unwrap();
        let ca = std::fs::read(dir.join(CA_CERT)).unwrap();
        let (again, _) = self_signed(&dir, &names(), NOW.plus_ms(86_400_000)).unwrap();
        assert_eq!(first, again);
        assert_eq!(std::fs::read(dir.join(CA_CERT)).unwrap(), ca);
    }

    #[test]
    fn a_new_name_or_near_expiry_renews_the_server_certificate_under_the_same_ca() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tls");
        let (first, _) = self_signed(&dir, &names(), NOW).unwrap();
        let ca_bytes = std::fs::read(dir.join(CA_CERT)).unwrap();
        let ca = CertificateDer::from_pem_file(dir.join(CA_CERT)).unwrap();
        let mut more = names();
        more.push("grid.example".into());
        let (renamed, _) = self_signed(&dir, &more, NOW).unwrap();
        assert_ne!(first, renamed);
        assert_eq!(std::fs::read(dir.join(CA_CERT)).unwrap(), ca_bytes);
        let at = UnixTime::since_unix_epoch(millis_since_epoch(NOW));
        verifies(&ca, &renamed, &more, at).unwrap();
        // 380 days on, the kept certificate has less than 30 days left.
        let late = NOW.plus_ms(380 * 86_400_000);
        let (renewed, _) = self_signed(&dir, &more, late).unwrap();
        assert_ne!(renamed, renewed);
        let late_at = UnixTime::since_unix_epoch(millis_since_epoch(late) + Duration::from_secs(300 * 86_400));
        verifies(&ca, &renewed, &more, late_at).unwrap();
    }

    #[test]
    fn a_lost_ca_certificate_is_issued_again_from_its_key_as_the_same_anchor() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tls");
        let (chain, _) = self_signed(&dir, &names(), NOW).unwrap();
        std::fs::remove_file(dir.join(CA_CERT)).unwrap();
        self_signed(&dir, &names(), NOW).unwrap();
        let reissued = CertificateDer::from_pem_file(dir.join(CA_CERT)).unwrap();
        // The server certificate signed under the first CA certificate
        // verifies under the one issued again.
        verifies(&reissued, &chain, &names(), UnixTime::since_unix_epoch(millis_since_epoch(NOW))).unwrap();
    }

    #[test]
    fn a_ca_certificate_of_another_key_is_refused_not_replaced() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        self_signed(&a, &names(), NOW).unwrap();
        self_signed(&b, &names(), NOW).unwrap();
        std::fs::copy(b.join(CA_CERT), a.join(CA_CERT)).unwrap();
        let err = format!("{:#}", self_signed(&a, &names(), NOW).unwrap_err());
        assert!(err.contains("do not belong together"), "{err}");
    }

    #[test]
    fn self_signed_names_are_loopback_the_listen_address_and_the_public_host() {
        let listen: SocketAddr = "10.1.2.3:8443".parse().unwrap();
        assert_eq!(
            self_signed_names(listen, Some("https://grid.example:8443/")),
            ["localhost", "127.0.0.1", "::1", "10.1.2.3", "grid.example"]
        );
        let any: SocketAddr = "0.0.0.0:8443".parse().unwrap();
        assert_eq!(
            self_signed_names(any, Some("https://[2001:db8::1]:8443")),
            ["localhost", "127.0.0.1", "::1", "2001:db8::1"]
        );
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(self_signed_names(loopback, None), ["localhost", "127.0.0.1", "::1"]);
    }

    #[test]
    fn operator_files_errors_name_the_flag() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tls");
        self_signed(&dir, &names(), NOW).unwrap();
        let files = |cert: &str, key: &str| Source::Files { cert: dir.join(cert), key: dir.join(key) };
        let err = |s: Source| format!("{:#}", load(s, NOW).err().expect("refused"));
        assert!(load(files(SERVER_CERT, SERVER_KEY), NOW).is_ok());
        let e = err(files(SERVER_CERT, CA_KEY));
        assert!(e.starts_with("--tls-key") && e.contains("does not belong"), "{e}");
        let e = err(files(SERVER_CERT, "missing.pem"));
        assert!(e.starts_with("--tls-key") && e.contains("cannot read"), "{e}");
        let e = err(files(SERVER_CERT, SERVER_CERT));
        assert!(e.starts_with("--tls-key") && e.contains("no private key"), "{e}");
        let e = err(files(SERVER_KEY, SERVER_KEY));
        assert!(e.starts_with("--tls-cert") && e.contains("no certificate"), "{e}");
    }
}
