//! A room's `challenge:` settings as the request path reads them: when the door asks for
//! the proof of work, how much harder than the base, and how long the no-JavaScript time
//! lock holds. The config module parses the file into these; this module owns their
//! meaning and their bounds.

use std::time::Duration;

use super::{DEFAULT_BITS, MAX_BITS, TTL};

/// When a room's door asks newcomers for the proof of work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChallengeMode {
    /// Never: newcomers join at once (the default).
    #[default]
    Off,
    /// Only while somebody waits in the line or the lottery draw is open, as this
    /// replica's cached statistics last saw it: a quiet room costs nobody anything.
    UnderLoad,
    /// Every newcomer.
    Always,
}

impl ChallengeMode {
    /// Every mode, in the order the config's error message lists them.
    pub const ALL: [ChallengeMode; 3] = [
        ChallengeMode::Off,
        ChallengeMode::UnderLoad,
        ChallengeMode::Always,
    ];

    /// The mode's name in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeMode::Off => "off",
            ChallengeMode::UnderLoad => "under_load",
            ChallengeMode::Always => "always",
        }
    }

    /// The mode named `text` (as the config file writes it).
    pub fn parse(text: &str) -> Option<ChallengeMode> {
        ChallengeMode::ALL.into_iter().find(|m| m.as_str() == text)
    }
}

/// The most extra bits a room may ask on top of [`DEFAULT_BITS`]: beyond it a challenge
/// would ask more than [`MAX_BITS`] before any strike.
pub const MAX_DIFFICULTY: u8 = MAX_BITS - DEFAULT_BITS;

/// The shortest `no_js_wait`: a time lock of no time would make the proof of work free
/// for anyone who skips the script.
pub const MIN_NO_JS_WAIT: Duration = Duration::from_secs(1);

/// The longest `no_js_wait`: the lock must open well before the challenge expires
/// ([`TTL`]), leaving a minute to follow the refresh.
pub const MAX_NO_JS_WAIT: Duration = Duration::from_secs(TTL.as_secs() - 60);

/// A room's `challenge:` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChallengeConfig {
    /// When the door asks for the work.
    pub mode: ChallengeMode,
    /// Extra bits on top of [`DEFAULT_BITS`] (each doubles the expected work), at most
    /// [`MAX_DIFFICULTY`].
    pub difficulty: u8,
    /// How long a visitor without JavaScript waits instead of doing the work, between
    /// [`MIN_NO_JS_WAIT`] and [`MAX_NO_JS_WAIT`].
    pub no_js_wait: Duration,
}

impl Default for ChallengeConfig {
    fn default() -> Self {
        ChallengeConfig {
            mode: ChallengeMode::Off,
            difficulty: 0,
            no_js_wait: Duration::from_secs(20),
        }
    }
}

impl ChallengeConfig {
    /// The no-JavaScript wait for a client with `strikes`: doubled per strike (as the work
    /// is), capped at [`MAX_NO_JS_WAIT`].
    pub fn no_js_wait_for(&self, strikes: u32) -> Duration {
        let factor = 1u32.checked_shl(strikes.min(16)).unwrap_or(u32::MAX);
        self.no_js_wait.saturating_mul(factor).min(MAX_NO_JS_WAIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_their_names() {
        for mode in ChallengeMode::ALL {
            assert_eq!(ChallengeMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(ChallengeMode::parse("on"), None);
        assert_eq!(ChallengeMode::default(), ChallengeMode::Off);
    }

    #[test]
    fn the_no_js_wait_doubles_per_strike_up_to_the_cap() {
        let c = ChallengeConfig {
            no_js_wait: Duration::from_secs(20),
            ..ChallengeConfig::default()
        };
        assert_eq!(c.no_js_wait_for(0), Duration::from_secs(20));
        assert_eq!(c.no_js_wait_for(1), Duration::from_secs(40));
        assert_eq!(c.no_js_wait_for(3), Duration::from_secs(160));
        assert_eq!(c.no_js_wait_for(4), MAX_NO_JS_WAIT);
        assert_eq!(c.no_js_wait_for(u32::MAX), MAX_NO_JS_WAIT);
        assert!(MAX_NO_JS_WAIT < TTL);
    }
}
