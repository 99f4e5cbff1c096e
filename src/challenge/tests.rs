use std::time::Duration;

use super::*;
use crate::clock::Clock;

const SECRET: &[u8] = b"a challenge secret of at least 32 bytes..";
const CLIENT: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7];
const OTHER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 8];
const TTL: Duration = Duration::from_secs(120);
const NONCE: [u8; 16] = *b"0123456789abcdef";
/// Few bits, so the tests solve in microseconds.
const BITS: u8 = 8;

fn expected(room: &str, client: [u8; 16], clock: &Clock) -> Expected<'static> {
    Expected {
        room: Box::leak(room.to_owned().into_boxed_str()),
        client,
        now_ms: clock.now_ms(),
        ttl: TTL,
    }
}

fn issued(clock: &Clock) -> Issued {
    ChallengeKey::new(SECRET).issue("main", &CLIENT, BITS, clock.now_ms(), NONCE)
}

#[tokio::test(start_paused = true)]
async fn a_solved_challenge_verifies_and_names_its_id_and_expiry() {
    let clock = Clock::starting_at(1_700_000_000_000);
    let ch = issued(&clock);
    assert_eq!(ch.bits, BITS);
    let counter = solve(&ch.nonce, ch.bits);
    let key = ChallengeKey::new(SECRET);
    let v = key
        .verify(&ch.text, counter, &expected("main", CLIENT, &clock))
        .unwrap();
    assert_eq!(v.id(), URL_SAFE_NO_PAD.encode(NONCE));
    assert_eq!(v.bits, BITS);
    assert_eq!(v.issued_at, 1_700_000_000);
    assert_eq!(v.expires_at_ms(), 1_700_000_000_000 + 120_000);
}

#[test]
fn the_text_has_seven_fields_and_no_client_address() {
    let ch = ChallengeKey::new(SECRET).issue("main", &CLIENT, 17, 1_700_000_000_500, NONCE);
    let parts: Vec<&str> = ch.text.split('.').collect();
    assert_eq!(parts.len(), 7);
    assert_eq!(&parts[..4], &["c1", "main", "1700000000", "17"]);
    assert_eq!(parts[4], URL_SAFE_NO_PAD.encode(NONCE));
    assert_eq!(parts[5].len(), 16);
    assert_eq!(parts[6].len(), 43);
    assert!(!ch.text.contains("192"));
}

#[tokio::test(start_paused = true)]
async fn too_little_work_is_refused() {
    let clock = Clock::starting_at(1_700_000_000_000);
    let ch = issued(&clock);
    let bad = (0..)
        .find(|c| !meets(&work(&ch.nonce, *c), ch.bits))
        .unwrap();
    assert_eq!(
        ChallengeKey::new(SECRET).verify(&ch.text, bad, &expected("main", CLIENT, &clock)),
        Err(ChallengeError::InsufficientWork)
    );
}

#[tokio::test(start_paused = true)]
async fn another_room_or_client_is_refused() {
    let clock = Clock::starting_at(1_700_000_000_000);
    let ch = issued(&clock);
    let c = solve(&ch.nonce, ch.bits);
    let key = ChallengeKey::new(SECRET);
    assert_eq!(
        key.verify(&ch.text, c, &expected("other", CLIENT, &clock)),
        Err(ChallengeError::WrongRoom)
    );
    assert_eq!(
        key.verify(&ch.text, c, &expected("main", OTHER, &clock)),
        Err(ChallengeError::WrongClient)
    );
}

#[tokio::test(start_paused = true)]
async fn it_expires_after_its_ttl_by_the_clock() {
    let clock = Clock::starting_at(1_700_000_000_000);
    let ch = issued(&clock);
    let c = solve(&ch.nonce, ch.bits);
    let key = ChallengeKey::new(SECRET);
    tokio::time::advance(TTL - Duration::from_millis(1)).await;
    assert!(
        key.verify(&ch.text, c, &expected("main", CLIENT, &clock))
            .is_ok()
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        key.verify(&ch.text, c, &expected("main", CLIENT, &clock)),
        Err(ChallengeError::Expired)
    );
}

#[test]
fn one_issued_beyond_the_clock_skew_is_refused() {
    let key = ChallengeKey::new(SECRET);
    let now = 1_700_000_000_000;
    let skew = crate::clock::ms(CLOCK_SKEW);
    let near = key.issue("main", &CLIENT, BITS, now + skew, NONCE);
    let far = key.issue("main", &CLIENT, BITS, now + skew + 1000, NONCE);
    let exp = Expected {
        room: "main",
        client: CLIENT,
        now_ms: now,
        ttl: TTL,
    };
    assert!(key.verify(&near.text, solve(&NONCE, BITS), &exp).is_ok());
    assert_eq!(
        key.verify(&far.text, solve(&NONCE, BITS), &exp),
        Err(ChallengeError::FromTheFuture)
    );
}

#[tokio::test(start_paused = true)]
async fn a_changed_field_or_another_secret_breaks_the_signature() {
    let clock = Clock::starting_at(1_700_000_000_000);
    let ch = issued(&clock);
    let c = solve(&ch.nonce, ch.bits);
    let exp = expected("main", CLIENT, &clock);
    let key = ChallengeKey::new(SECRET);
    // Fewer bits asked for: cheaper work, but the MAC no longer matches.
    let easier = ch.text.replacen(".8.", ".1.", 1);
    assert_eq!(
        key.verify(&easier, c, &exp),
        Err(ChallengeError::BadSignature)
    );
    // The client tag of another client, copied in.
    let theirs = key.issue("main", &OTHER, BITS, clock.now_ms(), NONCE);
    let mut parts: Vec<&str> = ch.text.split('.').collect();
    let other_parts: Vec<&str> = theirs.text.split('.').collect();
    parts[5] = other_parts[5];
    assert_eq!(
        key.verify(&parts.join("."), c, &exp),
        Err(ChallengeError::BadSignature)
    );
    assert_eq!(
        ChallengeKey::new(b"another secret, also 32 bytes long....").verify(&ch.text, c, &exp),
        Err(ChallengeError::BadSignature)
    );
}

#[test]
fn garbage_is_malformed_never_a_panic() {
    let key = ChallengeKey::new(SECRET);
    let exp = Expected {
        room: "main",
        client: CLIENT,
        now_ms: 0,
        ttl: TTL,
    };
    let good = key.issue("main", &CLIENT, BITS, 0, NONCE).text;
    let too_many_bits = good.replacen(".8.", ".33.", 1);
    let long = "c1.".to_owned() + &"a".repeat(500);
    for text in [
        "",
        "c1",
        "v1.main.0.8.a.b.c",
        "c1.main.-1.8.MDEyMzQ1Njc4OWFiY2RlZg.AAAAAAAAAAAAAAAA.x",
        "c1.main.0.8.short.AAAAAAAAAAAAAAAA.x",
        "c1..0.8.MDEyMzQ1Njc4OWFiY2RlZg.AAAAAAAAAAAAAAAA.x",
        "c1.ma in.0.8.MDEyMzQ1Njc4OWFiY2RlZg.AAAAAAAAAAAAAAAA.x",
        too_many_bits.as_str(),
        long.as_str(),
    ] {
        assert_eq!(
            key.verify(text, 0, &exp),
            Err(ChallengeError::Malformed),
            "{text}"
        );
    }
    let bad_sig = good[..good.len() - 1].to_owned();
    assert_eq!(
        key.verify(&bad_sig, 0, &exp),
        Err(ChallengeError::BadSignature)
    );
}

#[test]
fn strikes_raise_the_bits_to_a_cap() {
    assert_eq!(bits_for(0, 0), DEFAULT_BITS);
    assert_eq!(bits_for(2, 3), DEFAULT_BITS + 5);
    assert_eq!(bits_for(0, u32::MAX), MAX_BITS);
    assert_eq!(bits_for(u8::MAX, 0), MAX_BITS);
}

#[test]
fn the_work_function_is_sha256_of_nonce_and_big_endian_counter() {
    use sha2::Digest;
    let mut input = NONCE.to_vec();
    input.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
    let want: [u8; 32] = sha2::Sha256::digest(&input).into();
    assert_eq!(work(&NONCE, 0x0102_0304_0506_0708), want);
    assert_eq!(leading_zero_bits(&[0, 0b0001_0000, 0xff]), 11);
    assert_eq!(leading_zero_bits(&[0; 4]), 32);
    let c = solve(&NONCE, 12);
    assert!(leading_zero_bits(&work(&NONCE, c)) >= 12);
    assert!((0..c).all(|x| leading_zero_bits(&work(&NONCE, x)) < 12));
}

#[test]
fn the_key_never_prints_its_secret() {
    assert_eq!(
        format!("{:?}", ChallengeKey::new(SECRET)),
        "ChallengeKey(..)"
    );
}

#[tokio::test(start_paused = true)]
async fn the_time_lock_opens_after_the_wait_and_checks_all_but_the_work() {
    let clock = Clock::starting_at(1_700_000_000_000);
    let ch = issued(&clock);
    let key = ChallengeKey::new(SECRET);
    let wait = Duration::from_secs(20);
    let left = key
        .verify_waited(&ch.text, wait, &expected("main", CLIENT, &clock))
        .unwrap()
        .unwrap_err();
    assert_eq!(left, wait);
    tokio::time::advance(Duration::from_secs(19)).await;
    let left = key
        .verify_waited(&ch.text, wait, &expected("main", CLIENT, &clock))
        .unwrap()
        .unwrap_err();
    assert_eq!(left, Duration::from_secs(1));
    tokio::time::advance(Duration::from_secs(1)).await;
    let v = key
        .verify_waited(&ch.text, wait, &expected("main", CLIENT, &clock))
        .unwrap()
        .unwrap();
    assert_eq!(v.id(), URL_SAFE_NO_PAD.encode(NONCE));
    // Everything but the work is still checked.
    assert_eq!(
        key.verify_waited(&ch.text, wait, &expected("main", OTHER, &clock)),
        Err(ChallengeError::WrongClient)
    );
    assert_eq!(
        key.verify_waited(&ch.text, wait, &expected("shop", CLIENT, &clock)),
        Err(ChallengeError::WrongRoom)
    );
    tokio::time::advance(TTL).await;
    assert_eq!(
        key.verify_waited(&ch.text, wait, &expected("main", CLIENT, &clock)),
        Err(ChallengeError::Expired)
    );
}

#[test]
fn a_shadow_id_is_the_clients_own_under_the_secret_and_not_its_address() {
    let key = ChallengeKey::new(SECRET);
    let id = key.shadow_id(&CLIENT);
    assert_eq!(
        id,
        ChallengeKey::new(SECRET).shadow_id(&CLIENT),
        "every replica's"
    );
    assert_ne!(id, key.shadow_id(&OTHER));
    assert_ne!(id, CLIENT);
    let other_secret = ChallengeKey::new(b"another secret of at least 32 bytes......");
    assert_ne!(id, other_secret.shadow_id(&CLIENT));
}
