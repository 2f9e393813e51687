//! The app's commands are listed three times: registered in lib.rs, made
//! permissions in build.rs, granted to the window in capabilities/default.json.
//! A command missing from the last two is refused to the UI at run time;
//! this keeps the lists the same, and the grant free of broad permissions.
use std::collections::BTreeSet;

fn quoted_names_after(source: &str, marker: &str, end: &str) -> BTreeSet<String> {
    let start = source.find(marker).unwrap_or_else(|| panic!("{marker} not found")) + marker.len();
    let body = &source[start..start + source[start..].find(end).unwrap()];
    body.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn every_registered_command_is_a_permission_and_granted() {
    let lib = include_str!("../../src/lib.rs");
    let registered: BTreeSet<String> = {
        let start = lib.find("generate_handler![").unwrap();
        let body = &lib[start..start + lib[start..].find(']').unwrap()];
        body.split("commands::")
            .skip(1)
            .map(|c| c.split("::").nth(1).unwrap().trim_end_matches([',', ' ', '\n']).to_string())
            .collect()
    };
    assert!(registered.len() > 40, "{registered:?}");
    let manifest = quoted_names_after(
        include_str!("../../build.rs"),
        "const APP_COMMANDS: &[&str] = &[",
        "];",
    );
    assert_eq!(manifest, registered, "build.rs APP_COMMANDS");

    let capability: serde_json::Value =
        serde_json::from_str(include_str!("../../capabilities/default.json")).unwrap();
    let granted: BTreeSet<String> = capability["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    let commands: BTreeSet<String> = granted
        .iter()
        .filter_map(|p| p.strip_prefix("allow-"))
        .map(|c| c.replace('-', "_"))
        .collect();
    assert_eq!(commands, registered, "capabilities/default.json grants");
    // beyond the app's commands: listening to events and the open and save
    // dialogs (a chat is exported where the user says), no more
    let others: Vec<&String> = granted.iter().filter(|p| !p.starts_with("allow-")).collect();
    assert_eq!(
        others,
        [
            "core:event:allow-listen",
            "core:event:allow-unlisten",
            "dialog:allow-open",
            "dialog:allow-save"
        ]
    );
}
