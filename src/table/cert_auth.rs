//! ingress-nginx's client-certificate verification of an Ingress host (`auth-tls-*`) as the
//! table holds it, and how it judges a request from what the connection's certificate proved
//! (nginx's verdicts: 400 or the error page, 403 for `match-cn`). Data and a pure judgement
//! only: where it applies is `client_validation`'s, the handshake is `data::tls`'s.

use serde::Serialize;

use crate::table::pattern::Pattern;

/// ingress-nginx's `auth-tls-verify-client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyClient {
    /// A certificate that verifies is required (`on`, the default).
    On,
    /// One that is presented must verify; none is served too.
    Optional,
    /// Asked for, never required to verify: the backend is told the result.
    OptionalNoCa,
}

impl VerifyClient {
    /// ingress-nginx's values; `off` is not one here (nothing is asked, nothing is made).
    pub fn parse(v: &str) -> Option<VerifyClient> {
        match v.trim() {
            "on" => Some(VerifyClient::On),
            "optional" => Some(VerifyClient::Optional),
            "optional_no_ca" => Some(VerifyClient::OptionalNoCa),
            _ => None,
        }
    }
}

/// An Ingress host's client-certificate verification (ingress-nginx's `auth-tls-*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IngressCertAuth {
    pub verify: VerifyClient,
    /// `auth-tls-verify-depth`: the longest chain, the client's certificate included, that
    /// may lead to the bundle (1: signed by a certificate of the bundle itself).
    pub depth: u8,
    /// `auth-tls-error-page`: where a client without a valid certificate is sent (302)
    /// instead of answered 400.
    pub error_page: Option<Box<str>>,
    /// `auth-tls-pass-certificate-to-upstream`: the certificate goes to the backend too.
    pub pass_certificate: bool,
    /// `auth-tls-match-cn`: searched for in the subject; a client whose subject it is not
    /// found in is answered 403.
    pub match_cn: Option<Pattern>,
}

/// What a connection's client certificate proved, as the request side reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proved<'a> {
    /// The CA bundle it verified against (`None`: none, or it did not verify).
    pub ca: Option<&'a [u8]>,
    /// A certificate was presented (whether or not it verified).
    pub presented: bool,
    /// Its subject, one line, as `ssl-client-subject-dn` carries it (empty without one).
    pub subject: &'a str,
}

/// How an Ingress host's verification judges a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertVerdict {
    /// Served; the backend is told the result.
    Pass,
    /// No valid certificate where one is required (nginx's 495/496): 400, or a redirect to
    /// the error page.
    Refused,
    /// `auth-tls-match-cn` is not found in the subject: 403.
    Unauthorized,
}

impl IngressCertAuth {
    /// nginx's verdict for a request on a connection that proved `proved`, for a host whose
    /// bundle is `ca`.
    pub fn judge(&self, ca: &[u8], proved: Proved<'_>) -> CertVerdict {
        let verified = proved.ca.is_some_and(|p| std::ptr::eq(p, ca) || p == ca);
        let refused = match self.verify {
            VerifyClient::On => !verified,
            VerifyClient::Optional => proved.presented && !verified,
            VerifyClient::OptionalNoCa => false,
        };
        if refused {
            return CertVerdict::Refused;
        }
        // nginx's `if ($ssl_client_s_dn !~ ...)`: an absent subject is the empty string.
        match &self.match_cn {
            Some(p) if !p.is_match(proved.subject) => CertVerdict::Unauthorized,
            _ => CertVerdict::Pass,
        }
    }
}
