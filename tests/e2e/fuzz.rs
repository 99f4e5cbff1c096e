//! Fuzzing with a fixed budget: random bytes and structured mutations into the
//! visitor-cookie verifier, the Cookie-header parser and the config loader (YAML text).
//! Nothing may panic; every refusal is an error that says something; a cookie verifies
//! only if it is the very bytes that were signed. (`cargo fuzz` needs nightly, which this
//! machine does not have: these are proptest-driven loops with fixed case counts, which
//! shrink a failure to a minimal input.)

use crate::common;

use std::time::SystemTime;

use anteroom::queue::VisitorId;
use anteroom::token::CookieKeys;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

/// Fuzz budgets (cases per target).
const COOKIE_FUZZ_CASES: u32 = 10_000;
const CONFIG_FUZZ_CASES: u32 = 1_500;

fn fixed(cases: u32) -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

/// A structured mutation of a valid cookie's raw bytes.
#[derive(Clone, Debug)]
enum Mutation {
    FlipBit(usize),
    SetByte(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    /// Replace the text form outright.
    Text(String),
    /// Append to the text form.
    Append(String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::FlipBit),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..80)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1..40usize).prop_map(|(i, n)| Mutation::Remove(i, n)),
        ".{0,300}".prop_map(Mutation::Text),
        "[A-Za-z0-9_=+/-]{1,40}".prop_map(Mutation::Append),
    ]
}

#[test]
fn the_cookie_verifier_never_panics_and_accepts_only_what_was_signed() {
    let panics_before = common::panics();
    let secret = hex::decode(COOKIE_SECRET).unwrap();
    let keys = CookieKeys::new(&secret, &[[9u8; 40]]);
    let now = SystemTime::now();
    let room_name = "[A-Za-z0-9_-]{1,64}";
    let mut runner = fixed(COOKIE_FUZZ_CASES);
    let result = runner.run(
        &(
            any::<[u8; 16]>(),
            room_name,
            proptest::collection::vec(mutation(), 1..4),
        ),
        |(id, room, mutations)| {
            let good = keys.issue(VisitorId(id), &room, now);
            let original = keys.verify(&good, now).expect("a fresh cookie verifies");
            let mut raw = URL_SAFE_NO_PAD.decode(&good).unwrap();
            let mut text = None;
            for m in &mutations {
                let n = raw.len().max(1);
                match m {
                    Mutation::FlipBit(i) => {
                        if !raw.is_empty() {
                            let bit = i % (raw.len() * 8);
                            raw[bit / 8] ^= 1 << (bit % 8);
                        }
                    }
                    Mutation::SetByte(i, b) => {
                        if !raw.is_empty() {
                            let at = i % n;
                            raw[at] = *b;
                        }
                    }
                    Mutation::Truncate(i) => raw.truncate(i % n),
                    Mutation::Insert(i, bytes) => {
                        let at = i % (raw.len() + 1);
                        raw.splice(at..at, bytes.iter().copied());
                    }
                    Mutation::Remove(i, len) => {
                        let at = i % n;
                        let end = (at + len).min(raw.len());
                        if at < end {
                            raw.drain(at..end);
                        }
                    }
                    Mutation::Text(t) => text = Some(t.clone()),
                    Mutation::Append(t) => {
                        text = Some(text.take().unwrap_or_else(|| URL_SAFE_NO_PAD.encode(&raw)) + t)
                    }
                }
            }
            let value = text.unwrap_or_else(|| URL_SAFE_NO_PAD.encode(&raw));
            match keys.verify(&value, now) {
                Err(_) => Ok(()),
                // Only the very bytes that were signed may verify.
                Ok(claim) => {
                    prop_assert_eq!(
                        URL_SAFE_NO_PAD.decode(&value).ok(),
                        URL_SAFE_NO_PAD.decode(&good).ok(),
                        "a mutated cookie verified: {:?}",
                        claim
                    );
                    prop_assert_eq!(claim, original);
                    Ok(())
                }
            }
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    // And the header side: any Cookie header finds at most one value, without panicking.
    let mut runner = fixed(COOKIE_FUZZ_CASES / 4);
    let result = runner.run(&proptest::collection::vec(any::<u8>(), 0..400), |bytes| {
        if let Ok(value) = http::HeaderValue::from_bytes(&bytes) {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::COOKIE, value);
            if let Some(v) = anteroom::token::find_cookie(&headers) {
                let _ = keys.verify(v, now);
            }
            anteroom::token::strip_cookie(&mut headers);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(common::panics() - panics_before, 0);
}

/// A valid config to mutate.
fn valid_config() -> String {
    format!(
        r#"listen: "127.0.0.1:0"
admit_interval: 250ms
cookie_secret: "{COOKIE_SECRET}"
admin_token: "{ADMIN_TOKEN}"
trusted_proxies: ["10.0.0.0/8"]
data_dir: /tmp/anteroom-fuzz-never-created
server:
  header_read_timeout: 5s
  idle_timeout: 30s
rooms:
  main:
    origin: http://127.0.0.1:3000
    rate: 50
    max_active: 500
    session_ttl: 5m
    abandon_after: 60s
    join_limit_per_ip: 120
    join_limit_window: 1m
    schedule:
      queue_opens_at: "2030-01-01T00:00:00Z"
  shop:
    match_host: shop.example
    origin: http://127.0.0.1:3001/prefix
    lottery: true
"#
    )
}

/// Values that tend to find edge cases in a YAML config.
fn nasty_scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("".to_owned()),
        Just("~".to_owned()),
        Just("-1".to_owned()),
        Just("0".to_owned()),
        Just("1e309".to_owned()),
        Just("NaN".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("999999999999999999999h".to_owned()),
        Just("0ms".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("&a [*a]".to_owned()),
        Just("!!binary aGVsbG8=".to_owned()),
        Just("\"\\u0000\"".to_owned()),
        Just("http://[::1".to_owned()),
        Just("2030-02-30T25:61:00Z".to_owned()),
        "[ -~]{0,40}",
    ]
}

#[derive(Clone, Debug)]
enum ConfigEdit {
    /// Replace the value on line `n` (after its `key:`) with a nasty scalar.
    Value(usize, String),
    /// Delete line `n`.
    DeleteLine(usize),
    /// Duplicate line `n`.
    DuplicateLine(usize),
    /// Change line `n`'s indentation.
    Indent(usize, usize),
    /// Cut the text at byte `n` (on a character boundary).
    Cut(usize),
    /// Insert random text at byte `n`.
    Insert(usize, String),
}

fn config_edit() -> impl Strategy<Value = ConfigEdit> {
    prop_oneof![
        4 => (any::<usize>(), nasty_scalar()).prop_map(|(n, v)| ConfigEdit::Value(n, v)),
        1 => any::<usize>().prop_map(ConfigEdit::DeleteLine),
        1 => any::<usize>().prop_map(ConfigEdit::DuplicateLine),
        1 => (any::<usize>(), 0..9usize).prop_map(|(n, i)| ConfigEdit::Indent(n, i)),
        1 => any::<usize>().prop_map(ConfigEdit::Cut),
        1 => (any::<usize>(), "(.|\n){0,30}").prop_map(|(n, s)| ConfigEdit::Insert(n, s)),
    ]
}

fn apply(text: &str, edit: &ConfigEdit) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let n = lines.len().max(1);
    match edit {
        ConfigEdit::Value(i, v) => {
            if let Some(line) = lines.get_mut(i % n)
                && let Some(colon) = line.find(": ")
            {
                line.truncate(colon + 2);
                line.push_str(v);
            }
        }
        ConfigEdit::DeleteLine(i) => {
            if !lines.is_empty() {
                lines.remove(i % n);
            }
        }
        ConfigEdit::DuplicateLine(i) => {
            if let Some(line) = lines.get(i % n).cloned() {
                lines.insert(i % n, line);
            }
        }
        ConfigEdit::Indent(i, by) => {
            if let Some(line) = lines.get_mut(i % n) {
                *line = format!("{}{}", " ".repeat(*by), line.trim_start());
            }
        }
        ConfigEdit::Cut(i) => {
            let mut at = i % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            return text[..at].to_owned();
        }
        ConfigEdit::Insert(i, s) => {
            let mut at = i % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            return format!("{}{}{}", &text[..at], s, &text[at..]);
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn the_config_loader_never_panics_on_mutated_or_random_yaml() {
    let panics_before = common::panics();
    let base = valid_config();
    anteroom::config::from_yaml_str(&base, "fuzz.yaml").expect("the base config is valid");
    let (ok, err) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    let mut runner = fixed(CONFIG_FUZZ_CASES);
    let result = runner.run(&proptest::collection::vec(config_edit(), 1..5), |edits| {
        let text = edits.iter().fold(base.clone(), |t, e| apply(&t, e));
        match anteroom::config::from_yaml_str(&text, "fuzz.yaml") {
            Ok(_) => ok.set(ok.get() + 1),
            Err(e) => {
                // An error is an error: it says something.
                prop_assert!(
                    !e.to_string().trim().is_empty(),
                    "an empty error for {text}"
                );
                err.set(err.get() + 1);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let mut runner = fixed(CONFIG_FUZZ_CASES);
    let result = runner.run(&"(.|\n){0,400}", |text| {
        let _ = anteroom::config::from_yaml_str(&text, "fuzz.yaml");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (ok, err) = (ok.get(), err.get());
    println!("config fuzz: {ok} mutated configs accepted, {err} refused with an error");
    assert!(ok > 0 && err > 0, "the mutations exercise both outcomes");
    assert_eq!(common::panics() - panics_before, 0);
}
