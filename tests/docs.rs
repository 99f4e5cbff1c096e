//! The documentation kept true to the code:
//!
//! - every key `anteroom init` writes, and every key the config file accepts (the fields of
//!   the raw structs in `src/config/file.rs`), has its row in docs/configuration.md, and
//!   every row there names a key the file accepts;
//! - the README stays a front door (at most 300 lines) that links every guide in docs/;
//! - every relative link in the README and the guides reaches a file that exists and, with a
//!   `#fragment`, a heading of that file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    let path = Path::new(ROOT).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A YAML key as anteroom writes them: lower case, digits and `_`.
fn is_key(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The dotted path of every key in a config file as `anteroom init` writes it, commented-out
/// keys included (`# server:` / `#   workers: 2`). A room's name becomes `<name>`; the keys
/// of an inline mapping (`adaptive: {target_latency: 800ms, …}`) are keys too.
fn yaml_keys(text: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for raw in text.lines() {
        // Uncomment once: "<indent># <rest>" is read as "<indent><rest>".
        let commented = raw.trim_start().starts_with('#');
        let line = match raw.trim_start().strip_prefix('#') {
            Some(rest) => {
                let indent = raw.len() - raw.trim_start().len();
                format!(
                    "{}{}",
                    &raw[..indent],
                    rest.strip_prefix(' ').unwrap_or(rest)
                )
            }
            None => raw.to_string(),
        };
        let indent = line.len() - line.trim_start().len();
        let Some((key, value)) = line.trim_start().split_once(':') else {
            continue;
        };
        if !is_key(key) || !(value.is_empty() || value.starts_with([' ', '\t'])) {
            continue;
        }
        // A commented-out key has a value of one word (a list, a mapping or a quoted
        // string aside) before its own comment; prose that happens to read "word: …" has
        // several.
        let bare = value.split(" #").next().unwrap_or("").trim();
        if commented && !bare.starts_with(['[', '{', '"']) && bare.contains(' ') {
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let parent: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
        let segment = if parent == ["rooms"] { "<name>" } else { key };
        let path = parent
            .iter()
            .copied()
            .chain([segment])
            .collect::<Vec<_>>()
            .join(".");
        if segment != "<name>" {
            keys.insert(path.clone());
        }
        if let Some(inline) = value.trim().strip_prefix('{') {
            let inline = inline.split('}').next().unwrap_or("");
            for part in inline.split(',') {
                if let Some((k, _)) = part.split_once(':')
                    && is_key(k.trim())
                {
                    keys.insert(format!("{path}.{}", k.trim()));
                }
            }
        }
        stack.push((indent, segment.to_string()));
    }
    keys
}

/// A struct of `src/config/file.rs`: its YAML fields (name, type), or the struct a tuple
/// struct wraps in a `Vec` (one entry per named room).
enum RawStruct {
    Fields(Vec<(String, String)>),
    Named(String),
}

fn raw_structs(src: &str) -> BTreeMap<String, RawStruct> {
    let mut out = BTreeMap::new();
    let mut lines = src.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("pub(super) struct ") else {
            continue;
        };
        if let Some((name, inner)) = rest.split_once("(pub Vec<") {
            let inner = inner.split('>').next().unwrap().to_string();
            out.insert(name.to_string(), RawStruct::Named(inner));
            continue;
        }
        let name = rest.trim_end_matches(" {").trim().to_string();
        let mut fields = Vec::new();
        let mut skip = false;
        for line in lines.by_ref() {
            if line == "}" {
                break;
            }
            let t = line.trim();
            if t.starts_with("#[serde(skip)]") {
                skip = true;
                continue;
            }
            if let Some(field) = t.strip_prefix("pub ") {
                let (field, ty) = field.split_once(':').expect("a field with a type");
                if !std::mem::take(&mut skip) {
                    let ty = ty.trim().trim_end_matches(',');
                    let ty = ty.strip_prefix("Option<").map_or(ty, |t| &t[..t.len() - 1]);
                    fields.push((field.to_string(), ty.to_string()));
                }
            }
        }
        out.insert(name, RawStruct::Fields(fields));
    }
    out
}

/// Every key the config file accepts, as dotted paths, walked from `RawFile`.
fn file_keys() -> BTreeSet<String> {
    let structs = raw_structs(&read("src/config/file.rs"));
    let mut keys = BTreeSet::new();
    let mut seen = BTreeSet::new();
    fn walk(
        structs: &BTreeMap<String, RawStruct>,
        name: &str,
        prefix: &str,
        keys: &mut BTreeSet<String>,
        seen: &mut BTreeSet<String>,
    ) {
        seen.insert(name.to_string());
        match &structs[name] {
            RawStruct::Named(inner) => {
                walk(structs, inner, &format!("{prefix}.<name>"), keys, seen)
            }
            RawStruct::Fields(fields) => {
                for (field, ty) in fields {
                    let path = if prefix.is_empty() {
                        field.clone()
                    } else {
                        format!("{prefix}.{field}")
                    };
                    keys.insert(path.clone());
                    // A list of sections (`admin_tokens`): each item's keys under the
                    // list's own path (`admin_tokens.name`).
                    let item = ty
                        .strip_prefix("Vec<")
                        .and_then(|t| t.strip_suffix('>'))
                        .unwrap_or(ty);
                    if structs.contains_key(item) {
                        walk(structs, item, &path, keys, seen);
                    }
                }
            }
        }
    }
    walk(&structs, "RawFile", "", &mut keys, &mut seen);
    let unreached: Vec<_> = structs.keys().filter(|s| !seen.contains(*s)).collect();
    assert!(
        unreached.is_empty(),
        "structs of src/config/file.rs this test does not reach from RawFile: {unreached:?}"
    );
    keys
}

/// The keys of docs/configuration.md's tables: rows that start "| `key` |".
fn documented_keys(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |").map(|(k, _)| k.to_string()))
        .filter(|k| k.split('.').all(|s| s == "<name>" || is_key(s)))
        .collect()
}

#[test]
fn the_key_parsers_see_what_they_should() {
    let init = yaml_keys(&anteroom::config::init_yaml());
    let file = file_keys();
    for key in [
        "listen",
        "redis.ca_file",
        "kafka.properties",
        "server.workers",
        "abuse.max_bans",
        "rooms.<name>.rate",
        "rooms.<name>.adaptive.min_rate",
        "rooms.<name>.schedule",
    ] {
        assert!(
            init.contains(key),
            "`anteroom init` keys lack {key}: {init:?}"
        );
        assert!(file.contains(key), "file.rs keys lack {key}: {file:?}");
    }
    assert!(file.contains("rooms.<name>.schedule.admits_at"), "{file:?}");
    assert!(
        !file.contains("rooms.<name>.name"),
        "a #[serde(skip)] field is no key"
    );
    assert!(
        !file.contains("kafka.sasl_password"),
        "a #[serde(skip)] field is no key"
    );
    assert!(
        init.len() > 70 && file.len() > 70,
        "{} / {}",
        init.len(),
        file.len()
    );
}

#[test]
fn every_config_key_is_in_docs_configuration_md() {
    let doc = read("docs/configuration.md");
    let documented = documented_keys(&doc);
    let init = yaml_keys(&anteroom::config::init_yaml());
    let file = file_keys();
    let missing: Vec<_> = init
        .union(&file)
        .filter(|k| !documented.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "keys with no row (\"| `key` | default | meaning |\") in docs/configuration.md: {missing:?}"
    );
    let unknown: Vec<_> = documented.iter().filter(|k| !file.contains(*k)).collect();
    assert!(
        unknown.is_empty(),
        "docs/configuration.md documents keys the config file does not accept: {unknown:?}"
    );
    let not_from_init: Vec<_> = init.iter().filter(|k| !file.contains(*k)).collect();
    assert!(
        not_from_init.is_empty(),
        "`anteroom init` writes keys the config file does not accept: {not_from_init:?}"
    );
}

#[test]
fn the_readme_is_a_front_door_to_every_guide() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: move detail into docs/"
    );
    let mut guides: Vec<_> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .collect();
    guides.sort();
    assert!(guides.len() >= 8, "{guides:?}");
    let unlinked: Vec<_> = guides
        .iter()
        .filter(|g| !readme.contains(&format!("](docs/{g})")))
        .collect();
    assert!(unlinked.is_empty(), "README.md does not link {unlinked:?}");
}

/// The anchors of a Markdown file's headings, as GitHub makes them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        // A link's text only.
        let mut plain = String::new();
        let mut rest = heading.trim();
        while let Some(open) = rest.find('[') {
            plain.push_str(&rest[..open]);
            match rest[open..].find("](") {
                Some(mid) => {
                    plain.push_str(&rest[open + 1..open + mid]);
                    let after = &rest[open + mid..];
                    rest = &after[after.find(')').map_or(after.len(), |c| c + 1)..];
                }
                None => {
                    plain.push_str(&rest[open..]);
                    rest = "";
                }
            }
        }
        plain.push_str(rest);
        let slug: String = plain
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_lands() {
    let mut files = vec![
        PathBuf::from("README.md"),
        PathBuf::from("RELIABILITY.md"),
        PathBuf::from("BENCHMARKS.md"),
    ];
    for e in std::fs::read_dir(Path::new(ROOT).join("docs")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            files.push(Path::new("docs").join(name));
        }
    }
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = read(file.to_str().unwrap());
        let dir = file.parent().unwrap();
        let mut fence = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fence = !fence;
            }
            if fence {
                continue;
            }
            let mut rest = line;
            while let Some(i) = rest.find("](") {
                let after = &rest[i + 2..];
                let end = after.find(')').unwrap_or(after.len());
                let target = &after[..end];
                rest = &after[end..];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                checked += 1;
                let at = format!("{}:{}: {target}", file.display(), n + 1);
                let full = Path::new(ROOT).join(&resolved);
                if !full.exists() {
                    bad.push(format!("{at}: no such file"));
                } else if !anchor.is_empty() {
                    let text = std::fs::read_to_string(&full).unwrap_or_default();
                    if !anchors(&text).contains(anchor) {
                        bad.push(format!("{at}: no heading with that anchor"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the scan broken?"
    );
    assert!(
        bad.is_empty(),
        "links that do not land:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn every_admin_api_operation_is_in_docs_admin_api_md() {
    let doc = read("docs/admin-api.md");
    let api: serde_json::Value = serde_json::from_str(&read("src/admin/openapi.json")).unwrap();
    let paths = api["paths"].as_object().expect("openapi.json has paths");
    let mut missing = Vec::new();
    let mut operations = 0;
    for (path, item) in paths {
        for method in ["get", "put", "post", "delete", "patch"] {
            if item.get(method).is_none() {
                continue;
            }
            operations += 1;
            let row = format!("| {} | `{path}", method.to_uppercase());
            if !doc.contains(&row) {
                missing.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    assert!(
        operations >= 10,
        "only {operations} operations in openapi.json"
    );
    assert!(
        missing.is_empty(),
        "operations of src/admin/openapi.json with no row in docs/admin-api.md: {missing:?}"
    );
}
