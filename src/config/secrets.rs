//! Secrets given by file, and the keys made of secrets: `admin_tokens` and the Redis
//! credentials.
//!
//! Every secret key may be given as `<key>_file` in the file and `ANTEROOM_<KEY>_FILE` in
//! the environment: the file's content, its trailing newline trimmed, is the value (what
//! systemd's `LoadCredential=` and Kubernetes secret volumes provide). Both forms of one
//! key in one source is an error naming the key; the environment still overrides the file
//! as for any key. The `_file` forms are resolved into the value slots before validation,
//! so a secret read from a file is validated exactly as one written inline.

use std::path::Path;

use super::file::{RawFile, RawToken};
use super::validate::{Ctx, Src, V};
use super::values::bearer_token;
use super::{AdminToken, ConfigError, Role, Secret};

/// The name `admin_token` has in the audit log and the logs; no `admin_tokens` entry may
/// take it.
pub const ADMIN_TOKEN_NAME: &str = "admin";

/// Reads a secret's file: its content without the trailing newline.
fn read_secret(cx: &Ctx<'_>, key: &str, v: &V) -> Result<String, ConfigError> {
    let path = Path::new(v.text.trim());
    let text = std::fs::read_to_string(path)
        .map_err(|e| cx.fail(key, v, format!("cannot read {}: {e}", path.display())))?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// `value` from `value_file` when that is given; both given is an error naming `key`.
fn from_file(
    cx: &Ctx<'_>,
    key: &str,
    value: &mut Option<V>,
    file: &Option<V>,
) -> Result<(), ConfigError> {
    let Some(f) = file else { return Ok(()) };
    if value.is_some() {
        return Err(cx.fail(
            &format!("{key}_file"),
            f,
            format!("give either {key} or {key}_file, not both"),
        ));
    }
    *value = Some(V::new(
        read_secret(cx, &format!("{key}_file"), f)?,
        f.src.clone(),
    ));
    Ok(())
}

/// Reads every `<key>_file` of the config file into its key's slot.
pub(super) fn resolve_files(
    draft: &mut RawFile,
    file: Option<&str>,
    text: Option<&str>,
) -> Result<(), ConfigError> {
    let cx = Ctx::new(file, text);
    from_file(
        &cx,
        "admin_token",
        &mut draft.admin_token,
        &draft.admin_token_file,
    )?;
    from_file(
        &cx,
        "cookie_secret",
        &mut draft.cookie_secret,
        &draft.cookie_secret_file,
    )?;
    from_file(
        &cx,
        "admission_key",
        &mut draft.admission_key,
        &draft.admission_key_file,
    )?;
    from_file(
        &cx,
        "priority_secret",
        &mut draft.priority_secret,
        &draft.priority_secret_file,
    )?;
    from_file(
        &cx,
        "metrics_token",
        &mut draft.metrics_token,
        &draft.metrics_token_file,
    )?;
    from_file(
        &cx,
        "redis.password",
        &mut draft.redis.password,
        &draft.redis.password_file,
    )?;
    from_file(
        &cx,
        "kafka.sasl_password",
        &mut draft.kafka.sasl_password,
        &draft.kafka.sasl_password_file,
    )?;
    for (i, token) in draft.admin_tokens.iter_mut().enumerate() {
        let RawToken {
            token, token_file, ..
        } = token;
        from_file(&cx, &format!("admin_tokens[{i}].token"), token, token_file)?;
    }
    Ok(())
}

/// The environment's secrets, `ANTEROOM_<KEY>` and `ANTEROOM_<KEY>_FILE`, over the file's:
/// `(variable, variable of its file, slot)`.
pub(super) fn apply_env(
    env: &dyn Fn(&str) -> Option<String>,
    slots: Vec<(&'static str, &'static str, &mut Option<V>)>,
) -> Result<(), ConfigError> {
    let cx = Ctx::new(None, None);
    for (name, file_name, slot) in slots {
        let value = env(name).map(|v| V::new(v, Src::Env(name)));
        let file = env(file_name).map(|v| V::new(v, Src::Env(file_name)));
        match (value, file) {
            (Some(_), Some(f)) => {
                return Err(cx.fail(
                    file_name,
                    &f,
                    format!("give either {name} or {file_name}, not both"),
                ));
            }
            (Some(v), None) => *slot = Some(v),
            (None, Some(f)) => {
                *slot = Some(V::new(read_secret(&cx, file_name, &f)?, f.src.clone()));
            }
            (None, None) => {}
        }
    }
    Ok(())
}

/// `admin_tokens`, validated: each with a name (unique, not `admin`), a token of the
/// admin token's shape that no other token shares, and a role.
pub(super) fn validate_tokens(
    cx: &Ctx<'_>,
    raw: &[RawToken],
    admin_token: &Secret,
    metrics_token: Option<&Secret>,
) -> Result<Vec<AdminToken>, ConfigError> {
    let mut tokens: Vec<AdminToken> = Vec::new();
    for (i, t) in raw.iter().enumerate() {
        let at = |field: &str| format!("admin_tokens[{i}].{field}");
        let Some(name) = &t.name else {
            return Err(cx.fail_key(&["admin_tokens"], format!("{}: required", at("name"))));
        };
        let valid_name = !name.text.is_empty()
            && name.text.len() <= 64
            && name
                .text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !valid_name {
            return Err(cx.fail(
                &at("name"),
                name,
                "must be 1 to 64 letters, digits, `_`, `-` or `.`",
            ));
        }
        if name.text == ADMIN_TOKEN_NAME {
            return Err(cx.fail(
                &at("name"),
                name,
                "`admin` is the name of admin_token; choose another",
            ));
        }
        if tokens.iter().any(|other| other.name == name.text) {
            return Err(cx.fail(&at("name"), name, "another token has this name"));
        }
        let Some(token) = &t.token else {
            return Err(cx.fail(&at("name"), name, "needs a token or a token_file"));
        };
        bearer_token(cx, &at("token"), token)?;
        let bytes = token.text.as_bytes();
        let shared = admin_token.ct_eq(bytes)
            || metrics_token.is_some_and(|m| m.ct_eq(bytes))
            || tokens.iter().any(|other| other.token.ct_eq(bytes));
        if shared {
            return Err(cx.fail(
                &at("token"),
                token,
                "must differ from every other token (admin_token, metrics_token, admin_tokens)",
            ));
        }
        let Some(role) = &t.role else {
            return Err(cx.fail(&at("name"), name, "needs a role: admin, operator or viewer"));
        };
        let role = match role.text.trim() {
            "admin" => Role::Admin,
            "operator" => Role::Operator,
            "viewer" => Role::Viewer,
            other => {
                return Err(cx.fail(
                    &at("role"),
                    role,
                    format!("must be admin, operator or viewer (got {other:?})"),
                ));
            }
        };
        tokens.push(AdminToken {
            name: name.text.clone(),
            token: Secret::from_text(token.text.clone()),
            role,
        });
    }
    Ok(tokens)
}

/// `redis.username` and `redis.password`, checked against `redis.url`.
pub(super) fn redis_credentials(
    cx: &Ctx<'_>,
    raw: &super::file::RawRedis,
    url: &str,
) -> Result<(Option<String>, Option<Secret>), ConfigError> {
    let password = raw.password.as_ref().filter(|v| !v.text.is_empty());
    let username = raw.username.as_ref().filter(|v| !v.text.trim().is_empty());
    if let (Some(u), None) = (username, password) {
        return Err(cx.fail("redis.username", u, "needs redis.password too"));
    }
    let Some(p) = password else {
        return Ok((None, None));
    };
    if url.is_empty() {
        return Err(cx.fail("redis.password", p, "is set but redis.url is empty"));
    }
    let has_userinfo = url
        .split(',')
        .filter_map(|node| node.trim().split_once("://"))
        .any(|(_, rest)| rest.split('/').next().unwrap_or_default().contains('@'));
    if has_userinfo {
        return Err(cx.fail(
            "redis.password",
            p,
            "redis.url already has credentials; give them in one place only",
        ));
    }
    Ok((
        username.map(|u| u.text.trim().to_owned()),
        Some(Secret::from_text(p.text.clone())),
    ))
}

/// `text` percent-encoded for the user-information part of a URL.
pub(super) fn userinfo_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
