//! Turning the merged text values into a [`Config`], with one error per bad value naming
//! its key and where it came from.

use crate::invalid::Invalid;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::file::{RawAbuse, RawAdaptive, RawFile, RawRoom, line_of_key};
use super::{
    Config, ConfigError, KafkaConfig, PageFile, RedisConfig, RoomConfig, Schedule, Secret,
    ServerConfig, WaitingPageConfig,
};
use crate::identity::normalize_host;
use crate::queue::RoomPolicy;

/// Where a value came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum Src {
    #[default]
    Default,
    /// 1-based line in the config file.
    File(u64),
    Env(&'static str),
    Flag(&'static str),
    Generated,
}

/// A value as text, before parsing.
#[derive(Clone, Debug, Default)]
pub(super) struct V {
    pub text: String,
    pub src: Src,
}

impl V {
    pub fn new(text: impl Into<String>, src: Src) -> V {
        V {
            text: text.into(),
            src,
        }
    }
}

/// Builds errors with the file name and the value's line.
struct Ctx<'a> {
    file: Option<&'a str>,
    text: Option<&'a str>,
}

impl Ctx<'_> {
    fn fail(&self, key: &str, v: &V, message: impl Into<String>) -> ConfigError {
        let mut message = message.into();
        let line = match v.src {
            Src::File(line) => Some(line),
            Src::Env(name) | Src::Flag(name) => {
                message.push_str(&format!(" (set by {name})"));
                None
            }
            Src::Default | Src::Generated => None,
        };
        ConfigError::Invalid {
            file: match v.src {
                Src::File(_) | Src::Default => self.file.map(str::to_string),
                _ => None,
            },
            line,
            key: key.to_string(),
            message,
        }
    }

    /// An error about a key with no value to point at (missing, or a whole section).
    fn fail_key(&self, path: &[&str], message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.map(str::to_string),
            line: self.text.and_then(|t| line_of_key(t, path)),
            key: path.join("."),
            message: message.into(),
        }
    }
}

fn or_default(v: &Option<V>, default: &str) -> V {
    v.clone().unwrap_or_else(|| V::new(default, Src::Default))
}

impl RawFile {
    pub fn validate(self, file: Option<&str>, text: Option<&str>) -> Result<Config, ConfigError> {
        let cx = Ctx { file, text };
        let d = &self;

        let listen = {
            let v = or_default(&d.listen, ":8080");
            parse_listen(&v.text).map_err(|m| cx.fail("listen", &v, m))?
        };
        let admit_interval_v = or_default(&d.admit_interval, "250ms");
        let admit_interval = duration(&cx, "admit_interval", &admit_interval_v)?;
        if admit_interval < Duration::from_millis(10) {
            let v = admit_interval_v;
            return Err(cx.fail(
                "admit_interval",
                &v,
                format!("must be at least 10ms (got {})", v.text.trim()),
            ));
        }

        let cookie_secret = match &d.cookie_secret {
            Some(v) => Secret::cookie_key(&v.text).map_err(|m| cx.fail("cookie_secret", v, m))?,
            None => {
                return Err(cx.fail_key(
                    &["cookie_secret"],
                    "required: set it in the config file or ANTEROOM_COOKIE_SECRET \
                     (64 hex characters; `anteroom init` generates one)",
                ));
            }
        };
        let mut previous_cookie_secrets = Vec::new();
        for (i, v) in d.previous_cookie_secrets.iter().enumerate() {
            let key = format!("previous_cookie_secrets[{i}]");
            previous_cookie_secrets
                .push(Secret::cookie_key(&v.text).map_err(|m| cx.fail(&key, v, m))?);
        }
        // Empty (as `admission_key: ""`) means no admission header.
        let admission_key = match &d.admission_key {
            Some(v) if !v.text.trim().is_empty() => Some(std::sync::Arc::new(
                crate::fairness::admission_token::AdmissionKey::parse(&v.text).map_err(|e| {
                    cx.fail(
                        "admission_key",
                        v,
                        format!(
                            "{e} (base64url of a 32-byte Ed25519 seed, or a PKCS#8 PEM key; \
                             `anteroom init` generates one)"
                        ),
                    )
                })?,
            )),
            _ => None,
        };
        let admin_token = match &d.admin_token {
            Some(v) => {
                bearer_token(&cx, "admin_token", v)?;
                Secret::from_text(v.text.clone())
            }
            None => {
                return Err(cx.fail_key(
                    &["admin_token"],
                    "required: set it in the config file or ANTEROOM_ADMIN_TOKEN \
                     (`anteroom init` generates one)",
                ));
            }
        };

        // Key of the priority grants (SPEC §10 "Priority"): its UTF-8 bytes, as the site's
        // own minting code will use them; empty or absent means grants are off.
        let priority_secret = match &d.priority_secret {
            Some(v) if !v.text.is_empty() => {
                let n = v.text.len();
                if n < 32 {
                    return Err(cx.fail(
                        "priority_secret",
                        v,
                        format!(
                            "must be at least 32 bytes (got {n}; `anteroom init` writes a \
                             64-character one)"
                        ),
                    ));
                }
                Some(Secret::from_text(v.text.clone()))
            }
            _ => None,
        };

        let secure_cookies = boolean(
            &cx,
            "secure_cookies",
            &or_default(&d.secure_cookies, "false"),
        )?;
        let public_scheme = {
            let v = or_default(&d.public_scheme, "http");
            match v.text.trim() {
                "http" => "http",
                "https" => "https",
                other => {
                    return Err(cx.fail(
                        "public_scheme",
                        &v,
                        format!("must be http or https (got {other:?})"),
                    ));
                }
            }
        };
        let mut trusted_proxies = Vec::new();
        for (i, v) in d.trusted_proxies.iter().enumerate() {
            let key = format!("trusted_proxies[{i}]");
            trusted_proxies.push(parse_net(&v.text).map_err(|m| cx.fail(&key, v, m))?);
        }
        let data_dir = {
            let v = or_default(&d.data_dir, "./anteroom-data");
            if v.text.trim().is_empty() {
                return Err(cx.fail("data_dir", &v, "must not be empty"));
            }
            PathBuf::from(v.text.trim())
        };
        let waiting_page = WaitingPageConfig {
            template: page_file(&cx, "waiting_template", &d.waiting_template, |text| {
                minijinja::Environment::new()
                    .template_from_str(text)
                    .map(|_| ())
                    .map_err(|e| Invalid(format!("is not a valid template: {e}")))
            })?,
            stylesheet: page_file(&cx, "waiting_stylesheet", &d.waiting_stylesheet, |text| {
                if text.to_ascii_lowercase().contains("</style") {
                    Err(Invalid::new(
                        "must not contain `</style` (it is placed inside a <style> element)",
                    ))
                } else {
                    Ok(())
                }
            })?,
        };
        let fail_open = boolean(&cx, "fail_open", &or_default(&d.fail_open, "false"))?;
        let fail_open_after = positive_duration(
            &cx,
            "fail_open_after",
            &or_default(&d.fail_open_after, "30s"),
        )?;

        let admin_listen = match &d.admin_listen {
            Some(v) if !v.text.trim().is_empty() => {
                let addr = parse_listen(&v.text).map_err(|m| cx.fail("admin_listen", v, m))?;
                // Port 0 (any free port, as tests use) never collides.
                if addr == listen && addr.port() != 0 {
                    return Err(cx.fail(
                        "admin_listen",
                        v,
                        "must differ from `listen` (leave it empty to serve the admin there)",
                    ));
                }
                Some(addr)
            }
            _ => None,
        };
        let mut admin_allow = Vec::new();
        for (i, v) in d.admin_allow.iter().enumerate() {
            let key = format!("admin_allow[{i}]");
            admin_allow.push(parse_net(&v.text).map_err(|m| cx.fail(&key, v, m))?);
        }
        let metrics_token = match &d.metrics_token {
            Some(v) if !v.text.is_empty() => {
                bearer_token(&cx, "metrics_token", v)?;
                if admin_token.ct_eq(v.text.as_bytes()) {
                    return Err(cx.fail(
                        "metrics_token",
                        v,
                        "must differ from admin_token (it may only read the metrics)",
                    ));
                }
                Some(Secret::from_text(v.text.clone()))
            }
            _ => None,
        };

        // Opened here as the writer will open it, so a bad path fails at load (and `check`).
        let access_log = match &d.access_log {
            Some(v) => crate::access_log::Target::parse(&v.text)
                .map_err(|m| cx.fail("access_log", v, m))?,
            None => crate::access_log::Target::Off,
        };

        let redis = {
            let v = or_default(&d.redis.url, "");
            let url = v.text.trim().to_string();
            validate_redis_url(&url).map_err(|m| cx.fail("redis.url", &v, m))?;
            let ca_file = ca_file(&cx, "redis.ca_file", &d.redis.ca_file)?;
            let redis = RedisConfig { url, ca_file };
            // The very function the server connects with, so both accept the same URLs.
            if !redis.is_embedded() {
                crate::queue::redis_client::build(&redis.nodes(), redis.ca_file.as_ref())
                    .map_err(|m| cx.fail("redis.url", &v, m))?;
            } else if let (Some(_), Some(ca)) = (&redis.ca_file, &d.redis.ca_file) {
                return Err(cx.fail("redis.ca_file", ca, "is set but redis.url is empty"));
            }
            redis
        };
        let origin_ca_file = ca_file(&cx, "origin_ca_file", &d.origin_ca_file)?;

        let mut brokers = Vec::new();
        for (i, v) in d.kafka.brokers.iter().enumerate() {
            let b = v.text.trim();
            if b.is_empty() || b.contains(char::is_whitespace) {
                return Err(cx.fail(
                    &format!("kafka.brokers[{i}]"),
                    v,
                    format!("must be a host:port address (got {:?})", v.text),
                ));
            }
            brokers.push(b.to_string());
        }
        let topic = or_default(&d.kafka.topic, "anteroom.events");
        if topic.text.trim().is_empty() {
            return Err(cx.fail("kafka.topic", &topic, "must not be empty"));
        }
        let mut properties = std::collections::BTreeMap::new();
        for (k, v) in &d.kafka.properties {
            properties.insert(k.trim().to_string(), v.text.clone());
        }
        if let Some(v) = &d.kafka.sasl_password {
            properties.insert("sasl.password".to_string(), v.text.clone());
        }
        let kafka = KafkaConfig {
            brokers,
            topic: topic.text.trim().to_string(),
            properties: crate::events::KafkaProperties(properties),
        };
        crate::events::check_properties(&kafka).map_err(|(key, m)| {
            let at = d.kafka.properties.iter().find(|(k, _)| k.trim() == key);
            let from_env = d
                .kafka
                .sasl_password
                .as_ref()
                .filter(|_| key == "sasl.password");
            match (at, from_env) {
                (_, Some(v)) | (Some((_, v)), None) => {
                    cx.fail(&format!("kafka.properties.{key}"), v, m)
                }
                (None, None) if key.is_empty() => cx.fail_key(&["kafka", "properties"], m),
                (None, None) => cx.fail_key(&["kafka", "properties"], format!("{key}: {m}")),
            }
        })?;

        let max_connections = count(
            &cx,
            "server.max_connections",
            &or_default(&d.server.max_connections, "10000"),
            1,
        )?;
        let server = ServerConfig {
            header_read_timeout: positive_duration(
                &cx,
                "server.header_read_timeout",
                &or_default(&d.server.header_read_timeout, "10s"),
            )?,
            idle_timeout: positive_duration(
                &cx,
                "server.idle_timeout",
                &or_default(&d.server.idle_timeout, "60s"),
            )?,
            origin_connect_timeout: positive_duration(
                &cx,
                "server.origin_connect_timeout",
                &or_default(&d.server.origin_connect_timeout, "5s"),
            )?,
            origin_timeout: positive_duration(
                &cx,
                "server.origin_timeout",
                &or_default(&d.server.origin_timeout, "30s"),
            )?,
            max_connections,
            max_connections_per_client: count(
                &cx,
                "server.max_connections_per_client",
                &or_default(&d.server.max_connections_per_client, "512"),
                1,
            )?,
            max_streams: {
                let default = (max_connections / 2).to_string();
                let v = or_default(&d.server.max_streams, &default);
                let n = count(&cx, "server.max_streams", &v, 0)?;
                if n >= max_connections {
                    return Err(cx.fail(
                        "server.max_streams",
                        &v,
                        format!(
                            "must be below server.max_connections ({max_connections}) so open \
                             waiting pages always leave connections for admitted visitors"
                        ),
                    ));
                }
                n
            },
            max_streams_per_client: count(
                &cx,
                "server.max_streams_per_client",
                &or_default(&d.server.max_streams_per_client, "64"),
                1,
            )?,
            http2_max_streams: {
                let v = or_default(&d.server.http2_max_streams, "100");
                let n = count(&cx, "server.http2_max_streams", &v, 1)?;
                u32::try_from(n).map_err(|_| {
                    cx.fail("server.http2_max_streams", &v, "must be at most 4294967295")
                })?
            },
            workers: match &d.server.workers {
                None => super::default_workers(),
                Some(v) => {
                    let n = count(&cx, "server.workers", v, 1)?;
                    if n > MAX_WORKERS {
                        return Err(cx.fail(
                            "server.workers",
                            v,
                            format!("must be at most {MAX_WORKERS}"),
                        ));
                    }
                    n
                }
            },
            body_timeout: positive_duration(
                &cx,
                "server.body_timeout",
                &or_default(&d.server.body_timeout, "60s"),
            )?,
            shutdown_grace: duration(
                &cx,
                "server.shutdown_grace",
                &or_default(&d.server.shutdown_grace, "30s"),
            )?,
            drain_delay: {
                let v = or_default(&d.server.drain_delay, "0s");
                let delay = duration(&cx, "server.drain_delay", &v)?;
                // A load balancer notices a failing readyz within seconds; a longer delay
                // only postpones a stop that the service manager will force anyway.
                if delay > MAX_DRAIN_DELAY {
                    return Err(cx.fail(
                        "server.drain_delay",
                        &v,
                        format!("must be at most 5m (got {})", v.text.trim()),
                    ));
                }
                delay
            },
        };

        let abuse = validate_abuse(&cx, &d.abuse)?;

        if d.rooms.0.is_empty() {
            return Err(cx.fail_key(
                &["rooms"],
                "at least one room is required (a name with an `origin`)",
            ));
        }
        let mut rooms: Vec<RoomConfig> = Vec::new();
        for r in &d.rooms.0 {
            let room = validate_room(&cx, r)?;
            if let Some(prev) = rooms.iter().find(|p| p.name == room.name) {
                return Err(cx.fail(
                    &format!("rooms.{}", room.name),
                    &r.name,
                    format!("room `{}` is defined twice", prev.name),
                ));
            }
            if let Some(prev) = rooms.iter().find(|p| p.match_host == room.match_host) {
                let key = format!("rooms.{}.match_host", room.name);
                let at = r.match_host.clone().unwrap_or_else(|| r.name.clone());
                return Err(match &room.match_host {
                    None => cx.fail(
                        &key,
                        &at,
                        format!(
                            "only one room may be the catch-all (empty match_host), and room `{}` \
                             already is",
                            prev.name
                        ),
                    ),
                    Some(host) => cx.fail(
                        &key,
                        &at,
                        format!("host `{host}` is already matched by room `{}`", prev.name),
                    ),
                });
            }
            rooms.push(room);
        }

        let config = Config {
            listen,
            admit_interval,
            cookie_secret,
            previous_cookie_secrets,
            admin_token,
            admission_key,
            priority_secret,
            secure_cookies,
            public_scheme,
            trusted_proxies,
            data_dir,
            waiting_page,
            fail_open,
            fail_open_after,
            origin_ca_file,
            admin_listen,
            admin_allow,
            metrics_token,
            access_log,
            redis,
            kafka,
            server,
            abuse,
            rooms,
        };
        // What the origin client will trust, built as the server builds it.
        crate::config::origins_tls_config(&config).map_err(|m| match &d.origin_ca_file {
            Some(v) => cx.fail("origin_ca_file", v, m.to_string()),
            None => cx.fail_key(&["origin_ca_file"], m.to_string()),
        })?;
        Ok(config)
    }
}

/// `abuse:` through [`crate::abuse::AbuseConfig::validate`] (the registry's own rules),
/// with its first error pointed at the line of the key it names.
fn validate_abuse(cx: &Ctx<'_>, a: &RawAbuse) -> Result<crate::abuse::AbusePolicy, ConfigError> {
    let defaults = crate::abuse::AbuseConfig::default();
    let whole = |key: &str, v: &Option<V>, default: u64| -> Result<u64, ConfigError> {
        let Some(v) = v else { return Ok(default) };
        v.text
            .trim()
            .parse::<u64>()
            .map_err(|_| cx.fail(key, v, format!("must be a whole number (got {:?})", v.text)))
    };
    let dur = |key: &str, v: &Option<V>, default: Duration| match v {
        Some(v) => duration(cx, key, v),
        None => Ok(default),
    };
    let count = |key: &str, v: &Option<V>, default: usize| {
        whole(key, v, default as u64).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    };
    let strikes = whole("abuse.strikes", &a.strikes, u64::from(defaults.strikes))?;
    let config = crate::abuse::AbuseConfig {
        strikes: u32::try_from(strikes).unwrap_or(u32::MAX),
        window: dur("abuse.window", &a.window, defaults.window)?,
        cooldown: dur("abuse.cooldown", &a.cooldown, defaults.cooldown)?,
        max_cooldown: dur("abuse.max_cooldown", &a.max_cooldown, defaults.max_cooldown)?,
        allow: a.allow.iter().map(|v| v.text.clone()).collect(),
        ban_paths: a.ban_paths.iter().map(|v| v.text.clone()).collect(),
        max_tracked: count("abuse.max_tracked", &a.max_tracked, defaults.max_tracked)?,
        max_bans: count("abuse.max_bans", &a.max_bans, defaults.max_bans)?,
    };
    config.validate().map_err(|errors| {
        let e = &errors[0];
        let list_item = |prefix: &str, list: &[V]| {
            e.key
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| list.get(i).cloned())
        };
        let at = match e.key.as_str() {
            "abuse.strikes" => a.strikes.clone(),
            "abuse.window" => a.window.clone(),
            "abuse.cooldown" => a.cooldown.clone(),
            "abuse.max_cooldown" => a.max_cooldown.clone(),
            "abuse.max_tracked" => a.max_tracked.clone(),
            "abuse.max_bans" => a.max_bans.clone(),
            _ => list_item("abuse.allow[", &a.allow)
                .or_else(|| list_item("abuse.ban_paths[", &a.ban_paths)),
        };
        match at {
            Some(v) => cx.fail(&e.key, &v, e.message.clone()),
            None => {
                let path: Vec<&str> = e.key.split('.').collect();
                cx.fail_key(&path, e.message.clone())
            }
        }
    })
}

fn validate_room(cx: &Ctx<'_>, r: &RawRoom) -> Result<RoomConfig, ConfigError> {
    let name = r.name.text.clone();
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid_name {
        return Err(cx.fail(
            &format!("rooms.{name}"),
            &r.name,
            format!("invalid room name {name:?}: use 1 to 64 letters, digits, `_` or `-`"),
        ));
    }
    let k = |field: &str| format!("rooms.{name}.{field}");

    let match_host = match &r.match_host {
        None => None,
        Some(v) => {
            let text = v.text.trim();
            if text.is_empty() {
                None
            } else {
                if text.contains("://") || text.contains('/') {
                    return Err(cx.fail(
                        &k("match_host"),
                        v,
                        format!(
                            "must be a host name like shop.example.com, not a URL (got {text:?})"
                        ),
                    ));
                }
                let host = normalize_host(text);
                if host.is_empty()
                    || !host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
                {
                    return Err(cx.fail(
                        &k("match_host"),
                        v,
                        format!("is not a valid host name (got {text:?})"),
                    ));
                }
                Some(host)
            }
        }
    };

    let origin = match &r.origin {
        Some(v) => parse_origin(&v.text).map_err(|m| cx.fail(&k("origin"), v, m))?,
        None => {
            return Err(cx.fail(
                &k("origin"),
                &r.name,
                "required: the URL of the site behind this room, e.g. http://127.0.0.1:3000",
            ));
        }
    };

    let rate = {
        let v = or_default(&r.rate, "50");
        match v.text.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => x,
            _ => {
                return Err(cx.fail(
                    &k("rate"),
                    &v,
                    format!("must be a number greater than 0 (got {})", v.text.trim()),
                ));
            }
        }
    };
    let max_active = {
        let v = or_default(&r.max_active, "500");
        match v.text.trim().parse::<u64>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(cx.fail(
                    &k("max_active"),
                    &v,
                    format!(
                        "must be a whole number of at least 1 (got {})",
                        v.text.trim()
                    ),
                ));
            }
        }
    };
    let session_ttl = at_least_1s(cx, &k("session_ttl"), &or_default(&r.session_ttl, "5m"))?;
    let abandon_after = at_least_1s(
        cx,
        &k("abandon_after"),
        &or_default(&r.abandon_after, "60s"),
    )?;
    let join_limit_per_ip = {
        let v = or_default(&r.join_limit_per_ip, "120");
        v.text.trim().parse::<u32>().map_err(|_| {
            cx.fail(
                &k("join_limit_per_ip"),
                &v,
                format!(
                    "must be a whole number, 0 to disable (got {})",
                    v.text.trim()
                ),
            )
        })?
    };
    let join_limit_window = at_least_1s(
        cx,
        &k("join_limit_window"),
        &or_default(&r.join_limit_window, "1m"),
    )?;
    let share = |key: &str, v: &Option<V>, default: u32| {
        let v = or_default(v, &default.to_string());
        v.text.trim().parse::<u32>().map_err(|_| {
            cx.fail(
                &k(key),
                &v,
                format!(
                    "must be a whole number, 0 for no cap (got {})",
                    v.text.trim()
                ),
            )
        })
    };
    let max_sessions_per_client = share(
        "max_sessions_per_client",
        &r.max_sessions_per_client,
        RoomPolicy::DEFAULT_MAX_SESSIONS_PER_CLIENT,
    )?;
    let max_places_per_client = share(
        "max_places_per_client",
        &r.max_places_per_client,
        RoomPolicy::DEFAULT_MAX_PLACES_PER_CLIENT,
    )?;
    let session_clients = share(
        "session_clients",
        &r.session_clients,
        RoomPolicy::DEFAULT_SESSION_CLIENTS,
    )?;
    let title = or_default(&r.title, "You're in line").text;
    let message = or_default(&r.message, "").text;
    let preserve_host = boolean(
        cx,
        &k("preserve_host"),
        &or_default(&r.preserve_host, "false"),
    )?;
    let lottery = boolean(cx, &k("lottery"), &or_default(&r.lottery, "false"))?;
    let queue_status_code = {
        let v = or_default(&r.queue_status_code, "200");
        match v.text.trim().parse::<u16>() {
            Ok(c @ (200 | 202 | 429 | 503)) => c,
            _ => {
                return Err(cx.fail(
                    &k("queue_status_code"),
                    &v,
                    format!("must be 200, 202, 429 or 503 (got {})", v.text.trim()),
                ));
            }
        }
    };

    let globs = |field: &str, list: &[V]| -> Result<Vec<String>, ConfigError> {
        let mut out = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let text = v.text.trim();
            crate::glob::Glob::parse(text).map_err(|e| {
                cx.fail(
                    &k(&format!("{field}[{i}]")),
                    v,
                    format!("is not a valid path glob ({text:?}): {e}"),
                )
            })?;
            out.push(text.to_owned());
        }
        Ok(out)
    };
    let bypass_paths = globs("bypass_paths", &r.bypass_paths)?;
    let asset_paths = globs("asset_paths", &r.asset_paths)?;
    let count = |field: &str, v: &Option<V>| -> Result<u64, ConfigError> {
        let v = or_default(v, "0");
        v.text.trim().parse::<u64>().map_err(|_| {
            cx.fail(
                &k(field),
                &v,
                format!(
                    "must be a whole number, 0 for no limit (got {})",
                    v.text.trim()
                ),
            )
        })
    };
    let stream_cap = count("stream_cap", &r.stream_cap)?;
    let max_inflight = count("max_inflight", &r.max_inflight)?;
    let max_waiting = count("max_waiting", &r.max_waiting)?;
    let inflight_wait = duration(cx, &k("inflight_wait"), &or_default(&r.inflight_wait, "5s"))?;

    let time = |field: &str, v: &Option<V>| -> Result<Option<(SystemTime, V)>, ConfigError> {
        match v {
            None => Ok(None),
            Some(v) if v.text.trim().is_empty() => Ok(None),
            Some(v) => match parse_rfc3339(&v.text) {
                Some(t) => Ok(Some((t, v.clone()))),
                None => Err(cx.fail(
                    &k(&format!("schedule.{field}")),
                    v,
                    format!(
                        "must be an RFC 3339 time like 2025-06-01T10:00:00Z or \
                         2025-06-01T12:00:00+02:00 (got {:?})",
                        v.text
                    ),
                )),
            },
        }
    };
    let schedule = r.schedule.as_ref();
    let opens = time(
        "queue_opens_at",
        &schedule.and_then(|s| s.queue_opens_at.clone()),
    )?;
    let admits = time("admits_at", &schedule.and_then(|s| s.admits_at.clone()))?;
    let closes = time("closes_at", &schedule.and_then(|s| s.closes_at.clone()))?;
    if let (Some((o, _)), Some((a, av))) = (&opens, &admits)
        && a < o
    {
        return Err(cx.fail(
            &k("schedule.admits_at"),
            av,
            "must not be before schedule.queue_opens_at",
        ));
    }
    if let Some((c, cv)) = &closes {
        for (name, t) in [("admits_at", &admits), ("queue_opens_at", &opens)] {
            if let Some((t, _)) = t
                && c <= t
            {
                return Err(cx.fail(
                    &k("schedule.closes_at"),
                    cv,
                    format!("must be after schedule.{name}"),
                ));
            }
        }
    }

    let adaptive = match &r.adaptive {
        None => None,
        Some(a) => Some(validate_adaptive(cx, &name, a, rate)?),
    };

    Ok(RoomConfig {
        name,
        match_host,
        origin,
        rate,
        max_active,
        session_ttl,
        abandon_after,
        join_limit_per_ip,
        join_limit_window,
        max_sessions_per_client,
        max_places_per_client,
        session_clients,
        title,
        message,
        preserve_host,
        lottery,
        queue_status_code,
        bypass_paths,
        asset_paths,
        stream_cap,
        max_inflight,
        inflight_wait,
        max_waiting,
        schedule: Schedule {
            queue_opens_at: opens.map(|(t, _)| t),
            admits_at: admits.map(|(t, _)| t),
            closes_at: closes.map(|(t, _)| t),
        },
        adaptive,
    })
}

/// `rooms.<name>.adaptive` through [`crate::fairness::adaptive::AdaptiveConfig::validate`]
/// (the controller's own rules), each error pointed at its key's line.
fn validate_adaptive(
    cx: &Ctx<'_>,
    room: &str,
    a: &RawAdaptive,
    rate: f64,
) -> Result<crate::fairness::adaptive::AdaptiveConfig, ConfigError> {
    let k = |field: &str| format!("rooms.{room}.adaptive.{field}");
    let Some(target) = &a.target_latency else {
        return Err(cx.fail_key(
            &["rooms", room, "adaptive"],
            "target_latency is required: the origin's p95 time to response headers above \
             which the rate is lowered, e.g. `adaptive: {target_latency: 800ms}`",
        ));
    };
    let target_latency = humantime::parse_duration(target.text.trim()).map_err(|_| {
        cx.fail(
            &k("target_latency"),
            target,
            format!(
                "must be a duration like 800ms or 1.5s (got {:?})",
                target.text.trim()
            ),
        )
    })?;
    let number = |field: &str, v: &Option<V>, default: f64| -> Result<f64, ConfigError> {
        let Some(v) = v else { return Ok(default) };
        v.text.trim().parse::<f64>().map_err(|_| {
            cx.fail(
                &k(field),
                v,
                format!("must be a number (got {:?})", v.text.trim()),
            )
        })
    };
    let config = crate::fairness::adaptive::AdaptiveConfig {
        target_latency,
        max_error_ratio: number("max_error_ratio", &a.max_error_ratio, 0.05)?,
        min_rate: number("min_rate", &a.min_rate, 1.0)?,
    };
    config.validate(rate).map_err(|e| {
        let at = match e.field {
            "target_latency" => Some(target),
            "max_error_ratio" => a.max_error_ratio.as_ref(),
            _ => a.min_rate.as_ref(),
        };
        match at {
            Some(v) => cx.fail(&k(e.field), v, e.reason),
            None => cx.fail_key(
                &["rooms", room, "adaptive"],
                format!("{}: {}", e.field, e.reason),
            ),
        }
    })?;
    Ok(config)
}

pub use crate::clock::MAX_DURATION;

/// Longest `server.drain_delay` accepted.
/// More serving threads than this is a typo, not a machine.
const MAX_WORKERS: usize = 1024;
const MAX_DRAIN_DELAY: Duration = Duration::from_secs(300);

fn duration(cx: &Ctx<'_>, key: &str, v: &V) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(v.text.trim()).map_err(|e| {
        cx.fail(
            key,
            v,
            format!(
                "invalid duration {:?} ({e}); write it like 250ms, 60s or 5m",
                v.text
            ),
        )
    })?;
    if d > MAX_DURATION {
        return Err(cx.fail(
            key,
            v,
            format!("must be at most 365 days (got {})", v.text.trim()),
        ));
    }
    Ok(d)
}

/// A whole number of at least `min`.
fn count(cx: &Ctx<'_>, key: &str, v: &V, min: usize) -> Result<usize, ConfigError> {
    match v.text.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(cx.fail(
            key,
            v,
            format!("must be a whole number of at least {min} (got {})", v.text),
        )),
    }
}

fn positive_duration(cx: &Ctx<'_>, key: &str, v: &V) -> Result<Duration, ConfigError> {
    let d = duration(cx, key, v)?;
    if d.is_zero() {
        return Err(cx.fail(key, v, "must be longer than 0"));
    }
    Ok(d)
}

fn at_least_1s(cx: &Ctx<'_>, key: &str, v: &V) -> Result<Duration, ConfigError> {
    let d = duration(cx, key, v)?;
    if d < Duration::from_secs(1) {
        return Err(cx.fail(
            key,
            v,
            format!("must be at least 1s (got {})", v.text.trim()),
        ));
    }
    Ok(d)
}

/// An operator's page file: read now (so a missing or bad file stops the start, naming the
/// key) and checked by `check`. Empty means none.
fn page_file(
    cx: &Ctx<'_>,
    key: &str,
    v: &Option<V>,
    check: impl Fn(&str) -> Result<(), Invalid>,
) -> Result<Option<PageFile>, ConfigError> {
    const MAX_BYTES: u64 = 256 * 1024;
    let Some(v) = v.as_ref().filter(|v| !v.text.trim().is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(v.text.trim());
    let too_big = std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_BYTES);
    if too_big {
        return Err(cx.fail(key, v, format!("{} is larger than 256 KiB", path.display())));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| cx.fail(key, v, format!("cannot read {}: {e}", path.display())))?;
    check(&text).map_err(|m| cx.fail(key, v, m))?;
    Ok(Some(PageFile { path, text }))
}

fn boolean(cx: &Ctx<'_>, key: &str, v: &V) -> Result<bool, ConfigError> {
    match v.text.trim() {
        "true" | "True" | "TRUE" | "1" | "yes" | "on" => Ok(true),
        "false" | "False" | "FALSE" | "0" | "no" | "off" => Ok(false),
        other => Err(cx.fail(key, v, format!("must be true or false (got {other:?})"))),
    }
}

/// `:8080`, `8080`, `127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`.
pub fn parse_listen(text: &str) -> Result<SocketAddr, Invalid> {
    let t = text.trim();
    let bad = || {
        Invalid(format!(
            "must be an address like :8080, 127.0.0.1:8080 or [::1]:8080 (got {t:?})"
        ))
    };
    if let Some(port) = t.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(port) = t.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = t.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Some(port) = t.strip_prefix("[::]:") {
        let port: u16 = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    }
    Err(bad())
}

/// A CIDR, or a bare address meaning /32 or /128.
/// The rules every bearer token shares (`admin_token`, `metrics_token`): long enough not
/// to be guessed, and nothing an `Authorization` header cannot carry.
fn bearer_token(cx: &Ctx<'_>, key: &str, v: &V) -> Result<(), ConfigError> {
    let n = v.text.chars().count();
    if n < 16 {
        return Err(cx.fail(key, v, format!("must be at least 16 characters (got {n})")));
    }
    if v.text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(cx.fail(
            key,
            v,
            "must not contain spaces or control characters (it is sent in an Authorization \
             header)",
        ));
    }
    Ok(())
}

fn parse_net(text: &str) -> Result<ipnet::IpNet, Invalid> {
    let t = text.trim();
    if let Ok(net) = t.parse::<ipnet::IpNet>() {
        return Ok(net.trunc());
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok(ipnet::IpNet::from(ip));
    }
    Err(Invalid(format!(
        "must be a CIDR like 10.0.0.0/8 or an IP address (got {t:?})"
    )))
}

fn parse_origin(text: &str) -> Result<http::Uri, Invalid> {
    let t = text.trim();
    let uri: http::Uri = t.parse().map_err(|e| {
        Invalid(format!(
            "is not a valid URL ({e}); expected e.g. http://127.0.0.1:3000 (got {t:?})"
        ))
    })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(Invalid(format!(
                "must be an http:// or https:// URL, not {other}:// (got {t:?})"
            )));
        }
        None => {
            return Err(Invalid(format!(
                "must be an absolute URL like http://127.0.0.1:3000 (got {t:?})"
            )));
        }
    }
    match uri.authority() {
        Some(a) if !a.host().is_empty() => {
            if a.as_str().contains('@') {
                return Err(Invalid(format!("must not contain credentials (got {t:?})")));
            }
        }
        _ => return Err(Invalid(format!("must include a host (got {t:?})"))),
    }
    if uri.query().is_some() {
        return Err(Invalid(format!("must not have a query string (got {t:?})")));
    }
    Ok(uri)
}

/// A CA file key (`redis.ca_file`, `origin_ca_file`): read and checked now, so a bad path
/// or PEM is a config error naming the key, never a failure at the first connection.
fn ca_file(
    cx: &Ctx<'_>,
    key: &str,
    v: &Option<V>,
) -> Result<Option<crate::tls::CaFile>, ConfigError> {
    let Some(v) = v.as_ref().filter(|v| !v.text.trim().is_empty()) else {
        return Ok(None);
    };
    crate::tls::CaFile::read(std::path::Path::new(v.text.trim()))
        .map(Some)
        .map_err(|m| cx.fail(key, v, m.to_string()))
}

fn validate_redis_url(url: &str) -> Result<(), Invalid> {
    if url.is_empty() {
        return Ok(());
    }
    for node in url.split(',').map(str::trim) {
        let rest = node
            .strip_prefix("redis://")
            .or_else(|| node.strip_prefix("rediss://"))
            .ok_or_else(|| {
                Invalid(format!(
                    "must start with redis:// or rediss:// (got {:?}); leave empty for the \
                     embedded store",
                    super::describe::redact_url(node)
                ))
            })?;
        let authority = rest.split('/').next().unwrap_or("");
        let host = authority.rsplit('@').next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            return Err(Invalid(format!(
                "must include a host, e.g. redis://localhost:6379 (got {:?})",
                super::describe::redact_url(node)
            )));
        }
    }
    Ok(())
}

/// RFC 3339 (`2025-06-01T10:00:00Z`, `2025-06-01T12:00:00.5+02:00`) to `SystemTime`.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let s = text.trim();
    let b = s.as_bytes();
    if b.len() < 20 || !s.is_ascii() {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = &s[from..to];
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let year = num(0, 4)?;
    let month = num(5, 7)?;
    let day = num(8, 10)?;
    let hour = num(11, 13)?;
    let min = num(14, 16)?;
    let sec = num(17, 19)?;
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos: u32 = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let digits = r.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let frac = &r[..digits.min(9)];
        nanos = format!("{frac:0<9}").parse().ok()?;
        rest = &r[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || rb[3] != b':' {
                return None;
            }
            let sign = match rb[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh: i64 = rest[1..3].parse().ok()?;
            let om: i64 = rest[4..6].parse().ok()?;
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec.min(59) - offset;
    if secs >= 0 {
        Some(UNIX_EPOCH + Duration::new(secs as u64, nanos))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))
            .map(|t| t + Duration::from_nanos(nanos.into()))
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
