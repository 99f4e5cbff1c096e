//! A room's mode: how its site door behaves while the room runs, switched live by the
//! operator and kept in the store beside the other runtime settings.
//!
//! - [`Mode::Queue`]: the ordinary waiting room (admission by rate and `max_active`).
//! - [`Mode::Passthrough`]: everybody is let through at once, the line included: waiting
//!   visitors go on at their next poll or stream tick and newcomers never wait. The limits
//!   do not apply; every visitor let through this way is counted.
//! - [`Mode::SoldOut`]: newcomers and everyone waiting get the sold-out page; visitors
//!   already on the site keep their sessions.
//!
//! Pause is its own switch ([`super::RoomSettings::paused`]) and holds the line in the
//! queue mode; the other modes decide before the line is consulted.

use serde::{Deserialize, Serialize};

/// How a room's site door behaves; see the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The waiting room as usual.
    #[default]
    Queue,
    /// Everybody straight through, counted.
    Passthrough,
    /// Newcomers and the line get the sold-out page; sessions on the site carry on.
    SoldOut,
}

impl Mode {
    /// Every mode, in the order the API and the docs list them.
    pub const ALL: [Mode; 3] = [Mode::Queue, Mode::Passthrough, Mode::SoldOut];

    /// The mode's name as the file, the API and the store spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Queue => "queue",
            Mode::Passthrough => "passthrough",
            Mode::SoldOut => "sold_out",
        }
    }

    /// The mode named `name` (exactly as [`Mode::as_str`] spells it).
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// The names of every mode, for an error message: `queue, passthrough, sold_out`.
    pub fn names() -> String {
        Mode::ALL.map(Mode::as_str).join(", ")
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(Mode::parse("SOLD_OUT"), None);
        assert_eq!(Mode::parse(""), None);
        assert_eq!(Mode::names(), "queue, passthrough, sold_out");
        assert_eq!(Mode::default(), Mode::Queue);
    }
}
