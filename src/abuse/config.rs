//! The `abuse:` config section and its validation into an [`AbusePolicy`].

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

use crate::glob::GlobSet;

/// `abuse:` as the file writes it, with its defaults. Durations are humantime
/// strings (`1m`, `24h`) like the rest of the file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AbuseConfig {
    /// Strikes within `window` that ban a client.
    pub strikes: u32,
    /// How long a strike counts toward `strikes`.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// The first automatic ban; doubles with each repeat ban of that client.
    #[serde(deserialize_with = "duration")]
    pub cooldown: Duration,
    /// The doubling stops here.
    #[serde(deserialize_with = "duration")]
    pub max_cooldown: Duration,
    /// CIDRs (or single addresses) never struck or banned.
    pub allow: Vec<String>,
    /// Globs (see [`crate::glob`]); the first request to one bans for `cooldown`. Matched
    /// without regard to ASCII case, on the normalised path.
    pub ban_paths: Vec<String>,
    /// Clients whose strikes are remembered; the least recently struck are forgotten first.
    pub max_tracked: usize,
    /// Active bans kept at most. At the cap a new ban replaces the soonest-ending
    /// automatic or ban-path ban; operator bans are never displaced by automatic ones.
    pub max_bans: usize,
}

impl Default for AbuseConfig {
    fn default() -> Self {
        AbuseConfig {
            strikes: 20,
            window: Duration::from_secs(60),
            cooldown: Duration::from_secs(60),
            max_cooldown: Duration::from_secs(24 * 3600),
            allow: Vec::new(),
            ban_paths: Vec::new(),
            max_tracked: 100_000,
            max_bans: 100_000,
        }
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(text.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "`{text}` is not a duration like 30s, 1m or 24h: {e}"
        ))
    })
}

/// One problem in `abuse:`, naming the key (`abuse.allow[2]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct AbuseConfigError {
    /// The offending key's path, e.g. `abuse.allow[2]`.
    pub key: String,
    /// What is wrong with its value.
    pub message: String,
}

fn err(key: impl fmt::Display, message: impl Into<String>) -> AbuseConfigError {
    AbuseConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

/// A validated `abuse:` section, ready for [`super::AbuseRegistry`].
#[derive(Clone, Debug)]
pub struct AbusePolicy {
    /// Strike weight within `window` that bans a client (at least 1).
    pub strikes: u32,
    /// How long a strike counts toward `strikes`.
    pub window: Duration,
    /// The first automatic ban's length; doubles with each repeat ban of the client.
    pub cooldown: Duration,
    /// The longest an automatic ban's doubling may reach.
    pub max_cooldown: Duration,
    /// Networks never struck or banned (parsed from `abuse.allow`).
    pub allow: Vec<IpNet>,
    /// Paths whose first request bans the client for `cooldown`, lower-cased (matched
    /// against `gate::classify::normalized_path`).
    pub ban_paths: GlobSet,
    /// Clients whose strikes are remembered; the least recently struck are forgotten first.
    pub max_tracked: usize,
    /// See [`AbuseConfig::max_bans`].
    pub max_bans: usize,
}

impl Default for AbusePolicy {
    fn default() -> Self {
        AbuseConfig::default()
            .validate()
            .unwrap_or_else(|_| unreachable!("the defaults are valid"))
    }
}

impl AbusePolicy {
    /// The ban earned by a client with `earlier` automatic bans: `cooldown × 2^earlier`,
    /// capped at `max_cooldown`.
    pub fn cooldown_after(&self, earlier: u32) -> Duration {
        let base = self.cooldown.as_millis();
        // Saturate instead of shifting bits off the top (which would wrap to a short ban).
        let doubled = if earlier >= base.leading_zeros() {
            u128::MAX
        } else {
            base << earlier
        };
        let ms = doubled.min(self.max_cooldown.as_millis());
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }
}

impl AbuseConfig {
    /// Every problem at once, each naming its key.
    pub fn validate(&self) -> Result<AbusePolicy, Vec<AbuseConfigError>> {
        let mut errors = Vec::new();
        if self.strikes == 0 {
            errors.push(err("abuse.strikes", "must be at least 1"));
        }
        for (key, d) in [
            ("abuse.window", self.window),
            ("abuse.cooldown", self.cooldown),
            ("abuse.max_cooldown", self.max_cooldown),
        ] {
            if d < Duration::from_millis(1) {
                errors.push(err(key, "must be at least 1ms"));
            }
        }
        if self.cooldown > self.max_cooldown {
            errors.push(err(
                "abuse.cooldown",
                format!(
                    "{} is longer than abuse.max_cooldown ({})",
                    humantime::format_duration(self.cooldown),
                    humantime::format_duration(self.max_cooldown)
                ),
            ));
        }
        if self.max_tracked == 0 {
            errors.push(err("abuse.max_tracked", "must be at least 1"));
        }
        if self.max_bans == 0 {
            errors.push(err("abuse.max_bans", "must be at least 1"));
        }
        let mut allow = Vec::with_capacity(self.allow.len());
        for (i, text) in self.allow.iter().enumerate() {
            let t = text.trim();
            match t.parse::<IpNet>() {
                Ok(net) => allow.push(net.trunc()),
                Err(_) => match t.parse::<IpAddr>() {
                    Ok(ip) => allow.push(IpNet::from(ip.to_canonical())),
                    Err(_) => errors.push(err(
                        format_args!("abuse.allow[{i}]"),
                        format!("`{text}` is not a CIDR range (like 10.0.0.0/8) or an address"),
                    )),
                },
            }
        }
        // Matched against the lower-cased path (`gate::classify::normalized_path`).
        let lowered: Vec<String> = self
            .ban_paths
            .iter()
            .map(|p| p.to_ascii_lowercase())
            .collect();
        let ban_paths = match GlobSet::new(&lowered) {
            Ok(set) => set,
            Err(e) => {
                errors.push(err(
                    format_args!("abuse.ban_paths[{}]", e.index),
                    format!("`{}`: {}", e.pattern, e.error),
                ));
                GlobSet::default()
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(AbusePolicy {
            strikes: self.strikes,
            window: self.window,
            cooldown: self.cooldown,
            max_cooldown: self.max_cooldown,
            allow,
            ban_paths,
            max_tracked: self.max_tracked,
            max_bans: self.max_bans,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<AbuseConfig, serde_saphyr::Error> {
        serde_saphyr::from_str::<AbuseConfig>(yaml)
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = parse("{}").unwrap();
        assert_eq!(c, AbuseConfig::default());
        assert_eq!(c.strikes, 20);
        assert_eq!(c.window, Duration::from_secs(60));
        assert_eq!(c.cooldown, Duration::from_secs(60));
        assert_eq!(c.max_cooldown, Duration::from_secs(86_400));
        assert!(c.allow.is_empty() && c.ban_paths.is_empty());
        assert_eq!(c.max_tracked, 100_000);
        assert_eq!(c.max_bans, 100_000);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn every_key_parses() {
        let c = parse(
            "strikes: 4\nwindow: 30s\ncooldown: 2m\nmax_cooldown: 1h\n\
             allow: [10.0.0.0/8, '2001:db8::/32', 192.0.2.7]\n\
             ban_paths: ['/.env', '/.git/**', '*.php']\nmax_tracked: 7\nmax_bans: 9\n",
        )
        .unwrap();
        let p = c.validate().unwrap();
        assert_eq!(p.strikes, 4);
        assert_eq!(p.window, Duration::from_secs(30));
        assert_eq!(p.cooldown, Duration::from_secs(120));
        assert_eq!(p.max_cooldown, Duration::from_secs(3600));
        assert_eq!(p.allow.len(), 3);
        assert_eq!(p.allow[2].to_string(), "192.0.2.7/32");
        assert!(p.ban_paths.is_match("/.git/config"));
        assert_eq!(p.max_tracked, 7);
        assert_eq!(p.max_bans, 9);
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_refused() {
        assert!(
            parse("strike: 3")
                .unwrap_err()
                .to_string()
                .contains("strike")
        );
        assert!(
            parse("window: soon")
                .unwrap_err()
                .to_string()
                .contains("soon")
        );
    }

    #[test]
    fn validation_names_the_key() {
        let c = AbuseConfig {
            strikes: 0,
            cooldown: Duration::from_secs(7200),
            max_cooldown: Duration::from_secs(3600),
            allow: vec!["10.0.0.0/8".into(), "nonsense".into()],
            ban_paths: vec!["/ok".into(), "/a//b".into()],
            max_tracked: 0,
            max_bans: 0,
            ..AbuseConfig::default()
        };
        let errors = c.validate().unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "abuse.strikes",
                "abuse.cooldown",
                "abuse.max_tracked",
                "abuse.max_bans",
                "abuse.allow[1]",
                "abuse.ban_paths[1]"
            ]
        );
        assert!(errors[4].to_string().contains("nonsense"));
        assert!(errors[5].to_string().contains("/a//b"));
        let zero = AbuseConfig {
            window: Duration::ZERO,
            ..AbuseConfig::default()
        };
        assert_eq!(zero.validate().unwrap_err()[0].key, "abuse.window");
    }

    #[test]
    fn cooldown_doubles_and_caps() {
        let p = AbuseConfig {
            cooldown: Duration::from_secs(60),
            max_cooldown: Duration::from_secs(600),
            ..AbuseConfig::default()
        }
        .validate()
        .unwrap();
        let secs: Vec<u64> = (0..6).map(|n| p.cooldown_after(n).as_secs()).collect();
        assert_eq!(secs, [60, 120, 240, 480, 600, 600]);
        assert_eq!(p.cooldown_after(u32::MAX).as_secs(), 600);
        assert_eq!(p.cooldown_after(127).as_secs(), 600);
        // A long cooldown never wraps around to a short one.
        let year = AbuseConfig {
            cooldown: Duration::from_secs(365 * 86_400),
            max_cooldown: Duration::from_secs(100 * 365 * 86_400),
            ..AbuseConfig::default()
        }
        .validate()
        .unwrap();
        for n in [0, 1, 6, 7, 60, 90, 100, 127, 128, 1_000] {
            assert!(year.cooldown_after(n) >= year.cooldown, "{n}");
        }
        assert_eq!(year.cooldown_after(100), year.max_cooldown);
    }
}
