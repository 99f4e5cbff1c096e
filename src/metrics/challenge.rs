//! The proof of work at the door and the shadow line, as they happen on this replica:
//! challenges issued, solved and refused (by reason), replays, the pages' solve times,
//! and shadowed requests. Each series is per room; a sum over replicas is the room's.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::admission::RoomLabel;

/// A refused challenge's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailedLabels {
    room: String,
    /// `expired`, `replayed`, `wrong_client`, `wrong_room`, `bad_signature`,
    /// `insufficient_work`, `malformed` or `cross_site`.
    reason: &'static str,
}

type SolveHistogram = Family<RoomLabel, Histogram, fn() -> Histogram>;

/// The longest solve time a page may report, in milliseconds; longer reports are clamped
/// (a tab left in the background, or a made-up number).
pub const MAX_SOLVE_MS: u64 = 600_000;

fn solve_histogram() -> Histogram {
    // 10 ms to about 164 s.
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

/// The door's counters and the solve-time histogram.
#[derive(Clone)]
pub struct ChallengeMetrics {
    issued: Family<RoomLabel, Counter>,
    solved: Family<RoomLabel, Counter>,
    failed: Family<FailedLabels, Counter>,
    replayed: Family<RoomLabel, Counter>,
    solve_seconds: SolveHistogram,
    shadowed: Family<RoomLabel, Counter>,
}

impl ChallengeMetrics {
    /// The series, registered in `registry`.
    pub(super) fn register(registry: &mut Registry) -> ChallengeMetrics {
        let m = ChallengeMetrics {
            issued: Family::default(),
            solved: Family::default(),
            failed: Family::default(),
            replayed: Family::default(),
            solve_seconds: Family::new_with_constructor(solve_histogram),
            shadowed: Family::default(),
        };
        registry.register(
            "anteroom_challenges_issued",
            "Proof-of-work challenges handed to newcomers (pages, JSON, time-lock pages), by room",
            m.issued.clone(),
        );
        registry.register(
            "anteroom_challenges_solved",
            "Challenges accepted (a solution or the no-JavaScript time lock) whose newcomer then joined, by room",
            m.solved.clone(),
        );
        registry.register(
            "anteroom_challenges_failed",
            "Challenge answers refused, by room and reason (replayed ones included)",
            m.failed.clone(),
        );
        registry.register(
            "anteroom_challenges_replayed",
            "Challenge answers refused because their challenge was already spent, on any replica, by room",
            m.replayed.clone(),
        );
        registry.register(
            "anteroom_challenge_solve_seconds",
            "Solve times the waiting pages reported with their accepted solutions, by room",
            m.solve_seconds.clone(),
        );
        registry.register(
            "anteroom_shadowed",
            "Requests answered from the shadow line (a client at shadow_after strikes), by room",
            m.shadowed.clone(),
        );
        m
    }

    /// The door's series of `room`, for a caller that keeps them: counting through them
    /// then costs no label lookup. Every series exists (at 0) from then on.
    pub fn room(&self, room: &str) -> DoorSeries {
        let room = label(room);
        DoorSeries {
            issued: self.issued.get_or_create(&room).clone(),
            shadowed: self.shadowed.get_or_create(&room).clone(),
            solved: self.solved.get_or_create(&room).clone(),
            seconds: self.solve_seconds.get_or_create(&room).clone(),
        }
    }

    /// A refused answer in `room` for `reason` (`replayed` also counts as a replay).
    pub fn failed(&self, room: &str, reason: &'static str) {
        self.failed
            .get_or_create(&FailedLabels {
                room: room.to_owned(),
                reason,
            })
            .inc();
        if reason == "replayed" {
            self.replayed.get_or_create(&label(room)).inc();
        }
    }
}

/// One room's door series (from [`ChallengeMetrics::room`]).
#[derive(Clone, Debug)]
pub struct DoorSeries {
    issued: Counter,
    shadowed: Counter,
    solved: Counter,
    seconds: Histogram,
}

impl DoorSeries {
    /// A challenge handed out.
    pub fn issued(&self) {
        self.issued.inc();
    }

    /// A request answered from the shadow line.
    pub fn shadowed(&self) {
        self.shadowed.inc();
    }

    /// An accepted answer, with the solve time the page reported (if any).
    pub fn solved(&self, solve_ms: Option<u64>) {
        self.solved.inc();
        if let Some(ms) = solve_ms {
            self.seconds.observe(ms.min(MAX_SOLVE_MS) as f64 / 1000.0);
        }
    }
}

fn label(room: &str) -> RoomLabel {
    RoomLabel {
        room: room.to_owned(),
    }
}
