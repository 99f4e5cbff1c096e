//! The waiting line's tests: a deterministic mix of operations against a plain ordered-map
//! model, the stale index entries left by passes and their sweep, joins placed by their own
//! last seen, and a drained line's memory.

use super::*;
use std::collections::BTreeMap;

fn place(visitor: VisitorId, seen_ms: u64) -> NewPlace {
    NewPlace {
        visitor,
        seen_ms,
        joined_ms: seen_ms,
        client: ClientRef::NONE,
    }
}

/// A deterministic mix of joins (both lanes), heartbeats, head pops, removals from
/// the middle and abandonment, checked against a plain model after every step.
#[test]
fn agrees_with_a_simple_model_through_many_chunks() {
    let mut line = WaitingLine::new();
    // Model: (lane, order key) → (visitor, seen). The front lane's key is negated so
    // that the model's order is the line's.
    let mut model: BTreeMap<(u8, i64), (VisitorId, u64)> = BTreeMap::new();
    let mut order = 0i64;
    let mut now = 0u64;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..60_000u64 {
        anteroom_fixtures::xorshift(&mut state);
        now += state % 3;
        match state % 16 {
            0..=6 => {
                let v = VisitorId::random();
                line.join(LaneKind::Line, place(v, now));
                order += 1;
                model.insert((1, order), (v, now));
            }
            7 => {
                let v = VisitorId::random();
                line.join(LaneKind::Front, place(v, now));
                order += 1;
                model.insert((0, -order), (v, now));
            }
            8 => {
                if let Some((&k, &(v, _))) = model.iter().next() {
                    assert_eq!(line.head().map(|h| line.get(h).visitor), Some(v));
                    model.remove(&k);
                    line.leave(v).unwrap();
                }
            }
            9 => {
                let n = (state as usize / 16) % 4;
                let want: Vec<VisitorId> = model.values().take(n).map(|&(v, _)| v).collect();
                for _ in 0..want.len() {
                    model.pop_first();
                }
                let got: Vec<VisitorId> = line.take_heads(n).iter().map(|s| s.visitor).collect();
                assert_eq!(got, want, "heads at step {step}");
            }
            10 | 11 if !model.is_empty() => {
                let i = (state as usize / 16) % model.len();
                let (&k, &(v, _)) = model.iter().nth(i).unwrap();
                model.remove(&k);
                assert_eq!(line.leave(v).unwrap().visitor, v);
            }
            12 | 13 if !model.is_empty() => {
                let i = (state as usize / 16) % model.len();
                let (_, (v, seen)) = model.iter_mut().nth(i).unwrap();
                line.touch(*v, now, 1).unwrap();
                if now > *seen {
                    *seen = now;
                }
            }
            _ => {
                // Abandon everyone not heard from in the last 200 ms.
                while let Some((h, s)) = line.oldest_seen() {
                    if s.seen_ms() + 200 > now {
                        break;
                    }
                    let v = line.remove(h).visitor;
                    let k = *model.iter().find(|(_, (x, _))| *x == v).unwrap().0;
                    model.remove(&k);
                }
                assert!(model.values().all(|&(_, seen)| seen + 200 > now));
            }
        }
        if step % 101 == 0 {
            line.check();
            let got: Vec<VisitorId> = line.in_order().map(|(_, s)| s.visitor).collect();
            let want: Vec<VisitorId> = model.values().map(|&(v, _)| v).collect();
            assert_eq!(got, want, "order at step {step}");
        }
    }
    assert!(line.lanes[0].chunks.len() <= 3, "dead chunks are dropped");
}

/// Heads taken by passes leave stale index entries; joins sweep them before the table
/// would grow, across the wrap of the handles' 31 ticket bits, and a taken visitor is
/// neither found nor in the way of their own return.
#[test]
fn taken_heads_are_swept_from_the_index_before_it_grows() {
    let mut line = WaitingLine::new();
    // Tickets cross 2^31 halfway, where the handles' low bits wrap.
    line.start_at((1 << 31) - 3 * CHUNK as u64);
    let mut waiting: VecDeque<VisitorId> = VecDeque::new();
    for _ in 0..2 * CHUNK {
        let v = VisitorId::random();
        line.join(LaneKind::Line, place(v, 0));
        waiting.push_back(v);
    }
    let size = line.index.allocation_size();
    let mut taken = Vec::new();
    let mut swept = false;
    for round in 0..60 {
        for s in line.take_heads(100) {
            assert_eq!(Some(s.visitor), waiting.pop_front());
            assert!(line.find(s.visitor).is_none(), "a taken head is not found");
            taken.push(s.visitor);
        }
        // The same number join again, one of them someone taken before.
        for i in 0..100 {
            let v = if i == 0 && round > 0 {
                taken[round * 7]
            } else {
                VisitorId::random()
            };
            line.join(LaneKind::Line, place(v, 0));
            waiting.push_back(v);
            swept |= line.stale == 0;
        }
        line.check();
        assert_eq!(
            line.index.allocation_size(),
            size,
            "stale entries never grow the table"
        );
    }
    assert!(swept, "a sweep ran");
    assert!(line.next_ticket() > 1 << 31);
    let order: Vec<VisitorId> = line.in_order().map(|(_, s)| s.visitor).collect();
    assert_eq!(order, Vec::from(waiting.clone()));
    for &v in &waiting {
        assert!(line.find(v).is_some());
    }
    // Draining leaves nothing behind.
    line.take_heads(usize::MAX);
    assert_eq!((line.index.len(), line.stale), (0, 0));
}

#[test]
fn join_all_places_each_by_their_own_last_seen() {
    let mut line = WaitingLine::new();
    for t in [10, 20, 30] {
        line.join(LaneKind::Line, place(VisitorId::random(), t));
    }
    let late = [5, 35, 25, 10, 40];
    line.join_all(
        LaneKind::Line,
        late.iter()
            .map(|&t| place(VisitorId::random(), t))
            .collect(),
    );
    line.check();
    let mut seen = Vec::new();
    let mut cursor = line.oldest;
    while let Some(h) = cursor {
        let s = line.get(h);
        seen.push(s.seen_ms());
        cursor = (s.next != h).then_some(s.next);
    }
    assert_eq!(seen, vec![5, 10, 10, 20, 25, 30, 35, 40]);
}

#[test]
fn a_drained_line_keeps_no_chunks_but_the_tail() {
    let mut line = WaitingLine::new();
    let who: Vec<VisitorId> = (0..5 * CHUNK).map(|_| VisitorId::random()).collect();
    for &v in &who {
        line.join(LaneKind::Line, place(v, 0));
    }
    // Everyone but the last leaves from the middle out: complete chunks give their
    // slots back.
    for &v in &who[..who.len() - 1] {
        line.leave(v);
    }
    line.check();
    let allocated = line.lanes[0]
        .chunks
        .iter()
        .filter(|c| c.slots.capacity() > 0)
        .count();
    assert_eq!(allocated, 1);
    assert_eq!(line.position(line.head().unwrap()), 1);
}
