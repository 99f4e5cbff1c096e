//! The gate's room table: every room with its origin and settings, and the host table that
//! routes a request to one. A reload of the config file swaps the whole table at once
//! ([`App::set_rooms`]), so a request routes by one table and pays one atomic load for it.
//!
//! The table only grows: a room removed by a reload leaves the host table and the list of
//! configured rooms but keeps its index, and a room added (or one whose origin changed,
//! which is the old one removed and a new one added under the same name) takes the next
//! index. So an index taken from any table (a request's room, an access-log line, a
//! visitor remembered for a ban) names the same room in every later one, and requests
//! already inside a removed room finish there. What stays of a removed room is its
//! `Room` (a few hundred bytes) until the process ends; rooms are added by hand, so
//! this never grows without an operator.
//!
//! Since no room is ever dropped while the process runs, each is allocated for good
//! (`&'static Room`): a request copies its room's reference out of the table and lets the
//! table go at once, so the request path pays the table's one load and never a reference
//! count, however long the request waits on the origin.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::live::LiveRoom;
use super::{App, Room, draw};
use crate::config::RoomConfig;
use crate::metrics::Metrics;
use crate::proxy::Origin;

use super::build::BadOrigin;

/// The rooms a request can be routed to, and every room this process has served.
pub struct RoomTable {
    /// Every room, by index; never shrinks (see the module doc).
    rooms: Vec<&'static Room>,
    /// The configured rooms' indices, in the file's order.
    open: Vec<usize>,
    /// Lower-cased host (no port) → index into `rooms`.
    hosts: HashMap<String, usize>,
    /// The room without `match_host`, if one is configured.
    catch_all: Option<usize>,
}

impl Room {
    /// The room `file` describes, its in-flight gauge in `metrics`.
    pub(super) fn open(file: &RoomConfig, metrics: &Metrics) -> Result<Room, BadOrigin> {
        let origin = Origin::new(&file.origin).map_err(|source| BadOrigin {
            room: file.name.clone(),
            source,
        })?;
        let gauge = metrics.inflight_gauge(&file.name);
        Ok(Room {
            name: file.name.clone(),
            origin,
            streams: Arc::default(),
            live: Arc::new(ArcSwap::from_pointee(LiveRoom::new(
                file.clone(),
                gauge.clone(),
            ))),
            file: file.clone(),
            gauge,
            draw: draw::RoomDraw::default(),
            door_series: std::sync::OnceLock::new(),
        })
    }
}

impl RoomTable {
    /// The table of `files`, reusing the rooms of `previous` whose name is among them and
    /// not in `replaced`; the others are opened anew.
    pub(super) fn next(
        previous: Option<&RoomTable>,
        files: &[RoomConfig],
        replaced: &[String],
        metrics: &Metrics,
    ) -> Result<RoomTable, BadOrigin> {
        let mut rooms = previous.map(|t| t.rooms.clone()).unwrap_or_default();
        let mut open = Vec::with_capacity(files.len());
        let mut hosts = HashMap::new();
        let mut catch_all = None;
        for file in files {
            let kept = previous
                .filter(|_| !replaced.contains(&file.name))
                .and_then(|t| t.index_of(&file.name));
            let i = match kept {
                Some(i) => i,
                None => {
                    rooms.push(&*Box::leak(Box::new(Room::open(file, metrics)?)));
                    rooms.len() - 1
                }
            };
            match &file.match_host {
                Some(host) => {
                    hosts.insert(host.to_ascii_lowercase(), i);
                }
                None => catch_all = Some(i),
            }
            open.push(i);
        }
        Ok(RoomTable {
            rooms,
            open,
            hosts,
            catch_all,
        })
    }

    /// The room at index `i` (taken from this table or an earlier one).
    pub fn get(&self, i: usize) -> &'static Room {
        self.rooms[i]
    }

    /// The index of the room serving `host` (lower-cased, no port), else the catch-all's.
    pub fn route(&self, host: Option<&str>) -> Option<usize> {
        match host {
            Some(h) => self.hosts.get(h).copied().or(self.catch_all),
            None => self.catch_all,
        }
    }

    /// The index of the configured room named `name`.
    fn index_of(&self, name: &str) -> Option<usize> {
        self.open
            .iter()
            .copied()
            .find(|&i| self.rooms[i].name == name)
    }

    /// The configured room named `name`.
    pub fn room(&self, name: &str) -> Option<&'static Room> {
        self.index_of(name).map(|i| self.rooms[i])
    }

    /// The configured rooms, in the file's order.
    pub fn configured(&self) -> impl Iterator<Item = &'static Room> {
        self.open.iter().map(|&i| self.rooms[i])
    }

    /// Every room this process has served, removed ones included (their streams and
    /// sessions still need keeping or ending).
    pub fn all(&self) -> &[&'static Room] {
        &self.rooms
    }

    /// The configured rooms' names, in the file's order.
    pub fn names(&self) -> Vec<String> {
        self.configured().map(|r| r.name.clone()).collect()
    }

    /// Every room's name by index: what the access log's room index names.
    pub fn names_by_index(&self) -> Vec<String> {
        self.rooms.iter().map(|r| r.name.clone()).collect()
    }
}

impl App {
    /// The room table in force (one atomic load).
    pub fn rooms(&self) -> arc_swap::Guard<Arc<RoomTable>> {
        self.rooms.load()
    }

    /// The table that serves the rooms of `files`: rooms not in it are left out of the
    /// host table, rooms new to it (and those named in `replaced`) are opened, the others
    /// are kept as they run. Nothing changes until [`App::set_rooms`] swaps it in.
    pub fn next_rooms(
        &self,
        files: &[RoomConfig],
        replaced: &[String],
    ) -> Result<RoomTable, BadOrigin> {
        RoomTable::next(Some(&self.rooms.load()), files, replaced, &self.metrics)
    }

    /// Serves `table` from the next request on (the store's side, opening a new room, is
    /// the caller's, first). The rooms it no longer routes to lose their waiting pages'
    /// live streams and their streams to the origin at once; the requests already inside
    /// them finish.
    pub fn set_rooms(&self, table: RoomTable) {
        let names = table.names();
        let old = self.rooms.load_full();
        let gone: Vec<&Room> = (old.configured())
            .filter(|r| (table.room(&r.name)).is_none_or(|now| !std::ptr::eq(*r, now)))
            .collect();
        // A room opened now runs on the file's settings until the operator's changes kept
        // in the store are read again for it (by the next statistics refresh).
        for room in table.configured() {
            if old
                .room(&room.name)
                .is_none_or(|was| !std::ptr::eq(room, was))
            {
                self.admission.forget_changes(&room.name);
            }
        }
        self.room_index_names
            .store(Arc::new(table.names_by_index()));
        self.rooms.store(Arc::new(table));
        self.metrics.set_rooms(names.clone());
        self.admission.set_rooms(names);
        let table = self.rooms.load();
        for room in gone {
            room.streams.end_where(|_| true);
            // A room opened anew under the same name keeps its visitors' live streams.
            if table.room(&room.name).is_none() {
                self.live.close_room(&room.name);
            }
        }
    }
}
