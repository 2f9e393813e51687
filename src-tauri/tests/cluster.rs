//! Settings' "Split models across machines" through the app's commands: the
//! tiny Llama split over two local ranks, this process as rank 0 (the app)
//! and a copy of this test binary as rank 1 (what `vlm serve --distributed
//! hostfile.json --rank 1 --split pipeline` runs on another Mac:
//! `run_follower`). Split as a pipeline (the setting's choice: the tiny
//! Llama's heads divide by 2, so auto would have split it by tensor parallel).
//!
//! One test in its own binary: MLX keeps one group per process.
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use engine::distributed::env::{HOSTFILE_VAR, RANK_VAR};
use engine::distributed::{run_follower, GroupConfig, Hostfile, Split};
use engine::model::LoadOptions;
use serde_json::{json, Value};

use common::{harness, tiny_models, Harness};

const TEST: &str = "a_split_model_answers_as_one_process_and_a_lost_rank_is_reported";
/// Set in the follower's environment: the model folder it splits.
const FOLLOWER_MODEL: &str = "VLM_TEST_CLUSTER_FOLLOWER_MODEL";

fn ask(h: &Harness, text: &str) -> Value {
    let chat = h.new_chat();
    h.send(chat, text, &[]);
    h.finished_reply(chat)
}

#[test]
fn a_split_model_answers_as_one_process_and_a_lost_rank_is_reported() {
    if let Some(model) = std::env::var_os(FOLLOWER_MODEL) {
        // rank 1: the app's load options (the defaults) and the same split,
        // until rank 0 stops or this process is killed
        let group = GroupConfig {
            connect_timeout: Duration::from_secs(60),
            split: Split::Pipeline,
            ..GroupConfig::default()
        };
        let followed = run_follower(Path::new(&model), &LoadOptions::default(), &group);
        println!("RANK 1 done: {:?}", followed.map(|f| f.forwards));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    tiny_models(dir.path());
    let h = harness(dir.path());
    h.settings(|_| {});
    h.load_tiny();
    let alone = ask(&h, "Hello there, tiny model");
    assert_eq!(alone["status"], "complete", "{alone}");

    // off by default: no ranks
    let off = h.ok("cluster_status", json!({}));
    assert_eq!(
        (off["enabled"].clone(), off["state"].clone()),
        (json!(false), json!("not_joined")),
        "{off}"
    );

    // a list of hosts, rank 0 = this process; rank 1 reads its own copy of
    // the same ring, as another Mac would
    let ring = Hostfile::local(2).unwrap();
    let hosts: Vec<String> = ring.ranks.iter().map(|r| r[0].to_string()).collect();
    let bad = h
        .call(
            "save_settings",
            json!({"settings": {"cluster": {"enabled": true, "hosts": [hosts[0]]}}}),
        )
        .unwrap_err();
    assert!(bad["message"].as_str().unwrap().contains("at least 2 ranks"), "{bad}");
    h.settings(|s| {
        s["cluster"] = json!({"enabled": true, "hostfile": "", "hosts": hosts, "join_timeout_secs": 60, "split": "pipeline"});
    });
    let waiting = h.ok("cluster_status", json!({}));
    assert_eq!(waiting["state"], "not_joined", "{waiting}");
    assert_eq!(waiting["split"], "pipeline", "{waiting}");
    // what to run on the other Mac says the same split
    let command = waiting["ranks"][1]["command"].as_str().unwrap();
    assert!(command.ends_with("--rank 1 --split pipeline"), "{command}");
    assert_eq!(
        waiting["ranks"][1]["weights_bytes"],
        Value::Null,
        "no memory before the ring joins: {waiting}"
    );
    assert_eq!(waiting["ranks"].as_array().unwrap().len(), 2, "{waiting}");
    assert_eq!(waiting["ranks"][0]["this_mac"], true);
    assert_eq!(waiting["ranks"][1]["addresses"], json!([hosts[1]]));

    let follower_hostfile = dir.path().join("rank1-hostfile.json");
    ring.write(&follower_hostfile).unwrap();
    let model = dir.path().join("models").join("tiny");
    let mut follower = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(FOLLOWER_MODEL, &model)
        .env(RANK_VAR, "1")
        .env(HOSTFILE_VAR, &follower_hostfile)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();

    let loaded = h.call("load_model", json!({"id": "dir:tiny"}));
    if let Err(e) = &loaded {
        let _ = follower.kill();
        let _ = follower.wait();
        panic!("the split load failed: {e}");
    }
    let joined = h.ok("cluster_status", json!({}));
    assert_eq!(joined["state"], "joined", "{joined}");
    assert_eq!(joined["ranks"][1]["state"], "joined", "{joined}");
    assert_eq!(joined["model_id"], "dir:tiny");
    let written = dir.path().join("data").join(vlm_chat::cluster::HOSTFILE_NAME);
    assert_eq!(joined["hostfile_path"], json!(written.display().to_string()));
    assert_eq!(Hostfile::read(&written).unwrap(), ring);
    // the setting's split reached the group: this Mac holds a stage of layers
    let share =
        joined["ranks"][0]["share"].as_str().unwrap_or_else(|| panic!("no share: {joined}"));
    assert!(share.contains("pipeline rank 0 of 2"), "{share}");
    assert_eq!(joined["ranks"][1]["share"], Value::Null);
    // each rank's memory, gathered from both: each holds part of the weights
    let weights = |r: usize| {
        joined["ranks"][r]["weights_bytes"].as_u64().unwrap_or_else(|| panic!("rank {r}: {joined}"))
    };
    assert!(weights(0) > 0 && weights(1) > 0, "{joined}");
    assert!(joined["ranks"][1]["kv_bytes"].is_u64(), "{joined}");

    let split = ask(&h, "Hello there, tiny model");
    assert_eq!(split["status"], "complete", "{split}");
    assert_eq!(
        split["content"], alone["content"],
        "greedy: the split model answers as one process"
    );
    assert!(!split["content"].as_str().unwrap().is_empty());
    // the conversation's cache is on both ranks, each for its own layers
    // (the engine gathers the figures at most once a second)
    std::thread::sleep(Duration::from_millis(1100));
    let after = h.ok("cluster_status", json!({}));
    for r in 0..2 {
        assert!(after["ranks"][r]["kv_bytes"].as_u64().unwrap() > 0, "rank {r}: {after}");
        assert_eq!(after["ranks"][r]["weights_bytes"].as_u64(), Some(weights(r)), "{after}");
    }

    // rank 1 goes away: the status says lost before any message is sent
    // (gathering the ranks' memory finds the ring broken), and the next
    // message fails clearly
    follower.kill().unwrap();
    follower.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let lost = h.ok("cluster_status", json!({}));
    assert_eq!(lost["state"], "lost", "without a message: {lost}");
    let failed = ask(&h, "Are you still there?");
    assert_eq!(failed["status"], "error", "{failed}");
    assert_eq!(failed["error_code"], "DISTRIBUTED_ERROR", "{failed}");
    let lost = h.ok("cluster_status", json!({}));
    assert_eq!(lost["state"], "lost", "{lost}");
    assert_eq!(lost["ranks"][1]["state"], "lost", "{lost}");
    assert_eq!(lost["error"]["code"], "DISTRIBUTED_ERROR", "{lost}");
    assert_eq!(lost["restart_needed"], true, "{lost}");
    // the last figures gathered stay (the engine cannot gather any more)
    assert_eq!(lost["ranks"][1]["weights_bytes"].as_u64(), Some(weights(1)), "{lost}");

    // MLX keeps one group per process: a second split load says to restart
    let again = h.call("load_model", json!({"id": "dir:tiny"})).unwrap_err();
    assert_eq!(again["code"], vlm_chat::cluster::RESTART_NEEDED, "{again}");
    let message = again["message"].as_str().unwrap();
    assert!(
        message.contains("quit and reopen the app") && message.contains("--split pipeline"),
        "{again}"
    );
}
