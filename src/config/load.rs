//! Merging the sources into the one raw layer ([`RawFile`]): defaults < file < environment
//! < flags; then `validate.rs` turns it into a [`Config`].

use std::path::{Path, PathBuf};

use super::file::{self, RawFile, RawRoom, RawRooms};
use super::validate::{Src, V};
use super::{Config, ConfigError, Secret};

/// Values given on the command line. `None` / `false` means "not given".
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--config`: the YAML file to read.
    pub config: Option<PathBuf>,
    /// `--origin`: the origin URL, for a one-room setup without a file.
    pub origin: Option<String>,
    /// `--rate`: visitors admitted per second.
    pub rate: Option<f64>,
    /// `--max-active`: visitors on the site at once.
    pub max_active: Option<u64>,
    /// `--listen`: the public listener's address.
    pub listen: Option<String>,
    /// `--redis`: the shared store's URL.
    pub redis: Option<String>,
    /// `--data-dir`: where embedded state, bans and the audit log live.
    pub data_dir: Option<PathBuf>,
    /// `--fail-open` can only turn fail-open on.
    pub fail_open: bool,
}

/// Which secrets were made up because nothing provided them (only with `--origin` and no
/// config file). The caller prints a generated admin token so the operator can use it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Generated {
    /// The admin token was generated (and must be shown to the operator).
    pub admin_token: bool,
    /// The cookie secret was generated, so cookies do not survive a restart.
    pub cookie_secret: bool,
}

/// A loaded configuration and what was generated for it.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The validated configuration.
    pub config: Config,
    /// Which secrets were made up for it.
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
            let mut draft = file::parse(&text, &name)?;
            super::secrets::resolve_files(&mut draft, Some(&name), Some(&text))?;
            (draft, Some((text, name)))
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
    let mut draft = file::parse(text, file_name)?;
    super::secrets::resolve_files(&mut draft, Some(file_name), Some(text))?;
    draft.validate(Some(file_name), Some(text))
}

fn display_name(path: &Path) -> String {
    path.display().to_string()
}

fn origin_only_draft() -> RawFile {
    RawFile {
        rooms: RawRooms(vec![RawRoom::named(V::new(
            "main".to_string(),
            Src::Default,
        ))]),
        ..RawFile::default()
    }
}

/// Environment first, then flags on top, so a flag beats the environment.
fn apply(
    draft: &mut RawFile,
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
    set(&mut draft.redis.url, e("ANTEROOM_REDIS_URL"));
    set(&mut draft.data_dir, e("ANTEROOM_DATA_DIR"));
    set(&mut draft.fail_open, e("ANTEROOM_FAIL_OPEN"));
    super::secrets::apply_env(
        env,
        vec![
            (
                "ANTEROOM_ADMIN_TOKEN",
                "ANTEROOM_ADMIN_TOKEN_FILE",
                &mut draft.admin_token,
            ),
            (
                "ANTEROOM_ADMISSION_KEY",
                "ANTEROOM_ADMISSION_KEY_FILE",
                &mut draft.admission_key,
            ),
            (
                "ANTEROOM_COOKIE_SECRET",
                "ANTEROOM_COOKIE_SECRET_FILE",
                &mut draft.cookie_secret,
            ),
            (
                "ANTEROOM_PRIORITY_SECRET",
                "ANTEROOM_PRIORITY_SECRET_FILE",
                &mut draft.priority_secret,
            ),
            (
                "ANTEROOM_KAFKA_SASL_PASSWORD",
                "ANTEROOM_KAFKA_SASL_PASSWORD_FILE",
                &mut draft.kafka.sasl_password,
            ),
            (
                "ANTEROOM_METRICS_TOKEN",
                "ANTEROOM_METRICS_TOKEN_FILE",
                &mut draft.metrics_token,
            ),
            (
                "ANTEROOM_REDIS_PASSWORD",
                "ANTEROOM_REDIS_PASSWORD_FILE",
                &mut draft.redis.password,
            ),
        ],
    )?;
    set(&mut draft.redis.username, e("ANTEROOM_REDIS_USERNAME"));
    set(&mut draft.pid_file, e("ANTEROOM_PID_FILE"));
    set(&mut draft.admin_listen, e("ANTEROOM_ADMIN_LISTEN"));
    set(&mut draft.access_log, e("ANTEROOM_ACCESS_LOG"));

    let flag = |name: &'static str, v: Option<String>| v.map(|v| V::new(v, Src::Flag(name)));
    set(&mut draft.listen, flag("--listen", ov.listen.clone()));
    set(&mut draft.redis.url, flag("--redis", ov.redis.clone()));
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
        && draft.rooms.0.len() != 1
    {
        let names: Vec<&str> = draft.rooms.0.iter().map(|r| r.name.text.as_str()).collect();
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
    if let Some(room) = draft.rooms.0.first_mut() {
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
