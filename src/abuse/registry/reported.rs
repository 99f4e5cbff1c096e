//! The bound on the strike totals a Redis-backed registry remembers (`reported`): at most
//! `abuse.max_tracked` clients, and the walk that keeps it there paid once per
//! `max_tracked / 8` new clients.

use std::collections::HashMap;
use std::net::IpAddr;

/// Makes room in `reported` (client → (total, at)) for one more client within `cap`: at
/// the bound, the totals out of the `window` go, and if that leaves less than an eighth of
/// `cap` free, the least recently struck go until it does. So the walk over the map is
/// paid once per `cap / 8` new clients, not once per client, when an attack keeps more
/// clients struck than `cap`.
pub(super) fn make_room(
    reported: &mut HashMap<IpAddr, (u64, u64)>,
    cap: usize,
    now: u64,
    window: u64,
) {
    if reported.len() < cap {
        return;
    }
    reported.retain(|_, &mut (_, at)| at.saturating_add(window) > now);
    let keep = cap - cap.div_ceil(8);
    if reported.len() <= keep {
        return;
    }
    let excess = reported.len() - keep;
    let mut by_age: Vec<(u64, IpAddr)> = reported.iter().map(|(&c, &(_, at))| (at, c)).collect();
    by_age.select_nth_unstable(excess - 1);
    for (_, client) in &by_age[..excess] {
        reported.remove(client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reported_totals_stay_within_the_cap_and_forget_the_least_recent_first() {
        let mut reported = HashMap::new();
        let cap = 64;
        let window = 60_000;
        let mut walks = 0;
        for i in 0u32..1_000 {
            let before = reported.len();
            make_room(&mut reported, cap, 1_000_000 + u64::from(i), window);
            if reported.len() < before {
                walks += 1;
            }
            reported.insert(IpAddr::from(i.to_be_bytes()), (1, 1_000_000 + u64::from(i)));
            assert!(reported.len() <= cap);
        }
        // Each walk frees an eighth: one walk per eight new clients, not one per client.
        assert!(walks <= 1_000 / 8 + 1, "{walks} walks");
        // The most recent clients are the ones kept.
        assert!(reported.contains_key(&IpAddr::from(999u32.to_be_bytes())));
        let oldest_kept = reported.values().map(|&(_, at)| at).min().unwrap();
        assert!(oldest_kept >= 1_000_000 + 1_000 - cap as u64);
        // Any cap, however small, holds, and keeps the newest.
        for cap in 1..=9 {
            let mut reported = HashMap::new();
            for i in 0u32..50 {
                make_room(&mut reported, cap, 1_000 + u64::from(i), window);
                reported.insert(IpAddr::from(i.to_be_bytes()), (1, 1_000 + u64::from(i)));
                assert!(reported.len() <= cap, "cap {cap}");
            }
            assert!(reported.contains_key(&IpAddr::from(49u32.to_be_bytes())));
        }
        // Totals out of the window go first, whatever their number.
        let mut reported = HashMap::from([
            (IpAddr::from([192, 0, 2, 1]), (9, 0)),
            (IpAddr::from([192, 0, 2, 2]), (1, 100_000)),
        ]);
        make_room(&mut reported, 2, 100_000, window);
        assert_eq!(reported.len(), 1);
        assert!(reported.contains_key(&IpAddr::from([192, 0, 2, 2])));
    }
}
