//! `watch --web-config FILE`: TLS and basic auth on the endpoint, in the Prometheus
//! exporter-toolkit's format (node_exporter's `--web.config.file`), so one file serves both:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative paths are taken from the file's directory
//!   key_file: server.key
//!   client_ca_file: clients.crt  # optional, with client_auth_type
//!   client_auth_type: RequireAndVerifyClientCert
//!   min_version: TLS12           # TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hashes (htpasswd -nBC 10 USER)
//! ```
//!
//! Unknown keys are refused, as the toolkit refuses them (a misspelt key must not leave the
//! endpoint open). The files are root's, but read as any input (untrusted.rs): held `O_PATH`
//! first, read only when a regular file (a FIFO or device is never opened), bounded.
//! Symbolic links are followed: Kubernetes mounts Secret keys as links into `..data`.

use std::{
    collections::BTreeMap,
    io::Read as _,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{bail, Context as _, Result};
use rustls::{
    pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig,
};
use serde::Deserialize;

use super::auth::Users;

/// The web configuration file, at most this long.
const MAX_CONFIG: u64 = 64 * 1024;
/// A certificate, key or CA bundle file, at most this long.
const MAX_PEM: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsServerConfig>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
}

/// What `--web-config` turns on (nothing by default).
#[derive(Default)]
pub struct WebConfig {
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub users: Option<Users>,
}

/// Reads and checks `path`: every error is one line naming the file and what to fix.
pub fn load(path: &Path) -> Result<WebConfig> {
    let text = read_bounded(path, MAX_CONFIG)?;
    let file: WebConfigFile =
        serde_yaml_ng::from_slice(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tls = file
        .tls_server_config
        .map(|t| tls_acceptor(&t, dir))
        .transpose()
        .with_context(|| format!("{}: tls_server_config", path.display()))?;
    let users = match file.basic_auth_users {
        Some(u) if !u.is_empty() => {
            Some(Users::new(u).with_context(|| format!("{}: basic_auth_users", path.display()))?)
        }
        _ => None,
    };
    Ok(WebConfig { tls, users })
}

/// Up to `max` bytes of the regular file `path` (a FIFO, device or directory is refused
/// before it is opened: untrusted.rs).
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    // OpenError's message holds its cause already: one line, not the cause twice.
    let opened = crate::untrusted::open_configured(path.as_os_str().as_bytes(), max)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut buf = Vec::new();
    // It may have grown since: bounded all the same.
    opened
        .file
        .take(max + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("failed to read {}", path.display()))?;
    if buf.len() as u64 > max {
        bail!("{}: longer than {max} bytes", path.display());
    }
    Ok(buf)
}

fn tls_acceptor(t: &TlsServerConfig, dir: &Path) -> Result<tokio_rustls::TlsAcceptor> {
    let file = |p: &Path| read_bounded(&dir.join(p), MAX_PEM);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&file(&t.cert_file)?)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("cert_file {}: {e}", t.cert_file.display()))?;
    if certs.is_empty() {
        bail!("cert_file {}: no PEM certificate", t.cert_file.display());
    }
    let key = PrivateKeyDer::from_pem_slice(&file(&t.key_file)?)
        .map_err(|e| anyhow::anyhow!("key_file {}: {e}", t.key_file.display()))?;
    // ring has no post-quantum key exchange (rustls marks it deprecated for that); aws-lc-rs,
    // which has, needs cmake to build.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = versions(t.min_version.as_deref(), t.max_version.as_deref())?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .context("no TLS version left")?;
    let auth_type = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let builder = match (auth_type, &t.client_ca_file) {
        ("NoClientCert", None) => builder.with_no_client_auth(),
        ("NoClientCert", Some(_)) => {
            bail!("client_ca_file without client_auth_type: set RequireAndVerifyClientCert")
        }
        ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&file(ca)?) {
                let c = c.map_err(|e| anyhow::anyhow!("client_ca_file {}: {e}", ca.display()))?;
                roots
                    .add(c)
                    .map_err(|e| anyhow::anyhow!("client_ca_file {}: {e}", ca.display()))?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if auth_type == "VerifyClientCertIfGiven" {
                v.allow_unauthenticated()
            } else {
                v
            };
            let v = v
                .build()
                .map_err(|e| anyhow::anyhow!("client_ca_file {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(v)
        }
        ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", None) => {
            bail!("client_auth_type {auth_type} needs client_ca_file")
        }
        (other, _) => bail!(
            "client_auth_type {other}: give NoClientCert, VerifyClientCertIfGiven or \
             RequireAndVerifyClientCert (certificates are always verified)"
        ),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("cert_file and key_file: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The versions between min_version (default TLS12, as the toolkit's) and max_version.
fn versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>> {
    let rank = |v: &str, key: &str| match v {
        "TLS12" => Ok(0),
        "TLS13" => Ok(1),
        "TLS10" | "TLS11" => bail!("{key} {v}: only TLS12 and TLS13 are spoken"),
        _ => bail!("{key} {v}: give TLS12 or TLS13"),
    };
    let lo = min.map_or(Ok(0), |v| rank(v, "min_version"))?;
    let hi = max.map_or(Ok(1), |v| rank(v, "max_version"))?;
    if lo > hi {
        bail!("min_version is above max_version");
    }
    let all = [&rustls::version::TLS12, &rustls::version::TLS13];
    Ok(all[lo..=hi].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<WebConfig> {
        let dir = std::env::temp_dir().join(format!(
            "fdaudit-webconfig-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("web.yml");
        std::fs::write(&path, text).unwrap();
        let r = load(&path);
        std::fs::remove_dir_all(&dir).ok();
        r
    }

    #[test]
    fn bad_files_are_one_line_errors() {
        let err = |t: &str| format!("{:#}", load_text(t).err().expect("refused"));
        assert!(err("basic_auth_user:\n  a: b\n").contains("unknown field `basic_auth_user`"));
        assert!(err("basic_auth_users:\n  a: notahash\n").contains("bcrypt"));
        assert!(err("tls_server_config:\n  cert_file: x.crt\n").contains("key_file"));
        let e = err("tls_server_config:\n  cert_file: x.crt\n  key_file: x.key\n");
        assert!(e.contains("failed to open") && e.contains("x.crt"), "{e}");
        for e in [
            err("basic_auth_user:\n  a: b\n"),
            err("tls_server_config:\n  cert_file: x.crt\n  key_file: x.key\n"),
        ] {
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let users = load_text("{}\n").unwrap();
        assert!(users.tls.is_none() && users.users.is_none());
    }

    #[test]
    fn versions_are_tls12_and_up() {
        assert_eq!(versions(None, None).unwrap().len(), 2);
        assert_eq!(versions(Some("TLS13"), None).unwrap().len(), 1);
        assert!(versions(Some("TLS11"), None).is_err());
        assert!(versions(Some("TLS13"), Some("TLS12")).is_err());
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("fdaudit-webfifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("web.yml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = format!("{:#}", load(&fifo).err().expect("refused"));
        std::fs::remove_dir_all(&dir).ok();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
