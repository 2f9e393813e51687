//! The fake Hugging Face Hub of `hub::testing` as a process, for the e2e
//! suite (ui/e2e/hub_search.test.mjs): it serves a tiny random Llama that the
//! engine runs as `test-org/tiny-llama` and a Mamba repository the engine
//! lacks as `someone/mamba-130m`, prints its endpoint (`http://127.0.0.1:PORT`)
//! on the first line, and stops when its standard input closes.
use std::io::Read;

use fixtures::{write_tiny_llama, TinyLlama};
use hub::testing::{FakeFile, FakeHub, FakeRepo};
use serde_json::json;

fn main() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let model = dir.path().join("tiny-llama");
    write_tiny_llama(&model, &TinyLlama::default()).expect("the tiny model");
    let mut files = vec![];
    for entry in std::fs::read_dir(&model).expect("the tiny model's folder").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let content = std::fs::read(entry.path()).expect("a file of the tiny model");
        files.push(if name.ends_with(".safetensors") {
            FakeFile::lfs(&name, content)
        } else {
            FakeFile::new(&name, content)
        });
    }
    let mut tiny = FakeRepo::new(files);
    tiny.info = json!({"downloads": 900, "likes": 12, "tags": ["mlx", "license:mit"], "config": {"model_type": "llama"}});
    let mut mamba = FakeRepo::new(vec![
        FakeFile::new("config.json", json!({"model_type": "mamba"}).to_string()),
        FakeFile::lfs("model.safetensors", vec![7u8; 10_000]),
    ]);
    mamba.info = json!({"downloads": 100, "tags": ["mlx"], "config": {"model_type": "mamba"}});

    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let hub = runtime.block_on(FakeHub::start());
    hub.add_repo("test-org/tiny-llama", tiny);
    hub.add_repo("someone/mamba-130m", mamba);
    println!("{}", hub.endpoint);
    // serve until the test closes our stdin (or exits)
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
