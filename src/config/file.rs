//! The YAML file as written: every scalar kept as text with its line, so validation can
//! parse it and point at it. Unknown keys are rejected here.
//!
//! The config has exactly one raw layer, [`RawFile`] (a room: [`RawRoom`]): the file fills
//! it, the environment and flags override fields of it, and `validate.rs` turns it into the
//! final [`super::Config`]. A new room setting is a field of [`RawRoom`], a field of
//! [`super::RoomConfig`], and the lines in `validate_room` that check it.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::ConfigError;
use super::validate::{Src, V};

pub(super) type S = Spanned<String>;

/// The whole file: the one raw layer. The file fills it, the environment and flags
/// override fields of it (`load.rs`), and `validate.rs` turns it into a [`super::Config`].
/// An absent or empty (`null`) section or list is the same as an empty one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub listen: Option<V>,
    pub admit_interval: Option<V>,
    pub cookie_secret: Option<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub previous_cookie_secrets: Vec<V>,
    pub admin_token: Option<V>,
    pub admission_key: Option<V>,
    pub priority_secret: Option<V>,
    pub cookie_secret_file: Option<V>,
    pub admin_token_file: Option<V>,
    pub admission_key_file: Option<V>,
    pub priority_secret_file: Option<V>,
    pub metrics_token_file: Option<V>,
    pub pid_file: Option<V>,
    /// `admin_tokens:`: the named admin API tokens.
    #[serde(default, deserialize_with = "null_is_empty")]
    pub admin_tokens: Vec<RawToken>,
    pub secure_cookies: Option<V>,
    pub public_scheme: Option<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub trusted_proxies: Vec<V>,
    pub data_dir: Option<V>,
    pub waiting_template: Option<V>,
    pub waiting_stylesheet: Option<V>,
    pub fail_open: Option<V>,
    pub fail_open_after: Option<V>,
    pub origin_ca_file: Option<V>,
    pub admin_listen: Option<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub admin_allow: Vec<V>,
    pub metrics_token: Option<V>,
    pub access_log: Option<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub redis: RawRedis,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub kafka: RawKafka,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub server: RawServer,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub abuse: RawAbuse,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub rooms: RawRooms,
}

/// A section or list that may be written but left empty (`key:` with nothing after it).
fn null_is_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedis {
    pub url: Option<V>,
    pub ca_file: Option<V>,
    pub username: Option<V>,
    pub password: Option<V>,
    pub password_file: Option<V>,
}

/// One of `admin_tokens`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToken {
    pub name: Option<V>,
    pub token: Option<V>,
    pub token_file: Option<V>,
    pub role: Option<V>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKafka {
    #[serde(default, deserialize_with = "null_is_empty")]
    pub brokers: Vec<V>,
    pub topic: Option<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub properties: std::collections::BTreeMap<String, V>,
    /// `sasl.password`, from `kafka.sasl_password_file` or the environment
    /// (`ANTEROOM_KAFKA_SASL_PASSWORD`, `ANTEROOM_KAFKA_SASL_PASSWORD_FILE`).
    #[serde(skip)]
    pub sasl_password: Option<V>,
    pub sasl_password_file: Option<V>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub header_read_timeout: Option<V>,
    pub idle_timeout: Option<V>,
    pub origin_connect_timeout: Option<V>,
    pub origin_timeout: Option<V>,
    pub max_connections: Option<V>,
    pub max_connections_per_client: Option<V>,
    pub max_streams: Option<V>,
    pub max_streams_per_client: Option<V>,
    pub http2_max_streams: Option<V>,
    pub max_header_bytes: Option<V>,
    pub workers: Option<V>,
    pub body_timeout: Option<V>,
    pub shutdown_grace: Option<V>,
    pub drain_delay: Option<V>,
}

/// `abuse:`, each scalar with its line; `sections.rs` hands it to
/// [`crate::abuse::AbuseConfig::validate`] and points its errors at these lines.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAbuse {
    pub strikes: Option<V>,
    pub window: Option<V>,
    pub cooldown: Option<V>,
    pub max_cooldown: Option<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub allow: Vec<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub ban_paths: Vec<V>,
    pub max_tracked: Option<V>,
    pub max_bans: Option<V>,
}

/// One room: the single raw layer between the file (plus overrides) and `RoomConfig`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoom {
    /// The room's key under `rooms:`, with its line (not a field of the YAML body).
    #[serde(skip)]
    pub name: V,
    pub match_host: Option<V>,
    pub origin: Option<V>,
    pub rate: Option<V>,
    pub max_active: Option<V>,
    pub session_ttl: Option<V>,
    pub abandon_after: Option<V>,
    pub join_limit_per_ip: Option<V>,
    pub join_limit_window: Option<V>,
    pub max_sessions_per_client: Option<V>,
    pub max_places_per_client: Option<V>,
    pub session_clients: Option<V>,
    pub title: Option<V>,
    pub message: Option<V>,
    pub preserve_host: Option<V>,
    pub lottery: Option<V>,
    pub mode: Option<V>,
    pub queue_status_code: Option<V>,
    pub schedule: Option<RawSchedule>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub bypass_paths: Vec<V>,
    #[serde(default, deserialize_with = "null_is_empty")]
    pub asset_paths: Vec<V>,
    pub stream_cap: Option<V>,
    pub max_inflight: Option<V>,
    pub inflight_wait: Option<V>,
    pub max_waiting: Option<V>,
    /// `adaptive:` (closed-loop admission); absent or empty: off.
    pub adaptive: Option<RawAdaptive>,
    /// `challenge:` (the proof of work at the door); absent: off.
    pub challenge: Option<RawChallenge>,
    pub shadow_after: Option<V>,
}

/// `rooms.<name>.challenge`, each scalar with its line.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChallenge {
    pub mode: Option<V>,
    pub difficulty: Option<V>,
    pub no_js_wait: Option<V>,
}

/// `rooms.<name>.adaptive`, each scalar with its line; `sections.rs` hands it to
/// [`crate::fairness::adaptive::AdaptiveConfig::validate`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdaptive {
    pub target_latency: Option<V>,
    pub max_error_ratio: Option<V>,
    pub min_rate: Option<V>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSchedule {
    pub queue_opens_at: Option<V>,
    pub admits_at: Option<V>,
    pub closes_at: Option<V>,
}

impl RawRoom {
    /// A room with nothing set but its name.
    pub fn named(name: V) -> RawRoom {
        RawRoom {
            name,
            ..RawRoom::default()
        }
    }
}

/// A scalar of the file: its text and its line.
impl<'de> Deserialize<'de> for V {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = S::deserialize(d)?;
        Ok(V::new(s.value, Src::File(s.referenced.line())))
    }
}

/// `rooms:` in file order (a map would lose it). A null room body is an empty room.
#[derive(Debug, Default)]
pub(super) struct RawRooms(pub Vec<RawRoom>);

impl<'de> Deserialize<'de> for RawRooms {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Rooms;
        impl<'de> serde::de::Visitor<'de> for Rooms {
            type Value = RawRooms;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping from room name to room settings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawRooms, A::Error> {
                let mut rooms = Vec::new();
                while let Some(name) = map.next_key::<V>()? {
                    let room: Option<RawRoom> = map.next_value()?;
                    rooms.push(RawRoom {
                        name,
                        ..room.unwrap_or_default()
                    });
                }
                Ok(RawRooms(rooms))
            }
        }
        d.deserialize_map(Rooms)
    }
}

/// Parse the file text. Errors carry the file name, the line, and the dotted key found by
/// scanning the text around the reported position.
pub(super) fn parse(text: &str, file_name: &str) -> Result<RawFile, ConfigError> {
    if text.trim().is_empty() {
        return Ok(RawFile::default());
    }
    match serde_saphyr::from_str::<Option<RawFile>>(text) {
        Ok(raw) => Ok(raw.unwrap_or_default()),
        Err(err) => Err(convert_error(text, file_name, &err)),
    }
}

fn convert_error(text: &str, file_name: &str, err: &serde_saphyr::Error) -> ConfigError {
    let loc = err.location().filter(|l| l.line() > 0);
    let mut message = err.without_snippet().to_string();
    // The position is reported separately, as `file:line:`.
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    let line = loc.map(|l| l.line());
    let key = loc.and_then(|l| key_path_at(text, l.line() as usize, l.column() as usize));
    let message = tidy_message(&message);
    match key {
        Some(key) => ConfigError::Invalid {
            file: Some(file_name.to_string()),
            line,
            key,
            message,
        },
        None => ConfigError::Syntax {
            file: file_name.to_string(),
            line,
            message,
        },
    }
}

/// Reword serde's messages for config users.
fn tidy_message(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((_name, expected)) = rest.split_once('`')
    {
        let expected = expected.trim_start_matches(',').trim();
        let expected = expected
            .strip_prefix("expected one of ")
            .or_else(|| expected.strip_prefix("expected "))
            .unwrap_or(expected);
        return format!("unknown key (valid keys here: {expected})");
    }
    if message == "expected string scalar" {
        return "expected a single value here, not a list or mapping".to_string();
    }
    message.to_string()
}

/// The dotted key path of the node at 1-based `line`/`column` in block-style YAML: the key on
/// that line (or the flow-mapping key just before `column`), prefixed by its parents found by
/// walking up to lines with less indentation. Good enough for the shape of our config file.
pub(super) fn key_path_at(text: &str, line: usize, column: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let idx = line.checked_sub(1)?;
    let here = *lines.get(idx)?;
    let (indent, key) = match line_key(here) {
        Some(found) => found,
        None => {
            // A sequence item or continuation: belongs to the nearest key above it.
            let indent = indentation(here);
            let (parents, _) = parents_of(&lines, idx, indent + 1);
            return if parents.is_empty() {
                None
            } else {
                Some(parents.join("."))
            };
        }
    };
    let mut path = parents_of(&lines, idx, indent).0;
    path.push(key.to_string());
    // Inside a flow mapping on this line, e.g. `schedule: {a: 1, b: 2}`.
    let col = column.saturating_sub(1);
    if let Some(open) = here.find('{')
        && col > open
    {
        // Up to the end of the word at the column.
        let word = here
            .chars()
            .skip(col)
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .count();
        let upto: String = here.chars().take(col + word.max(1)).collect();
        let mut last = None;
        for part in upto[open + 1..].split(',') {
            let part = part.trim_start();
            let end = part
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(part.len());
            if end > 0 {
                last = Some(part[..end].to_string());
            }
        }
        if let Some(last) = last {
            path.push(last);
        }
    }
    Some(path.join("."))
}

/// Keys of the ancestors of line `idx` whose indentation is below `indent`.
fn parents_of(lines: &[&str], idx: usize, mut indent: usize) -> (Vec<String>, usize) {
    let mut parents = Vec::new();
    for l in lines[..idx].iter().rev() {
        if indent == 0 {
            break;
        }
        if let Some((ind, key)) = line_key(l)
            && ind < indent
        {
            parents.push(key.to_string());
            indent = ind;
        }
    }
    parents.reverse();
    (parents, indent)
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// `(indent, key)` when the line is a block mapping entry `key: …` (optionally a `- key:`
/// sequence item). Comments and blank lines are not.
pub(super) fn line_key(line: &str) -> Option<(usize, &str)> {
    let indent = indentation(line);
    let mut rest = &line[indent..];
    let mut indent = indent;
    if let Some(r) = rest.strip_prefix("- ") {
        indent += 2;
        rest = r.trim_start();
    }
    if rest.starts_with('#') {
        return None;
    }
    let (key, quoted) = if let Some(r) = rest.strip_prefix('"') {
        (r.split_once('"')?.0, true)
    } else if let Some(r) = rest.strip_prefix('\'') {
        (r.split_once('\'')?.0, true)
    } else {
        let colon = rest.find(':')?;
        (&rest[..colon], false)
    };
    let after = &rest[key.len() + if quoted { 2 } else { 0 }..];
    let after = after.trim_start();
    let after = after.strip_prefix(':')?;
    if !(after.is_empty() || after.starts_with(' ') || after.starts_with('\t')) {
        return None;
    }
    let key = key.trim_end();
    if key.is_empty() || key.contains(' ') && !quoted {
        return None;
    }
    Some((indent, key))
}

/// The 1-based line of the key at dotted `path` (e.g. `["rooms", "main"]`), found by
/// descending through indentation. Used for keys that have no value of their own to point
/// at (a missing or empty section).
pub(super) fn line_of_key(text: &str, path: &[&str]) -> Option<u64> {
    let lines: Vec<&str> = text.lines().collect();
    let mut start = 0;
    let mut min_indent: Option<usize> = None; // children must be indented more than this
    let mut found = None;
    for want in path {
        let mut hit = None;
        let mut child_indent: Option<usize> = None;
        for (i, l) in lines.iter().enumerate().skip(start) {
            let Some((ind, key)) = line_key(l) else {
                continue;
            };
            if let Some(min) = min_indent
                && ind <= min
            {
                break; // left the parent mapping
            }
            let child = *child_indent.get_or_insert(ind);
            if ind == child && key == *want {
                hit = Some((i, ind));
                break;
            }
        }
        let (i, ind) = hit?;
        found = Some(i as u64 + 1);
        start = i + 1;
        min_indent = Some(ind);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "listen: \":8080\"\nrooms:\n  main:\n    rate: 5\n    schedule: {a: 1, b: 2}\n  other:\n    # comment: here\n    rate: 7\nkafka:\n  brokers:\n    - a\n    - b\n";

    #[test]
    fn key_path_scan() {
        assert_eq!(key_path_at(DOC, 1, 1).as_deref(), Some("listen"));
        assert_eq!(key_path_at(DOC, 4, 5).as_deref(), Some("rooms.main.rate"));
        assert_eq!(
            key_path_at(DOC, 5, 22).as_deref(),
            Some("rooms.main.schedule.b")
        );
        assert_eq!(
            key_path_at(DOC, 5, 16).as_deref(),
            Some("rooms.main.schedule.a")
        );
        assert_eq!(key_path_at(DOC, 8, 5).as_deref(), Some("rooms.other.rate"));
        assert_eq!(key_path_at(DOC, 12, 7).as_deref(), Some("kafka.brokers"));
    }

    #[test]
    fn key_line_scan() {
        assert_eq!(line_of_key(DOC, &["rooms"]), Some(2));
        assert_eq!(line_of_key(DOC, &["rooms", "other"]), Some(6));
        assert_eq!(line_of_key(DOC, &["rooms", "other", "rate"]), Some(8));
        assert_eq!(line_of_key(DOC, &["rooms", "main", "rate"]), Some(4));
        assert_eq!(line_of_key(DOC, &["rooms", "rate"]), None);
        assert_eq!(line_of_key(DOC, &["kafka", "brokers"]), Some(10));
    }
}
