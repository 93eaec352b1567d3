//! Every relative link in the README and in `docs/` resolves to a file of the repository (and
//! a `#fragment` to one of its headings), so the front door never points at nothing.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `text` without code: fenced blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Every other backtick-delimited span is code.
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                out.push_str(part);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of `](...)` links in `text` (outside code).
fn links(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation dropped.
fn anchor(heading: &str) -> String {
    (heading.trim().to_lowercase().chars())
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    (text.lines())
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn readme_and_docs_links_resolve() {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") || link.contains(' ') {
                continue;
            }
            let (file, frag) = link.split_once('#').unwrap_or((&link, ""));
            let target = match file {
                "" => page.clone(),
                f => page.parent().unwrap().join(f),
            };
            if !target.exists() {
                broken.push(format!("{}: {link}", page.display()));
                continue;
            }
            if !frag.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let t = std::fs::read_to_string(&target).unwrap();
                if !anchors(&t).iter().any(|a| a == frag) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(
        n <= 150,
        "the README is the front door: {n} lines (at most ~150)"
    );
}
