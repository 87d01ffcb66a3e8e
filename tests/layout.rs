//! The layout of the source tree: the modules of the library (`src/`) and of
//! the reproduction harness (`repro/src/`) form layers with no import
//! circles, and every test file of both packages runs.
//!
//! - The `crate::` references (use lines and paths) between the top-level
//!   modules of `src/` (and of `repro/src/`) form no cycle.
//! - Sibling submodules of one module (`super::x`, `crate::m::x`) form no
//!   cycle.
//! - Every `tests/*.rs` file is included by `tests/integration.rs`, every
//!   `repro/tests/*.rs` file by `repro/tests/integration.rs` (a
//!   `#[path = "..."]` module or a `mod` line).
//!
//! References are read from the source text with comments removed; a
//! reference resolves to the module it names (crate-root re-exports of
//! `src/lib.rs` resolve to the module they re-export), and an edge joins the
//! two sibling modules where the referring module and the referred one part.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The source with `//` and `/* */` comments removed (string literals kept,
/// so a `//` inside one is not taken for a comment).
fn strip_comments(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if c == b'\\' && i + 1 < bytes.len() {
                i += 2;
                continue;
            }
            if c == b'"' {
                in_string = false;
            }
            out.push(c as char);
            i += 1;
        } else if c == b'"' && !(i > 0 && bytes[i - 1] == b'\'' && bytes.get(i + 1) == Some(&b'\'')) {
            in_string = true;
            out.push('"');
            i += 1;
        } else if source[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if source[i..].starts_with("/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if source[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if source[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else {
            // Multi-byte characters are copied whole.
            let ch = source[i..].chars().next().expect("a character");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths (as segment lists) that follow `prefix` in `text`, a `{...}`
/// group giving one path per item (its leading segments).
fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(pos) = text[start..].find(prefix) {
        let at = start + pos;
        start = at + prefix.len();
        if at > 0 && text[..at].chars().next_back().is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        out.extend(read_paths(&text[start..]));
    }
    out
}

/// The paths at the start of `rest`: `a::b::c`, or a `{...}` group.
fn read_paths(rest: &str) -> Vec<Vec<String>> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 1;
        let mut end = group.len();
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let inner = &group[..end];
        let mut items = Vec::new();
        let (mut depth, mut item_start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[item_start..i]);
                    item_start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[item_start..]);
        return items.into_iter().flat_map(read_paths).filter(|p| !p.is_empty()).collect();
    }
    let mut segments = Vec::new();
    let mut rest = rest;
    loop {
        let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if len == 0 {
            if rest.starts_with('{') {
                return read_paths(rest).into_iter().map(|tail| segments.iter().cloned().chain(tail).collect()).collect();
            }
            break;
        }
        segments.push(rest[..len].to_string());
        match rest[len..].strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    vec![segments]
}

/// The module path of a source file (`src/a/b.rs` and `src/a/b/mod.rs`:
/// `["a", "b"]`; `src/lib.rs`: empty).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).expect("a readable directory").map(|e| e.expect("an entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate-root re-exports of `lib.rs`: item name -> the top-level module
/// it comes from.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in lib.lines().filter(|l| l.starts_with("pub use ")) {
        let body = line.trim_start_matches("pub use ").trim_end_matches(';');
        for path in read_paths(body) {
            if path.len() >= 2 && path[0] != "crate" {
                map.insert(path.last().expect("a name").clone(), path[0].clone());
            }
        }
    }
    map
}

/// The module dependency graphs of the source tree under `src`: one graph
/// per parent module (the empty key: the top-level modules), nodes named by
/// their full module path (`psd::dual`).
fn module_graphs(src: &Path) -> BTreeMap<String, Graph> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(src, f)).filter(|m| !m.is_empty()).collect();
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let reexports = root_reexports(&strip_comments(&lib));
    let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
    for file in &files {
        let from = module_path(src, file);
        if from.is_empty() {
            continue;
        }
        let text = strip_comments(&std::fs::read_to_string(file).expect("a readable source file"));
        let mut targets: Vec<Vec<String>> = Vec::new();
        for mut path in paths_after(&text, "crate::") {
            if let Some(module) = path.first().and_then(|first| reexports.get(first)) {
                path.insert(0, module.clone());
            }
            targets.push(path);
        }
        for path in paths_after(&text, "super::") {
            // `super::super::x`: one more level up per `super` (a `mod.rs`
            // file is its directory's module, so the rule is the same).
            let ups = 1 + path.iter().take_while(|s| *s == "super").count();
            let rest: Vec<String> = path.iter().skip_while(|s| *s == "super").cloned().collect();
            if let Some(base_len) = from.len().checked_sub(ups) {
                targets.push(from[..base_len].iter().cloned().chain(rest).collect());
            }
        }
        for target in targets {
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= from.len() || common >= target.len() {
                continue;
            }
            let child = target[..=common].to_vec();
            if !modules.contains(&child) {
                continue;
            }
            let parent = from[..common].join("::");
            graphs.entry(parent).or_default().entry(from[..=common].join("::")).or_default().insert(child.join("::"));
        }
    }
    graphs
}

/// A strongly connected component of more than one node: its nodes, and one
/// cycle through its smallest node.
#[derive(Debug)]
struct Cycle {
    nodes: BTreeSet<String>,
    path: Vec<String>,
}

/// One cycle per strongly connected component of more than one node
/// (Tarjan's algorithm, then the shortest path back to the component's
/// smallest node).
fn find_cycles(graph: &Graph) -> Vec<Cycle> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        components: Vec<BTreeSet<&'g str>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let mut s = State { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), components: Vec::new() };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    let mut cycles = Vec::new();
    for component in s.components.iter().filter(|c| c.len() > 1) {
        let start = *component.iter().next().expect("a node");
        // Breadth-first search inside the component for the shortest way back.
        let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut last = None;
        'search: while let Some(v) = queue.pop_front() {
            for w in graph.get(v).into_iter().flatten().map(String::as_str).filter(|w| component.contains(w)) {
                if w == start {
                    last = Some(v);
                    break 'search;
                }
                if !previous.contains_key(w) {
                    previous.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let mut cycle = vec![start.to_string()];
        let mut v = last.expect("a component of more than one node has a cycle through each node");
        let mut back = Vec::new();
        while v != start {
            back.push(v.to_string());
            v = previous[v];
        }
        cycle.extend(back.into_iter().rev());
        cycle.push(start.to_string());
        cycles.push(Cycle { nodes: component.iter().map(|n| n.to_string()).collect(), path: cycle });
    }
    cycles
}

/// The cycles of `graph` other than those whose strongly connected
/// component is exactly an allowed pair.
fn disallowed_cycles(graph: &Graph, allowed: &[(&str, &str)]) -> Vec<Vec<String>> {
    find_cycles(graph)
        .into_iter()
        .filter(|cycle| !allowed.iter().any(|(a, b)| cycle.nodes == BTreeSet::from([a.to_string(), b.to_string()])))
        .map(|cycle| cycle.path)
        .collect()
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source folder of the reproduction harness (package `gramian-repro`).
fn repro_src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("repro/src")
}

#[test]
fn top_level_modules_form_no_import_cycle() {
    let graphs = module_graphs(&src_dir());
    let top = graphs.get("").cloned().unwrap_or_default();
    assert!(top.len() >= 5, "the top-level graph was not read: {top:?}");
    let cycles = disallowed_cycles(&top, &[]);
    let shown: Vec<String> = cycles.iter().map(|c| c.join(" -> ")).collect();
    assert!(cycles.is_empty(), "import cycles among the top-level modules of src:\n{}", shown.join("\n"));
}

#[test]
fn repro_modules_form_no_import_cycle() {
    let graphs = module_graphs(&repro_src_dir());
    assert!(graphs.get("").is_some_and(|top| top.contains_key("evaluation")), "the repro graph was not read: {graphs:?}");
    let mut shown = Vec::new();
    for (parent, graph) in &graphs {
        for cycle in disallowed_cycles(graph, &[]) {
            shown.push(format!("in repro/src {parent}: {}", cycle.join(" -> ")));
        }
    }
    assert!(shown.is_empty(), "import cycles among the modules of repro/src:\n{}", shown.join("\n"));
}

#[test]
fn sibling_submodules_form_no_import_cycle() {
    let graphs = module_graphs(&src_dir());
    assert!(graphs.keys().any(|k| k == "psd"), "the submodule graphs were not read: {:?}", graphs.keys().collect::<Vec<_>>());
    let mut shown = Vec::new();
    for (parent, graph) in graphs.iter().filter(|(parent, _)| !parent.is_empty()) {
        for cycle in disallowed_cycles(graph, &[]) {
            shown.push(format!("in {parent}: {}", cycle.join(" -> ")));
        }
    }
    assert!(shown.is_empty(), "import cycles among sibling submodules:\n{}", shown.join("\n"));
}

#[test]
fn a_file_no_module_reaches_is_found() {
    let dir = std::env::temp_dir().join(format!("gramian-layout-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("group")).unwrap();
    std::fs::write(dir.join("integration.rs"), "mod group;\n#[path = \"other.rs\"]\nmod other;\n").unwrap();
    std::fs::write(dir.join("other.rs"), "").unwrap();
    std::fs::write(dir.join("group/mod.rs"), "// mod orphan;\nmod listed;\n").unwrap();
    std::fs::write(dir.join("group/listed.rs"), "").unwrap();
    files_not_included(&dir);
    std::fs::write(dir.join("group/orphan.rs"), "").unwrap();
    let found = std::panic::catch_unwind(|| files_not_included(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    let message = *found.expect_err("the orphan is found").downcast::<String>().unwrap();
    assert!(message.contains("orphan.rs") && !message.contains("listed.rs"), "{message}");
}

#[test]
fn every_test_file_is_included_by_the_integration_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for tests in [root.join("tests"), root.join("repro/tests")] {
        files_not_included(&tests);
    }
}

/// Fails on a `*.rs` file under `tests` (subdirectories too) that the
/// module tree rooted at `tests/integration.rs` does not reach: `mod m;`
/// reaches `m.rs` or `m/mod.rs` beside the file that declares it (for a
/// `mod.rs` or the root, in its directory), `#[path = "p"] mod m;` reaches
/// `p` relative to that directory.
fn files_not_included(tests: &Path) {
    let mut reached: BTreeSet<PathBuf> = BTreeSet::new();
    let mut pending = vec![tests.join("integration.rs")];
    while let Some(file) = pending.pop() {
        let Ok(canonical) = file.canonicalize() else { continue };
        if !reached.insert(canonical) {
            continue;
        }
        let dir = file.parent().expect("a directory").to_path_buf();
        let source = strip_comments(&std::fs::read_to_string(&file).unwrap_or_default());
        let mut pending_path: Option<String> = None;
        for line in source.lines().map(str::trim) {
            if let Some(value) = line.strip_prefix("#[path").and_then(|rest| rest.split('"').nth(1)) {
                pending_path = Some(value.to_string());
            } else if let Some(name) = line.strip_prefix("mod ").or_else(|| line.strip_prefix("pub mod ")).and_then(|rest| rest.strip_suffix(';')) {
                match pending_path.take() {
                    Some(path) => pending.push(dir.join(path)),
                    None => {
                        let name = name.trim();
                        let flat = dir.join(format!("{name}.rs"));
                        pending.push(if flat.exists() { flat } else { dir.join(name).join("mod.rs") });
                    }
                }
            }
        }
    }
    let mut missing = Vec::new();
    let mut dirs = vec![tests.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir).expect("a tests directory").map(|e| e.expect("an entry").path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !reached.contains(&path.canonicalize().expect("an existing file")) {
                missing.push(path.strip_prefix(tests).expect("under tests").display().to_string());
            }
        }
    }
    assert!(missing.is_empty(), "test files that {}/integration.rs does not reach (they would never run): {missing:?}", tests.display());
}

fn graph(edges: &[(&str, &str)]) -> Graph {
    let mut g = Graph::new();
    for (a, b) in edges {
        g.entry(a.to_string()).or_default().insert(b.to_string());
        g.entry(b.to_string()).or_default();
    }
    g
}

#[test]
fn the_cycle_finder_finds_cycles_and_only_cycles() {
    assert!(find_cycles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    let paths: Vec<Vec<String>> = find_cycles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])).into_iter().map(|c| c.path).collect();
    assert_eq!(paths, vec![vec!["a", "b", "c", "a"]]);
    let two = find_cycles(&graph(&[("x", "y"), ("y", "x"), ("p", "q"), ("q", "r"), ("r", "p"), ("y", "p")]));
    assert_eq!(two.len(), 2, "{two:?}");
    let pair = graph(&[("m::a", "m::b"), ("m::b", "m::a")]);
    assert!(disallowed_cycles(&pair, &[("m::a", "m::b")]).is_empty());
    assert_eq!(disallowed_cycles(&pair, &[("m::a", "m::c")]).len(), 1);
    let triangle = graph(&[("m::a", "m::b"), ("m::b", "m::a"), ("m::b", "m::c"), ("m::c", "m::a")]);
    assert_eq!(disallowed_cycles(&triangle, &[("m::a", "m::b")]).len(), 1, "an allowed pair does not hide a longer cycle");
}

#[test]
fn references_are_read_from_use_lines_groups_and_paths() {
    let text = strip_comments("use crate::{a::X, b, c::{d, e}};\n// use crate::f;\nlet s = \"// not a comment\"; crate::g::h();\nuse super::{x, y::Z};");
    let crate_paths = paths_after(&text, "crate::");
    let firsts: BTreeSet<&str> = crate_paths.iter().map(|p| p[0].as_str()).collect();
    assert_eq!(firsts, BTreeSet::from(["a", "b", "c", "g"]));
    assert!(crate_paths.contains(&vec!["c".to_string(), "d".to_string()]));
    let super_firsts: BTreeSet<String> = paths_after(&text, "super::").into_iter().map(|p| p[0].clone()).collect();
    assert_eq!(super_firsts, BTreeSet::from(["x".to_string(), "y".to_string()]));
}
