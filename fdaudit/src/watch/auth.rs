//! Basic auth for `--web-config`'s `basic_auth_users`, as exporter-toolkit checks it: bcrypt
//! hashes, and a cache of what was verified so that a scrape every few seconds does not pay
//! bcrypt (tens of milliseconds at cost 10) each time.
//!
//! - A verified password is kept per user as a SHA-256 digest salted with the user's bcrypt
//!   hash, never in clear, and compared in constant time.
//! - Failed (user, password) pairs are remembered too (a bounded set of digests), so a
//!   misconfigured scraper costs one bcrypt, not one per scrape.
//! - One bcrypt runs at a time, on tokio's blocking pool: a client sending new passwords
//!   takes one core at most and never stalls the scrapes whose credentials are cached.
//! - An unknown user is checked against a configured user's hash all the same, so the
//!   answer's timing does not tell which users exist.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex},
};

use anyhow::{bail, Result};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use tokio::sync::Semaphore;

/// Failed pairs remembered, at most (then the set starts over).
const MAX_FAILED: usize = 1024;

type Key = [u8; 32];

pub struct Users {
    /// User → bcrypt hash.
    hashes: BTreeMap<String, String>,
    /// User → digest of the password last verified for them.
    verified: Mutex<HashMap<String, Key>>,
    failed: Mutex<HashSet<Key>>,
    bcrypt: Semaphore,
    /// The hash an unknown user's password is checked against.
    decoy: String,
}

fn key(hash: &str, user: &str, password: &[u8]) -> Key {
    let mut h = Sha256::new();
    for part in [hash.as_bytes(), user.as_bytes(), password] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().into()
}

impl Users {
    /// Checks every hash is a bcrypt hash (`$2a$`, `$2b$`, `$2x$` or `$2y$`).
    pub fn new(hashes: BTreeMap<String, String>) -> Result<Users> {
        for (user, hash) in &hashes {
            if user.contains(':') {
                bail!("user {user:?}: a user name cannot hold ':' in basic auth");
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                bail!("user {user:?}: not a bcrypt hash (make one with htpasswd -nBC 10 {user})");
            }
        }
        let decoy = hashes.values().next().cloned().unwrap_or_default();
        Ok(Users {
            hashes,
            verified: Mutex::default(),
            failed: Mutex::default(),
            bcrypt: Semaphore::new(1),
            decoy,
        })
    }

    /// Whether an `Authorization` header value names a user and their password.
    pub async fn check(self: &Arc<Self>, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(basic) else {
            return false;
        };
        let (hash, known) = match self.hashes.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.decoy.clone(), false),
        };
        let k = key(&hash, &user, &password);
        let cached = lock(&self.verified)
            .get(&user)
            .is_some_and(|v| bool::from(v.ct_eq(&k)));
        if cached {
            return true;
        }
        if lock(&self.failed).contains(&k) {
            return false;
        }
        let Ok(_permit) = self.bcrypt.acquire().await else {
            return false;
        };
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(&password, &hash))
            .await
            .is_ok_and(|r| r.unwrap_or(false))
            && known;
        if ok {
            lock(&self.verified).insert(user, k);
        } else {
            let mut failed = lock(&self.failed);
            if failed.len() >= MAX_FAILED {
                failed.clear();
            }
            failed.insert(k);
        }
        ok
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `Basic base64(user:password)` → (user, password).
fn basic(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
    Some((user, raw[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, pass: &str) -> Vec<u8> {
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        format!("Basic {b}").into_bytes()
    }

    #[test]
    fn passwords_are_checked_then_cached() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let users = Arc::new(Users::new([("prom".to_owned(), hash)].into()).unwrap());
        rt.block_on(async {
            assert!(users.check(Some(&header("prom", "s3cret"))).await);
            assert!(users.check(Some(&header("prom", "s3cret"))).await, "cached");
            assert!(!users.check(Some(&header("prom", "wrong"))).await);
            assert!(!users.check(Some(&header("prom", "wrong"))).await, "cached");
            assert!(!users.check(Some(&header("other", "s3cret"))).await);
            assert!(!users.check(None).await);
            assert!(!users.check(Some(b"Bearer abc")).await);
            assert!(users.check(Some(&header("prom", "s3cret"))).await);
        });
        assert_eq!(lock(&users.verified).len(), 1);
        assert_eq!(lock(&users.failed).len(), 2);
    }

    #[test]
    fn bad_hashes_and_names_are_refused() {
        assert!(Users::new([("a".to_owned(), "plain".to_owned())].into()).is_err());
        let hash = bcrypt::hash("x", 4).unwrap();
        assert!(Users::new([("a:b".to_owned(), hash)].into()).is_err());
    }
}
