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
//!
//! A room's [`RoomPhase`] is what an operator (and an alert) needs to know of it at a
//! glance, derived from the mode, the schedule, the pause and the line, in that order of
//! precedence.

use serde::{Deserialize, Serialize};

use super::{Phase, RoomStats};

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

/// Where a room stands, as its stats, its tile and `anteroom_room_phase` show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RoomPhase {
    /// Queue mode, nobody waiting: newcomers go straight in while the limits allow.
    Idle,
    /// Before the schedule's `queue_opens_at`: nobody is queued yet.
    PreQueue,
    /// Between `queue_opens_at` and `admits_at`: visitors are collected, nobody admitted.
    Draw,
    /// Queue mode with a line that moves at the rate and `max_active`.
    Queueing,
    /// Paused by the operator: the line holds still.
    Paused,
    /// The passthrough mode: everybody straight in.
    Passthrough,
    /// The sold-out mode: newcomers and the line get the sold-out page.
    SoldOut,
    /// After the schedule's `closes_at`: nobody else is admitted.
    Closed,
}

impl RoomPhase {
    /// Every phase, in the order the metric lists them.
    pub const ALL: [RoomPhase; 8] = [
        RoomPhase::Idle,
        RoomPhase::PreQueue,
        RoomPhase::Draw,
        RoomPhase::Queueing,
        RoomPhase::Paused,
        RoomPhase::Passthrough,
        RoomPhase::SoldOut,
        RoomPhase::Closed,
    ];

    /// The phase's name as the API and the metric's `phase` label spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RoomPhase::Idle => "idle",
            RoomPhase::PreQueue => "pre_queue",
            RoomPhase::Draw => "draw",
            RoomPhase::Queueing => "queueing",
            RoomPhase::Paused => "paused",
            RoomPhase::Passthrough => "passthrough",
            RoomPhase::SoldOut => "sold_out",
            RoomPhase::Closed => "closed",
        }
    }

    /// The phase of a room with these counters: sold out first (it holds whatever the
    /// schedule), then the schedule (closed, before the line opens, the draw; the mode
    /// applies once the doors are open), then passthrough, the pause, and whether
    /// anybody waits.
    pub fn of(stats: &RoomStats) -> RoomPhase {
        let settings = &stats.settings;
        match (settings.mode, stats.schedule) {
            (Mode::SoldOut, _) => RoomPhase::SoldOut,
            (_, Phase::Closed) => RoomPhase::Closed,
            (_, Phase::BeforeOpen) => RoomPhase::PreQueue,
            (_, Phase::Draw) => RoomPhase::Draw,
            (Mode::Passthrough, Phase::Queueing) => RoomPhase::Passthrough,
            (Mode::Queue, Phase::Queueing) if settings.paused => RoomPhase::Paused,
            (Mode::Queue, Phase::Queueing) if stats.waiting == 0 => RoomPhase::Idle,
            (Mode::Queue, Phase::Queueing) => RoomPhase::Queueing,
        }
    }
}

impl RoomStats {
    /// The room's [`RoomPhase`].
    pub fn phase(&self) -> RoomPhase {
        RoomPhase::of(self)
    }
}

#[cfg(test)]
mod tests {
    use super::{Mode, RoomPhase};
    use crate::queue::{Phase, RoomStats, conformance::settings};

    fn stats(mode: Mode, schedule: Phase, paused: bool, waiting: u64) -> RoomStats {
        let mut settings = settings(10.0, 10);
        settings.mode = mode;
        settings.paused = paused;
        RoomStats {
            waiting,
            active: 0,
            total_joined: 0,
            total_admitted: 0,
            total_expired: 0,
            total_abandoned: 0,
            total_refused: 0,
            total_passed_through: 0,
            schedule,
            settings,
            ended_sessions: Default::default(),
        }
    }

    #[test]
    fn the_phase_follows_mode_schedule_pause_and_line_in_that_order() {
        use Mode::*;
        use Phase::*;
        let cases = [
            (SoldOut, Draw, true, 5, RoomPhase::SoldOut),
            (Queue, Closed, false, 5, RoomPhase::Closed),
            (Passthrough, BeforeOpen, false, 0, RoomPhase::PreQueue),
            (Passthrough, Draw, false, 5, RoomPhase::Draw),
            (Queue, Draw, true, 5, RoomPhase::Draw),
            (Passthrough, Queueing, true, 5, RoomPhase::Passthrough),
            (Queue, Queueing, true, 0, RoomPhase::Paused),
            (Queue, Queueing, false, 0, RoomPhase::Idle),
            (Queue, Queueing, false, 3, RoomPhase::Queueing),
        ];
        for (mode, schedule, paused, waiting, phase) in cases {
            assert_eq!(
                stats(mode, schedule, paused, waiting).phase(),
                phase,
                "{mode:?} {schedule:?} paused={paused} waiting={waiting}"
            );
        }
        let names: Vec<_> = RoomPhase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(
            names,
            [
                "idle",
                "pre_queue",
                "draw",
                "queueing",
                "paused",
                "passthrough",
                "sold_out",
                "closed"
            ]
        );
    }

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
