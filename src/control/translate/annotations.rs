//! A Service's annotations and spec settings parsed into `Settings`: each bad value is a
//! warning and a default for that setting alone. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;

use super::view::*;
use crate::table::CheckSpec;
use crate::table::balance::Algorithm;
use crate::table::matcher::{HostPattern, validate_host, validate_prefix};
use crate::table::upstream::{BackendProtocol, CaBundle};

/// Parsed annotations and spec settings of one Service.
pub(super) struct Settings {
    pub(super) algorithm: Algorithm,
    /// `lb.host`: each valid name of the space-separated list.
    pub(super) hosts: Vec<HostPattern>,
    /// `lb.aclMatch`: each valid prefix, with whether it ignores case (`-i`).
    pub(super) acl: Vec<AclPrefix>,
    pub(super) ssl_term: bool,
    pub(super) cookie_sticky: bool,
    pub(super) maxconn: Option<u32>,
    pub(super) affinity: Option<Duration>,
    pub(super) check: CheckSpec,
    /// `lb.backend-protocol`: overrides every port's `appProtocol`.
    pub(super) backend_protocol: Option<BackendProtocol>,
    /// `lb.backend-sni`: the TLS server name instead of the Service's DNS name.
    pub(super) backend_sni: Option<String>,
    /// `lb.backend-insecure-skip-verify`.
    pub(super) skip_verify: bool,
    /// `lb.send-proxy-protocol: v2`.
    pub(super) send_proxy: bool,
    /// `lb.backend-ca-file`: an absolute path to a PEM bundle.
    pub(super) backend_ca_file: Option<String>,
    /// `lb.backend-ca-secret` or `lb.backend-ca-configmap`: the kind and name of the object,
    /// in the Service's namespace, whose `ca.crt` is the CA bundle (it overrides the file).
    pub(super) backend_ca_object: Option<(&'static str, String)>,
    /// That object's bundle, resolved by the builder against the objects it was given.
    pub(super) backend_ca: Option<CaBundle>,
    /// `lb.backend-client-cert` and `lb.backend-client-key`: absolute paths, both or neither.
    pub(super) backend_client_cert: Option<(String, String)>,
}

/// One `lb.aclMatch` prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct AclPrefix {
    pub(super) prefix: String,
    pub(super) ignore_case: bool,
}

/// Reads `lb.aclMatch` as HAProxy read the original's `path_beg` pattern list: flags first
/// (`-i` ignores case for the patterns that follow it; `--` ends the flags), then prefixes.
/// Any other flag is warned about and ignored (`-f` and `-m` with their argument).
pub(super) fn parse_acl_match(v: &str, mut warn: impl FnMut(&str, String)) -> Vec<AclPrefix> {
    let mut out = BTreeSet::new();
    let mut ignore_case = false;
    let mut flags_done = false;
    let mut tokens = v.split_ascii_whitespace();
    while let Some(t) = tokens.next() {
        if !flags_done && t.starts_with('-') {
            match t {
                "-i" => ignore_case = true,
                "--" => flags_done = true,
                "-f" | "-m" => {
                    let arg = tokens.next().unwrap_or("");
                    warn(
                        &format!("{t} {arg}"),
                        format!("flag {t} is not supported (only -i is); ignored"),
                    );
                }
                _ => warn(
                    t,
                    format!("flag {t} is not supported (only -i is); ignored"),
                ),
            }
            continue;
        }
        flags_done = true;
        match validate_prefix(t) {
            Ok(()) => {
                out.insert(AclPrefix {
                    prefix: if ignore_case {
                        t.to_ascii_lowercase()
                    } else {
                        t.to_string()
                    },
                    ignore_case,
                });
            }
            Err(why) => warn(t, format!("is not a valid path prefix ({why}); ignored")),
        }
    }
    out.into_iter().collect()
}

/// Longest check interval accepted, and the shortest non-zero one (the original's `inter 5`
/// meant 5 ms, a check storm; a unit is required so that cannot happen by accident).
pub(super) const CHECK_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(3600));

/// `lb.check-interval`: `0` (off), or a duration (`500ms`, `5s`, `2m`; see [`parse_duration`])
/// between 100 ms and 1 h. A bare number other than `0` is refused: `inter 5` meant 5 ms.
pub(super) fn parse_check_interval(v: &str) -> Result<Duration, &'static str> {
    let v = v.trim();
    if v == "0" {
        return Ok(Duration::ZERO);
    }
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) {
        return Err("needs a unit (like 500ms, 5s or 2m)");
    }
    let d = parse_duration(v).map_err(|_| "is not a duration like 5s or 500ms")?;
    let (min, max) = CHECK_INTERVAL_RANGE;
    if d.is_zero() {
        Ok(d)
    } else if d < min || d > max {
        Err("must be 0 (off) or between 100ms and 60m")
    } else {
        Ok(d)
    }
}

/// Longest duration any flag or annotation accepts: beyond it a deadline is a typo.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The one duration syntax of switchyard's flags and annotations (humantime): a number with
/// a unit, several of them summed: `250ms`, `30s`, `5m`, `2h`, `1h30m`. At most a week.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    // humantime's own message offers months and years, which are never accepted here.
    let d = humantime::parse_duration(s).map_err(|_| {
        format!("{s:?} is not a duration like 500ms, 30s, 5m, 2h or 1h30m (ms, s, m, h, d)")
    })?;
    if d > MAX_DURATION {
        return Err(format!("{s:?} is longer than a week"));
    }
    Ok(d)
}

/// `lb.check-path`: an absolute path (query allowed) of visible ASCII, at most 1 KiB.
pub(super) fn validate_check_path(v: &str) -> Result<(), &'static str> {
    if !v.starts_with('/') {
        return Err("must start with '/'");
    }
    if v.len() > 1024 {
        return Err("is longer than 1024 characters");
    }
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("may only hold visible ASCII characters");
    }
    Ok(())
}

/// `lb.check-grpc`: a gRPC service name (`pkg.Service`; empty for the whole server) of
/// letters, digits, `.`, `_` and `-`, at most 256 characters.
pub(super) fn validate_grpc_service(v: &str) -> Result<(), &'static str> {
    if v.len() > 256 {
        return Err("is longer than 256 characters");
    }
    if !v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("is not a gRPC service name (letters, digits, '.', '_', '-')");
    }
    Ok(())
}

/// Go's `strconv.ParseBool`, which the original used.
pub(super) fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A shortened, escaped rendering of a bad value for a warning message.
pub(super) fn show(v: &str) -> String {
    let short: String = v.chars().take(80).collect();
    let ellipsis = if short.len() < v.len() { "…" } else { "" };
    format!("{short:?}{ellipsis}")
}

/// Reads one Service's annotations, turning bad values into warnings.
pub(super) struct Annotations<'a> {
    pub(super) map: Option<&'a BTreeMap<String, String>>,
    pub(super) who: &'a ObjectRef,
    pub(super) warnings: &'a mut Vec<Warning>,
}

impl<'a> Annotations<'a> {
    pub(super) fn warn(&mut self, key: &str, value: &str, why: &str) {
        self.warnings.push(Warning {
            object: self.who.clone(),
            reason: WarningReason::InvalidAnnotation,
            message: format!("{key}: {} {why}", show(value)),
        });
    }

    pub(super) fn get(&mut self, key: &str) -> Option<&'a str> {
        let v = self.map?.get(key)?;
        if v.len() > MAX_ANNOTATION_LEN {
            self.warn(key, v, "is too long; ignored");
            return None;
        }
        Some(v.as_str())
    }

    /// Warns about every key under the annotations' prefix that switchyard does not read (a
    /// typo like `lb.sticky` would otherwise be silently without effect), naming the nearest
    /// known key.
    pub(super) fn unknown_keys(&mut self) {
        let Some(map) = self.map else {
            return;
        };
        for key in map.keys() {
            if !key.starts_with(annotation::PREFIX) || annotation::KNOWN.contains(&key.as_str()) {
                continue;
            }
            let nearest = nearest_key(key, annotation::PREFIX, "lb.", &annotation::KNOWN)
                .unwrap_or(annotation::HOST);
            self.warnings.push(Warning {
                object: self.who.clone(),
                reason: WarningReason::InvalidAnnotation,
                message: format!(
                    "{}: unknown annotation, ignored; did you mean {nearest}?",
                    show(key)
                ),
            });
        }
    }

    pub(super) fn flag(&mut self, key: &str) -> bool {
        let Some(v) = self.get(key) else {
            return false;
        };
        parse_bool(v).unwrap_or_else(|| {
            self.warn(key, v, "is not a boolean; using false");
            false
        })
    }
}

/// Whether a Service asks for routes of its own: `lb.expose` when it is a boolean, else
/// whether it names where to be routed (`lb.host`, `lb.aclMatch`); `None` when it says
/// nothing (`--service-routes` decides). A bad `lb.expose` is warned about by `settings`.
pub(super) fn asks_for_routes(svc: &Service) -> Option<bool> {
    let map = svc.metadata.annotations.as_ref()?;
    if let Some(v) = map.get(annotation::EXPOSE)
        && let Some(b) = parse_bool(v)
    {
        return Some(b);
    }
    (map.contains_key(annotation::HOST) || map.contains_key(annotation::ACL_MATCH)).then_some(true)
}

/// The known key (each under `prefix`) a user most likely meant by `key`: one that contains
/// what was typed after `prefix` and `common` (`lb.sticky`: `lb.cookie-sticky-session`) is the
/// likelier meaning; otherwise the closest spelling.
pub(super) fn nearest_key(
    key: &str,
    prefix: &str,
    common: &str,
    known: &[&'static str],
) -> Option<&'static str> {
    let typed = key.get(prefix.len()..)?.to_ascii_lowercase();
    let part = typed.trim_start_matches(common);
    known
        .iter()
        .min_by_key(|k| {
            let known = k.get(prefix.len()..).unwrap_or(k).to_ascii_lowercase();
            if !part.is_empty() && known.contains(part) {
                0
            } else {
                1 + edit_distance(&typed, &known)
            }
        })
        .copied()
}

pub(super) fn settings(
    svc: &Service,
    options: &Options,
    who: &ObjectRef,
    warnings: &mut Vec<Warning>,
) -> Settings {
    let mut ann = Annotations {
        map: svc.metadata.annotations.as_ref(),
        who,
        warnings,
    };
    ann.unknown_keys();
    let algorithm = match ann.get(annotation::ALGORITHM) {
        None => options.default_algorithm,
        Some(v) => v.parse::<Algorithm>().unwrap_or_else(|_| {
            let why = format!(
                "is not roundrobin, leastconn, first or source; using {}",
                options.default_algorithm
            );
            ann.warn(annotation::ALGORITHM, v, &why);
            options.default_algorithm
        }),
    };
    let mut hosts = BTreeSet::new();
    for name in ann
        .get(annotation::HOST)
        .unwrap_or("")
        .split_ascii_whitespace()
    {
        match validate_host(name) {
            Ok(h) => {
                hosts.insert(h);
            }
            Err(why) => ann.warn(
                annotation::HOST,
                name,
                &format!("is not a valid host ({why}); this name is ignored"),
            ),
        }
    }
    if hosts.is_empty()
        && let Some(v) = ann.get(annotation::HOST)
        && !v.trim().is_empty()
    {
        ann.warn(
            annotation::HOST,
            v,
            "holds no valid host; the Service keeps its path route",
        );
    }
    let hosts: Vec<HostPattern> = hosts.into_iter().collect();
    let acl = match ann.get(annotation::ACL_MATCH) {
        None => Vec::new(),
        Some(v) => {
            let mut bad = Vec::new();
            let acl = parse_acl_match(v, |token, why| bad.push((token.to_string(), why)));
            for (token, why) in bad {
                ann.warn(annotation::ACL_MATCH, &token, &why);
            }
            acl
        }
    };
    if let Some(v) = ann.get(annotation::EXPOSE)
        && parse_bool(v).is_none()
    {
        ann.warn(
            annotation::EXPOSE,
            v,
            "is not a boolean; --service-routes decides whether the Service is routed",
        );
    }
    let ssl_term = ann.flag(annotation::SSL_TERM);
    let cookie_sticky = ann.flag(annotation::COOKIE_STICKY);
    let maxconn = ann
        .get(annotation::MAXCONN)
        .and_then(|v| match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                ann.warn(
                    annotation::MAXCONN,
                    v,
                    "is not a positive integer; no limit",
                );
                None
            }
        });
    let interval =
        ann.get(annotation::CHECK_INTERVAL)
            .and_then(|v| match parse_check_interval(v) {
                Ok(d) => Some(d),
                Err(why) => {
                    ann.warn(
                        annotation::CHECK_INTERVAL,
                        v,
                        &format!("{why}; using the default interval"),
                    );
                    None
                }
            });
    let path = ann
        .get(annotation::CHECK_PATH)
        .and_then(|v| match validate_check_path(v.trim()) {
            Ok(()) => Some(v.trim().into()),
            Err(why) => {
                ann.warn(
                    annotation::CHECK_PATH,
                    v,
                    &format!("{why}; using a TCP connect check"),
                );
                None
            }
        });
    let grpc =
        ann.get(annotation::CHECK_GRPC)
            .and_then(|v| match validate_grpc_service(v.trim()) {
                Ok(()) => Some(v.trim().into()),
                Err(why) => {
                    ann.warn(
                        annotation::CHECK_GRPC,
                        v,
                        &format!("{why}; no gRPC health check"),
                    );
                    None
                }
            });
    let check = CheckSpec {
        interval,
        path,
        grpc,
    };
    let backend_protocol =
        ann.get(annotation::BACKEND_PROTOCOL)
            .and_then(|v| match BackendProtocol::parse(v) {
                Some(p) => Some(p),
                None => {
                    ann.warn(
                        annotation::BACKEND_PROTOCOL,
                        v,
                        "is not http, h2c, https, h2, grpc or grpcs; using appProtocol",
                    );
                    None
                }
            });
    let backend_sni = ann
        .get(annotation::BACKEND_SNI)
        .and_then(|v| match validate_host(v) {
            Ok(HostPattern::Exact(h)) if !h.contains(':') => Some(h),
            _ => {
                ann.warn(
                    annotation::BACKEND_SNI,
                    v,
                    "is not a host name; using the Service's DNS name",
                );
                None
            }
        });
    let skip_verify = ann.flag(annotation::BACKEND_SKIP_VERIFY);
    let send_proxy = match ann.get(annotation::SEND_PROXY) {
        None => false,
        Some("v2") => true,
        Some(v) => {
            ann.warn(
                annotation::SEND_PROXY,
                v,
                "is not v2; no PROXY header is sent",
            );
            false
        }
    };
    let backend_ca_file = ann
        .get(annotation::BACKEND_CA_FILE)
        .and_then(|v| match file_path(v) {
            Some(p) => Some(p),
            None => {
                ann.warn(
                    annotation::BACKEND_CA_FILE,
                    v,
                    "is not an absolute file path; using --backend-ca-file",
                );
                None
            }
        });
    // One source of trust per Service, in this order: a Secret, a ConfigMap, a file. The
    // others are warned about rather than silently dropped.
    let secret = ann.get(annotation::BACKEND_CA_SECRET);
    let configmap = ann.get(annotation::BACKEND_CA_CONFIGMAP);
    let backend_ca_object = match (secret, configmap) {
        (Some(s), c) => {
            if let Some(c) = c {
                ann.warn(
                    annotation::BACKEND_CA_CONFIGMAP,
                    c,
                    "is ignored: lb.backend-ca-secret is set and takes precedence",
                );
            }
            Some(("Secret", s.trim().to_string()))
        }
        (None, Some(c)) => Some(("ConfigMap", c.trim().to_string())),
        (None, None) => None,
    };
    let backend_ca_file = match (backend_ca_file, &backend_ca_object) {
        (Some(file), Some((kind, _))) => {
            ann.warn(
                annotation::BACKEND_CA_FILE,
                &file,
                &format!("is ignored: the {kind} annotation is set and takes precedence"),
            );
            None
        }
        (file, _) => file,
    };
    let cert = ann.get(annotation::BACKEND_CLIENT_CERT);
    let key = ann.get(annotation::BACKEND_CLIENT_KEY);
    let backend_client_cert = match (cert, key) {
        (None, None) => None,
        (Some(c), Some(k)) => match (file_path(c), file_path(k)) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => {
                ann.warn(
                    annotation::BACKEND_CLIENT_CERT,
                    &format!("{c} {k}"),
                    "and its key must be absolute file paths; using --backend-client-cert",
                );
                None
            }
        },
        (Some(v), None) | (None, Some(v)) => {
            ann.warn(
                annotation::BACKEND_CLIENT_CERT,
                v,
                "needs both lb.backend-client-cert and lb.backend-client-key; using \
                 --backend-client-cert",
            );
            None
        }
    };

    let spec = svc.spec.as_ref();
    let affinity = match spec.and_then(|s| s.session_affinity.as_deref()) {
        Some("ClientIP") => {
            let t = spec
                .and_then(|s| s.session_affinity_config.as_ref())
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            Some(match t {
                Some(secs) if secs > 0 => Duration::from_secs(secs.unsigned_abs().into()),
                Some(secs) => {
                    warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::InvalidObject,
                        message: format!(
                            "sessionAffinityConfig.clientIP.timeoutSeconds {secs} is not positive; using {}",
                            DEFAULT_AFFINITY_TIMEOUT.as_secs()
                        ),
                    });
                    DEFAULT_AFFINITY_TIMEOUT
                }
                None => DEFAULT_AFFINITY_TIMEOUT,
            })
        }
        _ => None,
    };
    Settings {
        algorithm,
        hosts,
        acl,
        ssl_term,
        cookie_sticky,
        maxconn,
        affinity,
        check,
        backend_protocol,
        backend_sni,
        skip_verify,
        send_proxy,
        backend_ca_file,
        backend_ca_object,
        backend_ca: None,
        backend_client_cert,
    }
}

/// A file path annotation: absolute, printable, at most 1 KiB. Translate reads no files: the
/// path is checked for shape here, loaded (and its failures reported) by the data plane.
fn file_path(v: &str) -> Option<String> {
    let v = v.trim();
    let plain = v.starts_with('/') && v.len() <= 1024 && !v.chars().any(char::is_control);
    plain.then(|| v.to_string())
}

/// Levenshtein distance over bytes (keys are short ASCII; a longer key only costs more).
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(ca != cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}
