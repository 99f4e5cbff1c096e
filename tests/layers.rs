//! The library's layering (docs/architecture.md, "Layers"), enforced: every `crate::`
//! path in a module's code, its unit tests included, names a module of its own layer or a
//! lower one, and the top-level modules import each other without a cycle. A unit test
//! that needs a higher layer (the ETA simulation drives `Admission`) lives with that
//! layer, so a module's tests never turn the map into a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Leaves first, wiring last. A module may use its own layer (without a cycle) and any
/// layer before it; never one after it.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaves",
        &[
            "clock",
            "fsutil",
            "invalid",
            "glob",
            "log_limiter",
            "priority",
            "identity",
            "visitor",
            "worker",
        ],
    ),
    (
        "formats",
        &["tls", "token", "audit", "fairness", "challenge"],
    ),
    ("stores", &["queue", "abuse"]),
    ("shared by the listeners", &["http"]),
    (
        "side channels and sockets",
        &["access_log", "events", "server"],
    ),
    ("config", &["config"]),
    (
        "per-replica parts",
        &["admission", "metrics", "live", "proxy", "cli", "logging"],
    ),
    ("listeners", &["admin", "gate"]),
    ("wiring", &["run", "demo", "reload", "signals"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every top-level module of the library, from `src/` itself.
fn modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let module = name.strip_suffix(".rs").unwrap_or(&name).to_owned();
            (module != "lib" && module != "main").then_some(module)
        })
        .collect()
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file, tests included, and its doc comments (an intra-doc link such as
/// `[`crate::admission::Admission`]` is a reference rustdoc resolves, so it counts as an
/// import); plain `//` comments are left out.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with("//") || l.starts_with("///") || l.starts_with("//!")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// module → (module it uses → the first file that does).
fn imports() -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let modules = modules();
    let mut uses: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        let dir = src().join(module);
        if dir.is_dir() {
            rs_files(&dir, &mut files);
        }
        let file = src().join(format!("{module}.rs"));
        if file.exists() {
            files.push(file);
        }
        let entry = uses.entry(module.clone()).or_default();
        for path in files {
            let code = code(&path);
            assert!(
                !code.contains("crate::{"),
                "{}: write each `crate::` path in full, so the layering test can read it",
                path.display()
            );
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let target: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if target != *module && modules.contains(&target) {
                    entry.entry(target).or_insert_with(|| path.clone());
                }
            }
        }
    }
    uses
}

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, members)| members.contains(&module))
        .unwrap_or_else(|| {
            panic!("src/{module} is in no layer: add it to LAYERS here and to docs/architecture.md")
        })
}

#[test]
fn every_module_has_a_layer_and_imports_only_downward() {
    let mut wrong = Vec::new();
    for (module, uses) in imports() {
        let mine = layer_of(&module);
        for (target, file) in uses {
            let theirs = layer_of(&target);
            if theirs > mine {
                wrong.push(format!(
                    "{module} ({}) uses {target} ({}) in {}",
                    LAYERS[mine].0,
                    LAYERS[theirs].0,
                    file.strip_prefix(src()).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let uses = imports();
    // Depth-first search for a back edge; the path to it is the cycle.
    fn visit(
        module: &str,
        uses: &BTreeMap<String, BTreeMap<String, PathBuf>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|m| m == module) {
            let mut cycle = path[i..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for target in uses.get(module).into_iter().flat_map(|u| u.keys()) {
            if let Some(cycle) = visit(target, uses, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for module in uses.keys() {
        if let Some(cycle) = visit(module, &uses, &mut Vec::new(), &mut done) {
            panic!("an import cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_reader_sees_real_imports() {
    // The reader must find what is there, or the two tests above prove nothing.
    let uses = imports();
    assert!(uses["gate"].contains_key("admission"), "{:?}", uses["gate"]);
    assert!(uses["queue"].contains_key("clock"), "{:?}", uses["queue"]);
    assert!(uses["clock"].is_empty(), "{:?}", uses["clock"]);
}
