//! Basic authentication (ingress-nginx's `auth-type: basic`): whether a request's
//! `Authorization: Basic` credentials name a user of the route and match that user's password
//! hash. Written once for every engine; the engines only answer the 401 `reply` gives. Pure
//! apart from the route's cache of credentials already verified (a mutex held for one set
//! operation, never across an await). No Kubernetes, Pingora or tokio.

use base64::Engine as _;
use md5::{Digest as _, Md5};
use sha1::Sha1;

use crate::table::auth::{BasicAuth, Md5Magic, PasswordHash, VERIFIED_MAX};

/// Whether `authorization` (the request's `Authorization` value) signs in a user of `auth`.
/// No value, another scheme, bad base64, an unknown user or a wrong password: no.
pub fn admits(auth: &BasicAuth, authorization: Option<&[u8]>) -> bool {
    let Some(value) = authorization else {
        return false;
    };
    let key: [u8; 20] = Sha1::digest(value).into();
    if auth
        .verified
        .0
        .lock()
        .is_ok_and(|known| known.contains(&key))
    {
        return true;
    }
    let Some(decoded) = credentials(value) else {
        return false;
    };
    let Some(colon) = decoded.iter().position(|&b| b == b':') else {
        return false;
    };
    let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
    let Some(hash) = std::str::from_utf8(user)
        .ok()
        .and_then(|u| auth.users.get(u))
    else {
        return false;
    };
    if !verify(hash, password) {
        return false;
    }
    if let Ok(mut known) = auth.verified.0.lock() {
        if known.len() >= VERIFIED_MAX {
            known.clear();
        }
        known.insert(key);
    }
    true
}

/// The decoded `user:password` of a `Basic` value (the scheme in any case).
fn credentials(value: &[u8]) -> Option<Vec<u8>> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .ok()
}

/// Whether `password` matches `hash`.
pub fn verify(hash: &PasswordHash, password: &[u8]) -> bool {
    match hash {
        PasswordHash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
        PasswordHash::Md5Crypt { magic, salt, hash } => same(
            md5_crypt(password, salt.as_bytes(), *magic).as_bytes(),
            hash.as_bytes(),
        ),
        PasswordHash::Sha1(d) => same(&Sha1::digest(password), d),
        PasswordHash::SaltedSha1 { digest, salt } => {
            let mut h = Sha1::new();
            h.update(password);
            h.update(salt);
            same(&h.finalize(), digest)
        }
        PasswordHash::Plain(p) => same(password, p.as_bytes()),
    }
}

/// Equality in time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The 22 characters after `$magic$salt$` that the MD5-based crypt (FreeBSD's `$1$`, Apache's
/// `$apr1$`) gives `password` with `salt`.
fn md5_crypt(password: &[u8], salt: &[u8], magic: Md5Magic) -> String {
    let salt = &salt[..salt.len().min(8)];
    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let alt = alt.finalize();

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(magic.text().as_bytes());
    ctx.update(salt);
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut digest = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(digest);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(digest);
        } else {
            c.update(password);
        }
        digest = c.finalize();
    }
    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out.push(char::from(ITOA64[(v & 0x3f) as usize]));
            v >>= 6;
        }
    };
    let d = |i: usize| u32::from(digest[i]);
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put((d(a) << 16) | (d(b) << 8) | d(c), 4);
    }
    put(d(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user_pass: &str) -> Vec<u8> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(user_pass);
        format!("Basic {b64}").into_bytes()
    }

    /// Hashes from `openssl passwd -apr1 / -1`, `htpasswd -s`, a `{SSHA}` written by hand, and
    /// a bcrypt hash from another implementation.
    #[test]
    fn each_hash_form_checks_its_password() {
        let cases = [
            ("$apr1$saltsalt$11QAx5Oiaores.cTy1Ple.", "p@ss word"),
            ("$1$abcdefgh$cHJi5PXp/ki/ktXzqlk6I1", "secret"),
            ("{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=", "secret"),
            ("{SSHA}dj2lH1ocucmj5OQsjP6mQrVx6FhOYUNs", "secret"),
            ("{PLAIN}secret", "secret"),
            (
                "$2a$04$UuTkLRZZ6QofpDOlMz32MuuxEHA43WOemOYHPz6.SjsVsyO1tDU96",
                "password",
            ),
        ];
        for (hash, password) in cases {
            let h = PasswordHash::parse(hash).unwrap();
            assert!(verify(&h, password.as_bytes()), "{hash}");
            assert!(!verify(&h, b"wrong"), "{hash}");
            assert!(!verify(&h, b""), "{hash}");
        }
    }

    #[test]
    fn only_a_user_with_the_right_password_is_admitted() {
        let (auth, _) = BasicAuth::from_htpasswd(
            "r",
            "alice:$apr1$saltsalt$11QAx5Oiaores.cTy1Ple.\nbob:{PLAIN}pw:with:colons\n",
        );
        assert!(admits(&auth, Some(&basic("alice:p@ss word"))));
        // Remembered, and the scheme is read in any case.
        assert!(admits(&auth, Some(&basic("alice:p@ss word"))));
        let lower = basic("bob:pw:with:colons").to_ascii_lowercase();
        assert!(!admits(&auth, Some(&lower)), "base64 is not case-blind");
        let mut mixed = b"bAsIc ".to_vec();
        mixed.extend_from_slice(&basic("bob:pw:with:colons")[6..]);
        assert!(admits(&auth, Some(&mixed)));
        for refused in [
            basic("alice:wrong"),
            basic("mallory:p@ss word"),
            basic("alice"),
            b"Bearer abc".to_vec(),
            b"Basic !!!".to_vec(),
            b"Basic".to_vec(),
            Vec::new(),
        ] {
            assert!(
                !admits(&auth, Some(&refused)),
                "{:?}",
                String::from_utf8_lossy(&refused)
            );
        }
        assert!(!admits(&auth, None));
    }
}
