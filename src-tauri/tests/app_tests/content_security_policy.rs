//! The web view's Content-Security-Policy (tauri.conf.json): scripts only
//! from the app's own files (Tauri adds hashes for its own init scripts),
//! no inline or eval'd script, images only from the attachment protocol and
//! data:/blob: URLs, connections only to the IPC. Model output is rendered
//! in this page: these are what a script slipped into it could not do.
use std::collections::BTreeMap;

fn policy() -> BTreeMap<String, Vec<String>> {
    let conf: serde_json::Value =
        serde_json::from_str(include_str!("../../tauri.conf.json")).unwrap();
    let csp = conf["app"]["security"]["csp"].as_object().expect("a CSP as an object of directives");
    csp.iter()
        .map(|(k, v)| {
            (k.clone(), v.as_str().unwrap().split_whitespace().map(str::to_string).collect())
        })
        .collect()
}

#[test]
fn scripts_images_and_connections_are_narrowed() {
    let csp = policy();
    let sources = |d: &str| csp.get(d).unwrap_or_else(|| panic!("{d} is set")).clone();
    assert_eq!(sources("script-src"), ["'self'"]);
    assert_eq!(sources("img-src"), ["att:", "http://att.localhost", "data:", "blob:"]);
    assert_eq!(sources("connect-src"), ["ipc:", "http://ipc.localhost"]);
    assert_eq!(sources("default-src"), ["'self'"]);
    assert_eq!(sources("object-src"), ["'none'"]);
    assert_eq!(sources("base-uri"), ["'none'"]);
    assert_eq!(sources("form-action"), ["'none'"]);
    // styles too come only from the app's stylesheet (the page sets sizes through the CSSOM, which CSP allows)
    assert_eq!(sources("style-src"), ["'self'"]);
    // fonts (KaTeX's, bundled by Vite as files, never inlined as data: URLs)
    // come from the app itself: font-src is left to default-src 'self'
    assert!(!csp.contains_key("font-src"), "font-src: {:?}", csp.get("font-src"));
    for (directive, list) in &csp {
        for bad in ["'unsafe-inline'", "'unsafe-eval'", "*", "http:", "https:"] {
            assert!(!list.iter().any(|s| s == bad), "{directive} allows {bad}");
        }
    }
}
