//! Merging the sources: defaults < file < environment < flags.

use std::path::{Path, PathBuf};

use super::file::{self, RawFile, S};
use super::validate::{Draft, DraftRoom, Src, V};
use super::{Config, ConfigError, Secret};

/// Values given on the command line. `None` / `false` means "not given".
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub origin: Option<String>,
    pub rate: Option<f64>,
    pub max_active: Option<u64>,
    pub listen: Option<String>,
    pub redis: Option<String>,
    pub data_dir: Option<PathBuf>,
    /// `--fail-open` can only turn fail-open on.
    pub fail_open: bool,
}

/// Which secrets were made up because nothing provided them (only with `--origin` and no
/// config file). The caller prints a generated admin token so the operator can use it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Generated {
    pub admin_token: bool,
    pub cookie_secret: bool,
}

/// A loaded configuration and what was generated for it.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub config: Config,
    pub generated: Generated,
}

/// Load and validate the configuration from flags, the environment (`env` looks a variable
/// up; pass `&|k| std::env::var(k).ok()` in production) and the config file named by
/// `--config` or `ANTEROOM_CONFIG`.
pub fn load(
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, ConfigError> {
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    let config_path = overrides
        .config
        .clone()
        .or_else(|| env("ANTEROOM_CONFIG").map(PathBuf::from));
    let (mut draft, file) = match &config_path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            let name = display_name(path);
            (draft_from_file(&text, &name)?, Some((text, name)))
        }
        None => {
            let has_origin = overrides.origin.is_some() || env("ANTEROOM_ORIGIN").is_some();
            if !has_origin {
                return Err(ConfigError::NoOrigin);
            }
            (origin_only_draft(), None)
        }
    };
    apply(&mut draft, overrides, &env)?;

    let mut generated = Generated::default();
    if file.is_none() {
        if draft.admin_token.is_none() {
            draft.admin_token = Some(V::new(
                Secret::generate_hex(16).as_str().to_string(),
                Src::Generated,
            ));
            generated.admin_token = true;
        }
        if draft.cookie_secret.is_none() {
            draft.cookie_secret = Some(V::new(
                Secret::generate_hex(32).as_str().to_string(),
                Src::Generated,
            ));
            generated.cookie_secret = true;
        }
    }
    let config = match &file {
        Some((text, name)) => draft.validate(Some(name), Some(text))?,
        None => draft.validate(None, None)?,
    };
    Ok(Loaded { config, generated })
}

/// Parse and validate YAML text alone: no environment, no flags, nothing generated.
/// `file_name` is used in error messages.
pub fn from_yaml_str(text: &str, file_name: &str) -> Result<Config, ConfigError> {
    draft_from_file(text, file_name)?.validate(Some(file_name), Some(text))
}

fn display_name(path: &Path) -> String {
    path.display().to_string()
}

fn origin_only_draft() -> Draft {
    Draft {
        rooms: vec![DraftRoom::named(V::new("main".to_string(), Src::Default))],
        ..Draft::default()
    }
}

fn fv(s: Option<S>) -> Option<V> {
    s.map(|s| V::new(s.value, Src::File(s.referenced.line())))
}

fn fvs(list: Option<Vec<S>>) -> Vec<V> {
    list.unwrap_or_default()
        .into_iter()
        .map(|s| V::new(s.value, Src::File(s.referenced.line())))
        .collect()
}

fn draft_from_file(text: &str, name: &str) -> Result<Draft, ConfigError> {
    let raw: RawFile = file::parse(text, name)?;
    let redis = raw.redis.unwrap_or_default();
    let kafka = raw.kafka.unwrap_or_default();
    let server = raw.server.unwrap_or_default();
    let rooms = raw
        .rooms
        .unwrap_or_default()
        .0
        .into_iter()
        .map(|(name, r)| {
            let schedule = r.schedule.unwrap_or_default();
            DraftRoom {
                name: V::new(name.value, Src::File(name.referenced.line())),
                match_host: fv(r.match_host),
                origin: fv(r.origin),
                rate: fv(r.rate),
                max_active: fv(r.max_active),
                session_ttl: fv(r.session_ttl),
                abandon_after: fv(r.abandon_after),
                join_limit_per_ip: fv(r.join_limit_per_ip),
                join_limit_window: fv(r.join_limit_window),
                title: fv(r.title),
                message: fv(r.message),
                preserve_host: fv(r.preserve_host),
                lottery: fv(r.lottery),
                queue_status_code: fv(r.queue_status_code),
                queue_opens_at: fv(schedule.queue_opens_at),
                admits_at: fv(schedule.admits_at),
                closes_at: fv(schedule.closes_at),
            }
        })
        .collect();
    Ok(Draft {
        listen: fv(raw.listen),
        admit_interval: fv(raw.admit_interval),
        cookie_secret: fv(raw.cookie_secret),
        previous_cookie_secrets: fvs(raw.previous_cookie_secrets),
        admin_token: fv(raw.admin_token),
        secure_cookies: fv(raw.secure_cookies),
        trusted_proxies: fvs(raw.trusted_proxies),
        data_dir: fv(raw.data_dir),
        waiting_template: fv(raw.waiting_template),
        waiting_stylesheet: fv(raw.waiting_stylesheet),
        fail_open: fv(raw.fail_open),
        fail_open_after: fv(raw.fail_open_after),
        redis_url: fv(redis.url),
        kafka_brokers: fvs(kafka.brokers),
        kafka_topic: fv(kafka.topic),
        header_read_timeout: fv(server.header_read_timeout),
        idle_timeout: fv(server.idle_timeout),
        origin_connect_timeout: fv(server.origin_connect_timeout),
        origin_timeout: fv(server.origin_timeout),
        max_connections: fv(server.max_connections),
        shutdown_grace: fv(server.shutdown_grace),
        rooms,
    })
}

/// Environment first, then flags on top, so a flag beats the environment.
fn apply(
    draft: &mut Draft,
    ov: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let e = |name: &'static str| env(name).map(|v| V::new(v, Src::Env(name)));
    let set = |slot: &mut Option<V>, v: Option<V>| {
        if let Some(v) = v {
            *slot = Some(v);
        }
    };

    // Global settings.
    set(&mut draft.listen, e("ANTEROOM_LISTEN"));
    set(&mut draft.redis_url, e("ANTEROOM_REDIS_URL"));
    set(&mut draft.data_dir, e("ANTEROOM_DATA_DIR"));
    set(&mut draft.fail_open, e("ANTEROOM_FAIL_OPEN"));
    set(&mut draft.admin_token, e("ANTEROOM_ADMIN_TOKEN"));
    set(&mut draft.cookie_secret, e("ANTEROOM_COOKIE_SECRET"));

    let flag = |name: &'static str, v: Option<String>| v.map(|v| V::new(v, Src::Flag(name)));
    set(&mut draft.listen, flag("--listen", ov.listen.clone()));
    set(&mut draft.redis_url, flag("--redis", ov.redis.clone()));
    set(
        &mut draft.data_dir,
        flag(
            "--data-dir",
            ov.data_dir.as_ref().map(|p| p.display().to_string()),
        ),
    );
    if ov.fail_open {
        draft.fail_open = Some(V::new("true".to_string(), Src::Flag("--fail-open")));
    }

    // Room settings: only meaningful when there is exactly one room.
    let room_values: [(Option<V>, Option<V>); 3] = [
        (e("ANTEROOM_ORIGIN"), flag("--origin", ov.origin.clone())),
        (
            e("ANTEROOM_RATE"),
            flag("--rate", ov.rate.map(|r| r.to_string())),
        ),
        (
            e("ANTEROOM_MAX_ACTIVE"),
            flag("--max-active", ov.max_active.map(|m| m.to_string())),
        ),
    ];
    let any = room_values
        .iter()
        .flat_map(|(a, b)| [a, b])
        .find_map(|v| v.as_ref());
    if let Some(v) = any
        && draft.rooms.len() != 1
    {
        let names: Vec<&str> = draft.rooms.iter().map(|r| r.name.text.as_str()).collect();
        let what = match &v.src {
            Src::Env(n) | Src::Flag(n) => *n,
            _ => "override",
        };
        return Err(ConfigError::Invalid {
            file: None,
            line: None,
            key: what.to_string(),
            message: if names.is_empty() {
                "the config file defines no rooms to apply it to".to_string()
            } else {
                format!(
                    "applies to a single room, but the config file defines {} rooms ({}); \
                     set it per room in the file instead",
                    names.len(),
                    names.join(", ")
                )
            },
        });
    }
    if let Some(room) = draft.rooms.first_mut() {
        let [(eo, fo), (er, fr), (em, fm)] = room_values;
        set(&mut room.origin, eo);
        set(&mut room.origin, fo);
        set(&mut room.rate, er);
        set(&mut room.rate, fr);
        set(&mut room.max_active, em);
        set(&mut room.max_active, fm);
    }
    Ok(())
}
