//! Turning the merged text values into a [`Config`], with one error per bad value naming
//! its key and where it came from.

use crate::invalid::Invalid;
use std::path::PathBuf;
use std::time::Duration;

use super::file::{RawFile, line_of_key};
use super::sections::{validate_abuse, validate_room};
use super::values::{
    MAX_DRAIN_DELAY, MAX_HEADER_BYTES, MAX_WORKERS, MIN_HEADER_BYTES, bearer_token, boolean,
    ca_file, count, duration, page_file, parse_listen, parse_net, positive_duration,
    validate_redis_url,
};
use super::{
    Config, ConfigError, KafkaConfig, RedisConfig, RoomConfig, Secret, ServerConfig,
    WaitingPageConfig,
};

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
pub(super) struct Ctx<'a> {
    file: Option<&'a str>,
    text: Option<&'a str>,
}

impl<'a> Ctx<'a> {
    /// Errors about the file `file` (its `text` to find a key's line in), if any.
    pub(super) fn new(file: Option<&'a str>, text: Option<&'a str>) -> Ctx<'a> {
        Ctx { file, text }
    }

    pub(super) fn fail(&self, key: &str, v: &V, message: impl Into<String>) -> ConfigError {
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
    pub(super) fn fail_key(&self, path: &[&str], message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.map(str::to_string),
            line: self.text.and_then(|t| line_of_key(t, path)),
            key: path.join("."),
            message: message.into(),
        }
    }
}

pub(super) fn or_default(v: &Option<V>, default: &str) -> V {
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

        // Key of the priority grants: its UTF-8 bytes, as the site's
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

        let admin_tokens = super::secrets::validate_tokens(
            &cx,
            &d.admin_tokens,
            &admin_token,
            metrics_token.as_ref(),
        )?;
        let pid_file = d
            .pid_file
            .as_ref()
            .filter(|v| !v.text.trim().is_empty())
            .map(|v| PathBuf::from(v.text.trim()));

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
            let (username, password) = super::secrets::redis_credentials(&cx, &d.redis, &url)?;
            let redis = RedisConfig {
                url,
                ca_file,
                username,
                password,
            };
            // The very function the server connects with, so both accept the same URLs.
            if !redis.is_embedded() {
                let urls = redis.connect_urls();
                let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
                crate::queue::redis_client::build(&urls, redis.ca_file.as_ref())
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
            max_header_bytes: {
                let v = or_default(&d.server.max_header_bytes, "16384");
                let n = count(&cx, "server.max_header_bytes", &v, MIN_HEADER_BYTES)?;
                if n > MAX_HEADER_BYTES {
                    return Err(cx.fail(
                        "server.max_header_bytes",
                        &v,
                        format!("must be at most {MAX_HEADER_BYTES}"),
                    ));
                }
                n
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
            admin_tokens,
            pid_file,
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
