//! The config sections with rules of their own: a room (its name, origin, limits,
//! schedule, classes of paths and pages), its `adaptive:` block and `abuse:`. Rules that
//! belong to another module (the controller's for `adaptive:`, the abuse registry's for
//! `abuse:`) stay there; these functions run them and point each error at its key's line.

use std::time::{Duration, SystemTime};

use super::file::{RawAbuse, RawAdaptive, RawChallenge, RawRoom};
use super::validate::{Ctx, V, or_default};
use super::values::{at_least_1s, boolean, duration, parse_origin, parse_rfc3339};
use super::{ConfigError, RoomConfig, Schedule};
use crate::identity::normalize_host;
use crate::queue::RoomPolicy;

/// `abuse:` through [`crate::abuse::AbuseConfig::validate`] (the registry's own rules),
/// with its first error pointed at the line of the key it names.
pub(super) fn validate_abuse(
    cx: &Ctx<'_>,
    a: &RawAbuse,
) -> Result<crate::abuse::AbusePolicy, ConfigError> {
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

pub(super) fn validate_room(cx: &Ctx<'_>, r: &RawRoom) -> Result<RoomConfig, ConfigError> {
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
    let title = page_text(
        cx,
        &k("title"),
        or_default(&r.title, "You're in line"),
        MAX_TITLE_CHARS,
    )?;
    let message = page_text(
        cx,
        &k("message"),
        or_default(&r.message, ""),
        MAX_MESSAGE_CHARS,
    )?;
    let preserve_host = boolean(
        cx,
        &k("preserve_host"),
        &or_default(&r.preserve_host, "false"),
    )?;
    let lottery = boolean(cx, &k("lottery"), &or_default(&r.lottery, "false"))?;
    let mode = {
        let v = or_default(&r.mode, "queue");
        crate::queue::Mode::parse(v.text.trim()).ok_or_else(|| {
            cx.fail(
                &k("mode"),
                &v,
                format!(
                    "must be one of {} (got {:?})",
                    crate::queue::Mode::names(),
                    v.text.trim()
                ),
            )
        })?
    };
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
                Ok(t) => Ok(Some((t, v.clone()))),
                Err(e) => Err(cx.fail(
                    &k(&format!("schedule.{field}")),
                    v,
                    format!("{e} (got {:?})", v.text),
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
    let challenge = match &r.challenge {
        None => crate::challenge::ChallengeConfig::default(),
        Some(c) => validate_challenge(cx, &name, c)?,
    };
    let shadow_after = {
        let v = or_default(&r.shadow_after, "0");
        v.text.trim().parse::<u32>().map_err(|_| {
            cx.fail(
                &k("shadow_after"),
                &v,
                format!(
                    "must be a whole number of strikes, 0 to turn the shadow line off (got {})",
                    v.text.trim()
                ),
            )
        })?
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
        mode,
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
        challenge,
        shadow_after,
    })
}

/// `rooms.<name>.challenge`: the mode by name, the extra difficulty within
/// [`crate::challenge::MAX_DIFFICULTY`], the no-JavaScript wait within its bounds.
pub(super) fn validate_challenge(
    cx: &Ctx<'_>,
    room: &str,
    c: &RawChallenge,
) -> Result<crate::challenge::ChallengeConfig, ConfigError> {
    use crate::challenge::{
        ChallengeConfig, ChallengeMode, MAX_DIFFICULTY, MAX_NO_JS_WAIT, MIN_NO_JS_WAIT,
    };
    let k = |field: &str| format!("rooms.{room}.challenge.{field}");
    let defaults = ChallengeConfig::default();
    let mode = match &c.mode {
        None => defaults.mode,
        Some(v) => ChallengeMode::parse(v.text.trim()).ok_or_else(|| {
            let names: Vec<&str> = ChallengeMode::ALL.iter().map(|m| m.as_str()).collect();
            cx.fail(
                &k("mode"),
                v,
                format!(
                    "must be one of {} (got {:?})",
                    names.join(", "),
                    v.text.trim()
                ),
            )
        })?,
    };
    let difficulty = match &c.difficulty {
        None => defaults.difficulty,
        Some(v) => match v.text.trim().parse::<u8>() {
            Ok(d) if d <= MAX_DIFFICULTY => d,
            _ => {
                return Err(cx.fail(
                    &k("difficulty"),
                    v,
                    format!(
                        "must be a whole number of extra bits from 0 to {MAX_DIFFICULTY} \
                         (each doubles the work; got {})",
                        v.text.trim()
                    ),
                ));
            }
        },
    };
    let no_js_wait = match &c.no_js_wait {
        None => defaults.no_js_wait,
        Some(v) => {
            let d = duration(cx, &k("no_js_wait"), v)?;
            if d < MIN_NO_JS_WAIT || d > MAX_NO_JS_WAIT {
                return Err(cx.fail(
                    &k("no_js_wait"),
                    v,
                    format!(
                        "must be from {} to {} (the challenge expires after {}; got {})",
                        humantime::format_duration(MIN_NO_JS_WAIT),
                        humantime::format_duration(MAX_NO_JS_WAIT),
                        humantime::format_duration(crate::challenge::TTL),
                        v.text.trim()
                    ),
                ));
            }
            d
        }
    };
    Ok(ChallengeConfig {
        mode,
        difficulty,
        no_js_wait,
    })
}

/// `rooms.<name>.adaptive` through [`crate::fairness::adaptive::AdaptiveConfig::validate`]
/// (the controller's own rules), each error pointed at its key's line.
pub(super) fn validate_adaptive(
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

/// The longest room `title`, in characters: a heading, on every waiting page.
pub const MAX_TITLE_CHARS: usize = 200;
/// The longest room `message`, in characters: a paragraph or two, on every waiting page
/// (which every waiting visitor reloads).
pub const MAX_MESSAGE_CHARS: usize = 2000;

/// A text every waiting page shows, at most `max` characters.
fn page_text(cx: &Ctx<'_>, key: &str, v: V, max: usize) -> Result<String, ConfigError> {
    let n = v.text.chars().count();
    if n > max {
        return Err(cx.fail(
            key,
            &v,
            format!("must be at most {max} characters (got {n})"),
        ));
    }
    Ok(v.text)
}
