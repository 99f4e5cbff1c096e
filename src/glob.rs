//! Path globs (`ban_paths`, `bypass_paths` and `asset_paths`): parsing with
//! clear errors, and a set that matches one request path against many patterns without
//! allocating.
//!
//! The language, deliberately small so an operator can predict it:
//!
//! - The path is matched without its query (`?…`) or fragment (`#…`), byte for byte
//!   (case-sensitive, no percent-decoding: the raw path is what the origin receives).
//! - A pattern starting with `/` matches the whole path, segment by segment.
//! - `*` matches any run of characters inside one segment (never a `/`); it may appear
//!   several times in a segment (`/api/*/v*`).
//! - `**` is a whole segment and matches zero or more whole segments, so `/.git/**`
//!   matches `/.git`, `/.git/` and everything below it.
//! - A pattern without a leading `/` is a single segment matched against the path's last
//!   segment: `*.css` matches `/a/b/site.css`; `wp-login.php` matches it anywhere.
//!
//! Refused, with a [`GlobError`] that says why: an empty pattern; `?` or `#` (they would
//! only ever meet a query or fragment, which is never matched); `**` that is not a whole
//! segment (`a**`, `***`); an empty segment except a trailing one (`/a//b`, but `/a/` is
//! fine and matches the path `/a/` only); `**` or `/` in a last-segment pattern; control
//! characters; more than [`MAX_PATTERN_LEN`] bytes. There is no escape for a literal `*`.

use std::collections::HashMap;
use std::fmt;

/// Longest pattern accepted, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// The pattern is empty.
    #[error("the pattern is empty")]
    Empty,
    /// The pattern exceeds [`MAX_PATTERN_LEN`].
    #[error("the pattern is longer than {MAX_PATTERN_LEN} bytes")]
    TooLong,
    /// The pattern contains `?` or `#`, which the matched path never does.
    #[error("`{0}` cannot appear in a path pattern: the query and fragment are never matched")]
    QueryChar(char),
    /// The pattern contains a control character.
    #[error("the pattern contains a control character")]
    ControlChar,
    /// `**` is part of a segment rather than the whole of one.
    #[error("`**` must be a whole segment (like `/a/**/b`), not part of `{0}`")]
    DoubleStarInSegment(String),
    /// The pattern contains `//`.
    #[error("the pattern has an empty segment (`//`)")]
    EmptySegment,
    #[error(
        "a pattern without a leading `/` matches the last segment only, so it cannot contain \
         `/` or `**`; start it with `/` to match a whole path"
    )]
    /// A last-segment pattern (no leading `/`) contains `/` or `**`.
    RelativeMultiSegment,
}

/// One segment of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    /// `**`: zero or more whole segments.
    AnySegments,
    /// No wildcard: compared as bytes.
    Literal(Box<str>),
    /// Contains `*`.
    Wild(Box<str>),
}

impl Seg {
    fn parse(seg: &str) -> Self {
        if seg.contains('*') {
            Seg::Wild(seg.into())
        } else {
            Seg::Literal(seg.into())
        }
    }

    /// Whether this single-segment piece matches `s` (never called for `**`).
    fn matches(&self, s: &str) -> bool {
        match self {
            Seg::AnySegments => true,
            Seg::Literal(l) => **l == *s,
            Seg::Wild(w) => wild_match(w.as_bytes(), s.as_bytes()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// Starts with `/`: the segments after it.
    Anchored(Vec<Seg>),
    /// No leading `/`: matched against the path's last segment.
    LastSegment(Seg),
}

/// One parsed pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    source: Box<str>,
    kind: Kind,
}

impl Glob {
    /// Parses `pattern` (see the module documentation for the language).
    pub fn parse(pattern: &str) -> Result<Glob, GlobError> {
        if pattern.is_empty() {
            return Err(GlobError::Empty);
        }
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(GlobError::TooLong);
        }
        if let Some(c) = pattern.chars().find(|c| *c == '?' || *c == '#') {
            return Err(GlobError::QueryChar(c));
        }
        if pattern.chars().any(char::is_control) {
            return Err(GlobError::ControlChar);
        }
        let kind = match pattern.strip_prefix('/') {
            Some(rest) => {
                let count = rest.split('/').count();
                let mut segs: Vec<Seg> = Vec::with_capacity(count);
                for (i, seg) in rest.split('/').enumerate() {
                    if seg == "**" {
                        // `/**/**` means the same as `/**`; keeping one keeps matching linear.
                        if segs.last() != Some(&Seg::AnySegments) {
                            segs.push(Seg::AnySegments);
                        }
                    } else if seg.contains("**") {
                        return Err(GlobError::DoubleStarInSegment(seg.to_owned()));
                    } else if seg.is_empty() && i + 1 != count {
                        return Err(GlobError::EmptySegment);
                    } else {
                        segs.push(Seg::parse(seg));
                    }
                }
                Kind::Anchored(segs)
            }
            None => {
                if pattern.contains('/') || pattern.contains("**") {
                    return Err(GlobError::RelativeMultiSegment);
                }
                Kind::LastSegment(Seg::parse(pattern))
            }
        };
        Ok(Glob {
            source: pattern.into(),
            kind,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches `path` (a request target's path; anything from `?` or
    /// `#` on is ignored). Never allocates.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_path(strip_query(path))
    }

    /// [`Glob::matches`] on a path already stripped of its query.
    fn matches_path(&self, path: &str) -> bool {
        match &self.kind {
            Kind::LastSegment(seg) => seg.matches(last_segment(path)),
            Kind::Anchored(segs) => match path.strip_prefix('/') {
                Some(rest) => match_segments(segs, rest),
                None => false,
            },
        }
    }

    /// The literal path this pattern matches, if it has no wildcard at all.
    fn literal_path(&self) -> Option<&str> {
        match &self.kind {
            Kind::Anchored(segs) if segs.iter().all(|s| matches!(s, Seg::Literal(_))) => {
                Some(&self.source)
            }
            _ => None,
        }
    }

    /// The literal last segment this pattern matches, if it has no wildcard.
    fn literal_last(&self) -> Option<&str> {
        match &self.kind {
            Kind::LastSegment(Seg::Literal(l)) => Some(l),
            _ => None,
        }
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for Glob {
    type Err = GlobError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Glob::parse(s)
    }
}

/// The path without its query and fragment.
pub fn strip_query(path: &str) -> &str {
    match path.find(['?', '#']) {
        Some(i) => &path[..i],
        None => path,
    }
}

fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The segment starting at byte `off` of `rest`, and where the next one starts (None when
/// this is the last).
fn segment_at(rest: &str, off: usize) -> (&str, Option<usize>) {
    let tail = rest.get(off..).unwrap_or("");
    match tail.find('/') {
        Some(i) => (&tail[..i], Some(off + i + 1)),
        None => (tail, None),
    }
}

/// Anchored matching with segments as symbols and `**` as the wildcard: the classic
/// greedy wildcard algorithm with one backtrack point (the last `**` seen), which is
/// exact for `*`-only patterns and O(segments × pattern segments) in the worst case, with
/// no recursion and no allocation.
fn match_segments(segs: &[Seg], rest: &str) -> bool {
    let mut pi = 0;
    // Byte offset of the next path segment; None once the path is used up.
    let mut pos = Some(0usize);
    // (pattern index after the last `**`, path offset it has consumed up to).
    let mut star: Option<(usize, Option<usize>)> = None;
    loop {
        if let Some(Seg::AnySegments) = segs.get(pi) {
            star = Some((pi + 1, pos));
            pi += 1;
            continue;
        }
        match (pos, segs.get(pi)) {
            (None, None) => return true,
            (Some(off), Some(seg)) => {
                let (s, next) = segment_at(rest, off);
                if seg.matches(s) {
                    pi += 1;
                    pos = next;
                    continue;
                }
            }
            _ => {}
        }
        // Mismatch: let the last `**` swallow one more segment, if there is one.
        match star {
            Some((sp, Some(off))) => {
                let (_, next) = segment_at(rest, off);
                star = Some((sp, next));
                pi = sp;
                pos = next;
            }
            _ => return false,
        }
    }
}

/// `*` within one segment (the segment has no `/`): greedy with one backtrack point.
fn wild_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if p.get(pi) == Some(&b'*') {
            star = Some((pi + 1, si));
            pi += 1;
        } else if p.get(pi) == Some(&s[si]) {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi.min(p.len())..].iter().all(|b| *b == b'*')
}

/// Why a set of patterns was refused: which one (by index and text) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pattern {index} (`{pattern}`): {error}")]
pub struct GlobSetError {
    /// Zero-based position of the bad pattern in the list.
    pub index: usize,
    /// The bad pattern as written.
    pub pattern: String,
    /// Why it was refused.
    pub error: GlobError,
}

/// Many patterns matched against one path. Literal whole paths and literal last segments
/// are hash lookups; the rest are tried in order. Matching never allocates.
#[derive(Clone, Debug, Default)]
pub struct GlobSet {
    globs: Vec<Glob>,
    /// Literal whole path → index of the first pattern that is exactly it.
    exact: HashMap<Box<str>, usize>,
    /// Literal last segment → index of the first such pattern.
    last: HashMap<Box<str>, usize>,
    /// Indexes of the patterns with a wildcard, in order.
    wild: Vec<usize>,
}

impl GlobSet {
    /// Parses every pattern; the first bad one is the error.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<GlobSet, GlobSetError> {
        let mut set = GlobSet::default();
        for (index, p) in patterns.iter().enumerate() {
            let glob = Glob::parse(p.as_ref()).map_err(|error| GlobSetError {
                index,
                pattern: p.as_ref().to_owned(),
                error,
            })?;
            if let Some(lit) = glob.literal_path() {
                set.exact.entry(lit.into()).or_insert(index);
            } else if let Some(lit) = glob.literal_last() {
                set.last.entry(lit.into()).or_insert(index);
            } else {
                set.wild.push(index);
            }
            set.globs.push(glob);
        }
        Ok(set)
    }

    /// Whether the set has no patterns.
    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    /// How many patterns the set holds.
    pub fn len(&self) -> usize {
        self.globs.len()
    }

    /// The parsed patterns, in the order given.
    pub fn globs(&self) -> &[Glob] {
        &self.globs
    }

    /// Whether any pattern matches `path` (query and fragment ignored).
    pub fn is_match(&self, path: &str) -> bool {
        self.first_match(path).is_some()
    }

    /// The first matching pattern (lowest index), if any.
    pub fn first_match(&self, path: &str) -> Option<&Glob> {
        if self.globs.is_empty() {
            return None;
        }
        let path = strip_query(path);
        let mut best = self.exact.get(path).copied();
        if let Some(&i) = self.last.get(last_segment(path)) {
            best = Some(best.map_or(i, |b| b.min(i)));
        }
        for &i in &self.wild {
            if best.is_some_and(|b| b < i) {
                break;
            }
            if self.globs[i].matches_path(path) {
                best = Some(i);
                break;
            }
        }
        best.map(|i| &self.globs[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        Glob::parse(pattern).unwrap().matches(path)
    }

    #[test]
    fn literal_paths_match_exactly() {
        assert!(m("/.env", "/.env"));
        assert!(m("/.env", "/.env?x=1"));
        assert!(m("/.env", "/.env#frag"));
        assert!(!m("/.env", "/.env.bak"));
        assert!(!m("/.env", "/a/.env"));
        assert!(!m("/.env", "/.ENV"), "case-sensitive");
        assert!(!m("/.env", ".env"), "an anchored pattern needs a leading /");
        assert!(m("/", "/"));
        assert!(!m("/", "/a"));
        assert!(m("/admin/", "/admin/"));
        assert!(!m("/admin/", "/admin"));
        assert!(!m("/admin", "/admin/"));
    }

    #[test]
    fn star_stays_within_one_segment() {
        assert!(m("/wp-*.php", "/wp-login.php"));
        assert!(m("/wp-*.php", "/wp-.php"));
        assert!(!m("/wp-*.php", "/wp-admin/x.php"));
        assert!(m("/api/*/users", "/api/v1/users"));
        assert!(!m("/api/*/users", "/api/v1/v2/users"));
        assert!(m("/api/*", "/api/"), "* matches an empty segment");
        assert!(!m("/api/*", "/api"));
        assert!(m("/a*b*c", "/aXbYc"));
        assert!(m("/a*b*c", "/abc"));
        assert!(m("/a*b*c", "/abbbcbc"));
        assert!(!m("/a*b*c", "/abcx"));
        assert!(m("/*", "/anything"));
        assert!(!m("/*", "/two/segments"));
    }

    #[test]
    fn double_star_crosses_segments() {
        assert!(m("/.git/**", "/.git"));
        assert!(m("/.git/**", "/.git/"));
        assert!(m("/.git/**", "/.git/config"));
        assert!(m("/.git/**", "/.git/refs/heads/main"));
        assert!(!m("/.git/**", "/.gitignore"));
        assert!(!m("/.git/**", "/x/.git/config"));
        assert!(m("/**", "/"));
        assert!(m("/**", "/a/b/c"));
        assert!(m("/**/.env", "/.env"));
        assert!(m("/**/.env", "/deep/down/.env"));
        assert!(!m("/**/.env", "/deep/down/.env2"));
        assert!(m("/a/**/b/**/c", "/a/b/c"));
        assert!(m("/a/**/b/**/c", "/a/x/b/y/z/c"));
        assert!(m("/a/**/b/**/c", "/a/b/b/c/c"));
        assert!(!m("/a/**/b/**/c", "/a/x/c"));
        assert!(m("/a/**/*.php", "/a/b/c/shell.php"));
        assert!(!m("/a/**/*.php", "/b/shell.php"));
        assert!(m("/**/**/x", "/x"));
    }

    #[test]
    fn patterns_without_a_slash_match_the_last_segment() {
        assert!(m("*.css", "/site.css"));
        assert!(m("*.css", "/a/b/site.css?v=3"));
        assert!(!m("*.css", "/site.css/more"));
        assert!(!m("*.css", "/site.cssx"));
        assert!(m("wp-login.php", "/blog/wp-login.php"));
        assert!(m("wp-login.php", "/wp-login.php"));
        assert!(!m("wp-login.php", "/wp-login.php/x"));
        assert!(
            m("*", "/"),
            "the last segment of / is empty and * matches it"
        );
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        use GlobError::*;
        let e = |p: &str| Glob::parse(p).unwrap_err();
        assert_eq!(e(""), Empty);
        assert_eq!(e("/a?b"), QueryChar('?'));
        assert_eq!(e("/a#b"), QueryChar('#'));
        assert_eq!(e("/***"), DoubleStarInSegment("***".into()));
        assert_eq!(e("/a**"), DoubleStarInSegment("a**".into()));
        assert_eq!(e("/**x/y"), DoubleStarInSegment("**x".into()));
        assert_eq!(e("/a//b"), EmptySegment);
        assert_eq!(e("//"), EmptySegment);
        assert_eq!(e("a/b"), RelativeMultiSegment);
        assert_eq!(e("**"), RelativeMultiSegment);
        assert_eq!(e("/a\nb"), ControlChar);
        assert_eq!(e(&format!("/{}", "a".repeat(MAX_PATTERN_LEN))), TooLong);
        for error in [Empty, QueryChar('?'), RelativeMultiSegment] {
            assert!(!error.to_string().is_empty());
        }
    }

    #[test]
    fn a_set_reports_the_first_matching_pattern_in_order() {
        let set = GlobSet::new(&["/.env", "*.php", "/.git/**", "/wp-login.php", "/a*"]).unwrap();
        assert_eq!(set.len(), 5);
        assert_eq!(set.first_match("/.env").unwrap().as_str(), "/.env");
        assert_eq!(set.first_match("/x/y.php").unwrap().as_str(), "*.php");
        // Both "*.php" (index 1) and "/wp-login.php" (3) match; the lower index wins.
        assert_eq!(set.first_match("/wp-login.php").unwrap().as_str(), "*.php");
        assert_eq!(set.first_match("/.git/HEAD").unwrap().as_str(), "/.git/**");
        assert_eq!(set.first_match("/abc?x").unwrap().as_str(), "/a*");
        assert!(set.first_match("/index.html").is_none());
        assert!(!GlobSet::default().is_match("/"));

        let err = GlobSet::new(&["/ok", "/bad//x"]).unwrap_err();
        assert_eq!(err.index, 1);
        assert_eq!(err.error, GlobError::EmptySegment);
        assert!(err.to_string().contains("/bad//x"));

        // Literal last segments and exact paths in the hash tables still respect order
        // against an earlier wildcard.
        let set = GlobSet::new(&["/**", "/exact", "name"]).unwrap();
        assert_eq!(set.first_match("/exact").unwrap().as_str(), "/**");
    }

    /// A reference matcher by recursion over split segments, to check the fast one.
    fn reference(pattern: &str, path: &str) -> bool {
        fn seg(p: &[u8], s: &[u8]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some((b'*', rest)) => (0..=s.len()).any(|i| seg(rest, &s[i..])),
                Some((c, rest)) => s.first() == Some(c) && seg(rest, &s[1..]),
            }
        }
        fn segs(p: &[&str], s: &[&str]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some((&"**", rest)) => (0..=s.len()).any(|i| segs(rest, &s[i..])),
                Some((first, rest)) => {
                    !s.is_empty() && seg(first.as_bytes(), s[0].as_bytes()) && segs(rest, &s[1..])
                }
            }
        }
        let path = strip_query(path);
        match pattern.strip_prefix('/') {
            Some(rest) => match path.strip_prefix('/') {
                Some(prest) => {
                    let p: Vec<&str> = rest.split('/').collect();
                    let s: Vec<&str> = prest.split('/').collect();
                    segs(&p, &s)
                }
                None => false,
            },
            None => seg(pattern.as_bytes(), last_segment(path).as_bytes()),
        }
    }

    /// A small deterministic generator: the fuzz needs no crate and replays exactly.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[(self.next() % from.len() as u64) as usize]
        }
    }

    #[test]
    fn fuzz_never_panics_and_agrees_with_a_reference_matcher() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pat_atoms = [
            "/", "*", "**", "a", "b", "ab", ".", "?", "é", "", "\u{0}", "%2f",
        ];
        let path_atoms = ["/", "a", "b", "ab", ".", "?", "#", "é", "", "*", "x/"];
        let mut parsed = 0;
        for _ in 0..20_000 {
            let mut pattern = String::new();
            for _ in 0..(rng.next() % 8) {
                pattern.push_str(rng.pick(&pat_atoms));
            }
            let mut path = String::new();
            for _ in 0..(rng.next() % 10) {
                path.push_str(rng.pick(&path_atoms));
            }
            let Ok(glob) = Glob::parse(&pattern) else {
                continue;
            };
            parsed += 1;
            assert_eq!(
                glob.matches(&path),
                reference(&pattern, &path),
                "pattern {pattern:?} path {path:?}"
            );
            let set = GlobSet::new(&[pattern.as_str()]).unwrap();
            assert_eq!(set.is_match(&path), glob.matches(&path));
        }
        assert!(
            parsed > 2_000,
            "the generator should produce valid patterns too"
        );
    }

    /// Patterns a backtracking matcher takes exponential time on: the answers must be
    /// right (how fast they come is `anteroom-loadtest micro`'s business).
    #[test]
    fn pathological_patterns_answer_correctly() {
        let glob = Glob::parse(&format!("/{}b", "*a".repeat(30))).unwrap();
        assert!(!glob.matches(&format!("/{}", "a".repeat(1000))));
        assert!(glob.matches(&format!("/{}b", "a".repeat(40))));
        let deep = Glob::parse("/**/a/**/a/**/a/**/b").unwrap();
        assert!(!deep.matches(&"/a".repeat(500)));
        assert!(deep.matches(&format!("{}/b", "/a".repeat(500))));
    }
}
