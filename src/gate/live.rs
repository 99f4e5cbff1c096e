//! Each room's settings as they run: the file's, with the operator's changes over them
//! (kept in the store, read by admission every second and at once after a change through
//! this replica). When the changes move, the room's settings are derived again
//! ([`crate::config::live::effective`]) and swapped in whole, so the next request sees
//! them and no request ever sees half of a change; the request path pays one atomic load.
//! The changes apply over the room as the file gave it when the room was opened (at start,
//! or by the reload that added it).

use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::metrics::gauge::Gauge;

use super::classes::Inflight;
use super::classify::RoomPaths;
use crate::admission::{Applied, ChangesListener};
use crate::config::RoomConfig;
use crate::queue::RoomChanges;

/// A room's settings in force.
pub struct LiveRoom {
    /// The room's config: the file's with the operator's changes.
    pub config: RoomConfig,
    /// `bypass_paths` and `asset_paths`, parsed.
    pub paths: RoomPaths,
    /// `max_inflight` on this replica; `None`: no cap.
    pub inflight: Option<Inflight>,
}

impl LiveRoom {
    /// The settings of `config`, with a new in-flight cap counted on `gauge`.
    pub(super) fn new(config: RoomConfig, gauge: Gauge) -> LiveRoom {
        LiveRoom {
            paths: RoomPaths::of(&config),
            inflight: Inflight::of(config.max_inflight, config.inflight_wait, gauge),
            config,
        }
    }

    /// The settings of `config` following `self`: the in-flight cap is kept while its
    /// limits are the same (so are its waiters); a new one applies to requests from now
    /// on, while those already at the origin finish under the old one.
    fn next(&self, config: RoomConfig, gauge: Gauge) -> LiveRoom {
        let same_cap = self.config.max_inflight == config.max_inflight
            && self.config.inflight_wait == config.inflight_wait;
        LiveRoom {
            paths: RoomPaths::of(&config),
            inflight: if same_cap {
                self.inflight.clone()
            } else {
                Inflight::of(config.max_inflight, config.inflight_wait, gauge)
            },
            config,
        }
    }
}

/// The listener admission tells of changed settings: derives and swaps in the room's.
/// The room is looked up in the table in force, so a room a reload added is one too.
pub(super) fn listener(rooms: Arc<ArcSwap<super::RoomTable>>) -> ChangesListener {
    Arc::new(move |room: &str, changes: &RoomChanges| -> Applied {
        let table = rooms.load();
        let cell = table.room(room)?;
        let config = match crate::config::live::effective(&cell.file, changes) {
            Ok(config) => config,
            Err(e) => {
                // Never written by the admin API, which checks the same way first.
                tracing::error!(room, error = %e, "the room's live settings are invalid; the ones in force stay");
                return None;
            }
        };
        let old = cell.live.load();
        let adaptive_moved =
            format!("{:?}", old.config.adaptive) != format!("{:?}", config.adaptive);
        let adaptive = config.adaptive.clone();
        tracing::info!(room, changes = %serde_json::to_string(changes).unwrap_or_default(), "the room's live settings are in force");
        cell.live
            .store(Arc::new(old.next(config, cell.gauge.clone())));
        adaptive_moved.then_some(adaptive)
    })
}
