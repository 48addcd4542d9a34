//! ingress-nginx's basic authentication as the table holds it: the challenge a refused request
//! gets and each user's password hash, read from an htpasswd file (`auth-secret`'s `auth`
//! key). Data only: translate parses it, `decide::auth` checks a request against it. The
//! hashes never leave the process: the table's JSON names the users only. No Kubernetes,
//! Pingora or tokio.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde::{Serialize, Serializer};

use crate::table::shared::Shared;

/// The users a route admits, and how it asks for credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The `WWW-Authenticate` value of a 401: `Basic realm="..."`.
    pub challenge: Arc<str>,
    /// User name -> password hash.
    pub users: BTreeMap<Box<str>, PasswordHash>,
    /// Credentials already verified, as SHA-1 digests of the `Authorization` value: a client
    /// that sends the same credentials again is not made to wait for bcrypt each time. Not
    /// part of equality; a rebuild starts it empty (a changed Secret is then checked anew).
    pub verified: Shared<Mutex<HashSet<[u8; 20]>>>,
}

/// The most credentials `BasicAuth::verified` remembers; past it, it starts over.
pub const VERIFIED_MAX: usize = 4096;

impl BasicAuth {
    /// Users from an htpasswd file's text: `user:hash` lines (blank lines and `#` comments
    /// skipped). A line that cannot be read is left out, and said in the second list (line
    /// number and why, never its hash).
    pub fn from_htpasswd(realm: &str, text: &str) -> (BasicAuth, Vec<String>) {
        let mut users = BTreeMap::new();
        let mut bad = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                bad.push(format!("line {}: no user:hash", n + 1));
                continue;
            };
            match PasswordHash::parse(hash.trim()) {
                Ok(h) if !user.is_empty() => {
                    users.insert(user.into(), h);
                }
                Ok(_) => bad.push(format!("line {}: no user name", n + 1)),
                Err(why) => bad.push(format!("line {} (user {user}): {why}", n + 1)),
            }
        }
        (BasicAuth::new(realm, users), bad)
    }

    pub fn new(realm: &str, users: BTreeMap<Box<str>, PasswordHash>) -> BasicAuth {
        let mut challenge = String::with_capacity(realm.len() + 16);
        challenge.push_str("Basic realm=\"");
        for c in realm.chars().filter(|c| !c.is_control()) {
            if c == '"' || c == '\\' {
                challenge.push('\\');
            }
            challenge.push(c);
        }
        challenge.push('"');
        BasicAuth {
            challenge: challenge.into(),
            users,
            verified: Shared::default(),
        }
    }
}

impl Serialize for BasicAuth {
    /// The challenge and the user names; never a hash.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("BasicAuth", 2)?;
        st.serialize_field("challenge", &*self.challenge)?;
        st.serialize_field("users", &self.users.keys().collect::<Vec<_>>())?;
        st.end()
    }
}

/// A password hash as htpasswd (and `openssl passwd`) writes it, in the forms nginx's
/// `auth_basic_user_file` reads.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordHash {
    /// `$2a$`, `$2b$`, `$2x$`, `$2y$` (`htpasswd -B`).
    Bcrypt(Box<str>),
    /// `$apr1$salt$hash` (htpasswd's default) or `$1$salt$hash` (`openssl passwd -1`): the
    /// MD5-based crypt, with that magic.
    Md5Crypt {
        magic: Md5Magic,
        salt: Box<str>,
        hash: Box<str>,
    },
    /// `{SHA}` + base64 of SHA-1 (`htpasswd -s`).
    Sha1([u8; 20]),
    /// `{SSHA}` + base64 of SHA-1 of the password and salt, then the salt.
    SaltedSha1 { digest: [u8; 20], salt: Box<[u8]> },
    /// `{PLAIN}` + the password itself.
    Plain(Box<str>),
}

/// Which MD5 crypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Md5Magic {
    Apr1,
    One,
}

impl Md5Magic {
    pub fn text(self) -> &'static str {
        match self {
            Md5Magic::Apr1 => "$apr1$",
            Md5Magic::One => "$1$",
        }
    }
}

impl fmt::Debug for PasswordHash {
    /// The kind only: a hash is not printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            PasswordHash::Bcrypt(_) => "bcrypt",
            PasswordHash::Md5Crypt {
                magic: Md5Magic::Apr1,
                ..
            } => "apr1",
            PasswordHash::Md5Crypt { .. } => "md5-crypt",
            PasswordHash::Sha1(_) => "sha1",
            PasswordHash::SaltedSha1 { .. } => "ssha",
            PasswordHash::Plain(_) => "plain",
        };
        f.write_str(kind)
    }
}

impl PasswordHash {
    /// Reads one hash. The crypt(3) forms htpasswd does not write by default (DES, `$5$`,
    /// `$6$`) are refused: that user cannot sign in, which fails closed.
    pub fn parse(v: &str) -> Result<PasswordHash, &'static str> {
        const SUPPORTED: &str = "is not a hash switchyard checks (bcrypt $2y$, $apr1$, $1$, \
                                 {SHA}, {SSHA}, {PLAIN})";
        let b64 = |s: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(s.trim())
                .ok()
        };
        if let Some(rest) = v.strip_prefix("{SHA}") {
            let d = b64(rest).ok_or("{SHA}: not base64")?;
            return Ok(PasswordHash::Sha1(
                d.try_into().map_err(|_| "{SHA}: not a SHA-1 digest")?,
            ));
        }
        if let Some(rest) = v.strip_prefix("{SSHA}") {
            let d = b64(rest).ok_or("{SSHA}: not base64")?;
            if d.len() <= 20 {
                return Err("{SSHA}: no salt after the digest");
            }
            let (digest, salt) = d.split_at(20);
            return Ok(PasswordHash::SaltedSha1 {
                digest: digest
                    .try_into()
                    .map_err(|_| "{SSHA}: not a SHA-1 digest")?,
                salt: salt.into(),
            });
        }
        if let Some(rest) = v.strip_prefix("{PLAIN}") {
            return Ok(PasswordHash::Plain(rest.into()));
        }
        for magic in [Md5Magic::Apr1, Md5Magic::One] {
            if let Some(rest) = v.strip_prefix(magic.text()) {
                let (salt, hash) = rest.split_once('$').ok_or("MD5 crypt: no salt$hash")?;
                if salt.len() > 8 || hash.len() != 22 {
                    return Err("MD5 crypt: salt longer than 8 or hash not 22 characters");
                }
                return Ok(PasswordHash::Md5Crypt {
                    magic,
                    salt: salt.into(),
                    hash: hash.into(),
                });
            }
        }
        if ["$2a$", "$2b$", "$2x$", "$2y$"]
            .iter()
            .any(|p| v.starts_with(p))
        {
            return match v.len() {
                60 => Ok(PasswordHash::Bcrypt(v.into())),
                _ => Err("bcrypt: not 60 characters"),
            };
        }
        Err(SUPPORTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_htpasswd_file_is_read_line_by_line_and_never_shown() {
        let text = "# team\n\nalice:$apr1$saltsalt$11QAx5Oiaores.cTy1Ple.\n\
                    bob:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n\
                    carol:$2a$04$UuTkLRZZ6QofpDOlMz32MuuxEHA43WOemOYHPz6.SjsVsyO1tDU96\n\
                    dave:abJnggxhB/yWI\nerin\neve:$6$salt$x\n";
        let (auth, bad) = BasicAuth::from_htpasswd("Staff \"only\"", text);
        assert_eq!(
            auth.users.keys().map(|k| &**k).collect::<Vec<_>>(),
            ["alice", "bob", "carol"]
        );
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad[0].starts_with("line 6 (user dave)"), "{bad:?}");
        assert!(!bad.iter().any(|b| b.contains("abJ")), "{bad:?}");
        assert_eq!(&*auth.challenge, r#"Basic realm="Staff \"only\"""#);
        let json = serde_json::to_string(&auth).unwrap();
        assert!(
            !json.contains("$apr1$") && json.contains("\"alice\""),
            "{json}"
        );
        assert!(!format!("{auth:?}").contains("saltsalt"));
    }

    #[test]
    fn malformed_hashes_are_refused() {
        for bad in [
            "{SHA}not-base64!",
            "{SHA}c2hvcnQ=",
            "{SSHA}5en6G6MezRroT3XKqkdPOmY/BfQ=",
            "$apr1$toolongsalt$11QAx5Oiaores.cTy1Ple.",
            "$apr1$nosalt",
            "$2y$04$short",
            "",
        ] {
            assert!(PasswordHash::parse(bad).is_err(), "{bad}");
        }
    }
}
