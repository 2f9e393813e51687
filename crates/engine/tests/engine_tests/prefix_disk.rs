//! The prefix cache's disk tier, on tiny seeded checkpoints of each cache
//! kind (full attention: Qwen3; sliding windows: Gemma 3; recurrent states:
//! Qwen3.5), stepping the scheduler by hand. A scheduler dropped and a new
//! one started on the same folder is an app restart: the chat's next message
//! resumes from the file, prefills only what is new, and answers exactly as a
//! cold prefill does. Damaged, cut and foreign files are deleted, never
//! trusted; the folder stays within its budget.
use std::path::{Path, PathBuf};

use engine::batch::SchedulerConfig;
use engine::cache::prefix_disk::{file, DiskPrefixConfig};
use engine::cache::KvQuantization;
use fixtures::TinyFamily;

use crate::common;

use common::{
    family_checkpoint as checkpoint, greedy_request as request, salted_prompt as prompt,
    single_stream_text as cold, Driver,
};

fn config(folder: &Path, capacity_bytes: u64) -> SchedulerConfig {
    SchedulerConfig {
        prefix_disk: Some(DiskPrefixConfig { folder: folder.to_path_buf(), capacity_bytes }),
        ..SchedulerConfig::default()
    }
}

/// Every cache file under `folder` (one subfolder per model).
fn files(folder: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for model in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(model.path()).unwrap().flatten() {
            if f.path().extension().is_some_and(|x| x == "safetensors") {
                all.push(f.path());
            }
        }
    }
    all.sort();
    all
}

/// The first turn: `first` answered, then the engine goes away (its writer
/// finishes the file first).
fn first_session(dir: &Path, config: SchedulerConfig, first: &[u32]) {
    let mut driver = Driver::new(dir, config);
    let row = driver.submit(request(first, 10));
    driver.run_to_end();
    assert_eq!(driver.completion(row).stats.cached_prompt_tokens, 0);
}

#[test]
fn a_chat_continued_after_a_restart_prefills_only_its_new_message() {
    // (family, prompt tokens a restart must reuse at least)
    for (family, first_len) in
        [(TinyFamily::Qwen3, 60), (TinyFamily::Gemma3, 60), (TinyFamily::Qwen35, 60)]
    {
        let dir = checkpoint(family, 11);
        let folder = tempfile::tempdir().unwrap();
        let first = prompt(first_len, 1);
        first_session(dir.path(), config(folder.path(), 64 << 20), &first);
        assert!(!files(folder.path()).is_empty(), "{family:?}: the first turn was written to disk");

        // Restart: a new scheduler on the same folder.
        let mut driver = Driver::new(dir.path(), config(folder.path(), 64 << 20));
        let next = [first.clone(), prompt(9, 2), prompt(14, 3)].concat();
        let row = driver.submit(request(&next, 8));
        driver.run_to_end();
        let c = driver.completion(row);
        assert!(
            c.stats.cached_prompt_tokens >= first.len(),
            "{family:?}: reused {}",
            c.stats.cached_prompt_tokens
        );
        assert_eq!(
            c.stats.cached_from_disk_tokens, c.stats.cached_prompt_tokens,
            "{family:?}: from disk"
        );
        if family == TinyFamily::Qwen35 {
            // a recurrent state resumes only at its prompt checkpoint
            assert_eq!(
                c.stats.prompt_tokens - c.stats.cached_prompt_tokens,
                23,
                "only the new message is prefilled"
            );
        }
        assert_eq!(
            c.content,
            cold(dir.path(), &next, 8),
            "{family:?}: the same greedy answer as a cold prefill"
        );
        let disk = driver.scheduler.stats().prefix_cache.disk.expect("the disk tier is on");
        assert_eq!(disk.hits, 1, "{family:?}");
        assert_eq!(disk.rejected_files, 0, "{family:?}");

        // The loaded prefix stays in memory: a third request does not read the file again.
        let row = driver.submit(request(&next, 4));
        driver.run_to_end();
        assert_eq!(
            driver.completion(row).stats.cached_from_disk_tokens,
            0,
            "{family:?}: served from memory"
        );
        assert!(driver.completion(row).stats.cached_prompt_tokens >= first.len());
    }
}

/// With KV quantization on, the restored prefix answers exactly as the
/// same prefix reused from memory does (both keep the float row).
#[test]
fn a_quantized_cache_resumes_from_disk_as_from_memory() {
    let dir = checkpoint(TinyFamily::Qwen3, 12);
    let folder = tempfile::tempdir().unwrap();
    let quantized = |folder: &Path| SchedulerConfig {
        kv_quantization: Some(KvQuantization { bits: 8, group_size: 32, start: 0 }),
        ..config(folder, 64 << 20)
    };
    let first = prompt(70, 4);
    let next = [first.clone(), prompt(20, 5)].concat();
    // From memory: one scheduler answers both turns (no disk tier).
    let mut memory =
        Driver::new(dir.path(), SchedulerConfig { prefix_disk: None, ..quantized(folder.path()) });
    memory.submit(request(&first, 10));
    memory.run_to_end();
    let row = memory.submit(request(&next, 10));
    memory.run_to_end();
    let from_memory = memory.completion(row).clone();
    assert!(from_memory.stats.cached_prompt_tokens >= first.len());
    drop(memory);

    // From disk: the first turn, a restart, the second turn.
    first_session(dir.path(), quantized(folder.path()), &first);
    let mut restarted = Driver::new(dir.path(), quantized(folder.path()));
    let row = restarted.submit(request(&next, 10));
    while restarted.scheduler.stats().running == 0 {
        restarted.step();
    }
    assert!(
        restarted.scheduler.stats().kv_quantized_layers > 0,
        "the batch stores its KV quantized"
    );
    restarted.run_to_end();
    let from_disk = restarted.completion(row);
    assert_eq!(from_disk.stats.cached_from_disk_tokens, from_memory.stats.cached_prompt_tokens);
    assert_eq!(from_disk.content, from_memory.content);
}

/// A way of damaging a saved cache file: its description, and the damage done.
type Damage = (&'static str, fn(&Path));

#[test]
fn cut_damaged_and_foreign_files_are_deleted_and_the_prompt_prefilled_in_full() {
    let dir = checkpoint(TinyFamily::Qwen3, 13);
    let first = prompt(50, 6);
    let next = [first.clone(), prompt(10, 7)].concat();
    let want = cold(dir.path(), &next, 6);
    let damage: [Damage; 5] = [
        ("cut in half", |f| {
            let len = std::fs::metadata(f).unwrap().len();
            std::fs::OpenOptions::new().write(true).open(f).unwrap().set_len(len / 2).unwrap();
        }),
        ("one byte flipped in its data", |f| {
            let mut bytes = std::fs::read(f).unwrap();
            let last = bytes.len() - 5;
            bytes[last] ^= 0x40;
            std::fs::write(f, bytes).unwrap();
        }),
        ("not a cache file at all", |f| std::fs::write(f, b"hello").unwrap()),
        // Passes its checksum (written by our own encoder) but holds other
        // head counts and sizes than the model's: once, every later request
        // sharing its opening tokens failed with a shape error.
        ("written for other shapes, its checksum matching", |f| {
            let header = file::read_header(f).unwrap();
            let (key, mut contents) =
                file::decode(&std::fs::read(f).unwrap(), &header.model).unwrap();
            let reshape = |a: &mut mlx_rs::Array| {
                let s = a.shape().to_vec();
                *a = a.reshape(&[s[0], s[1] * 2, s[2], s[3] / 2]).unwrap();
            };
            for (k, v) in contents.groups.iter_mut().flat_map(|g| g.layers.iter_mut().flatten()) {
                reshape(k);
                reshape(v);
            }
            file::encode(&header.model, &key, &contents).unwrap().write(f).unwrap();
        }),
        // A FIFO blocks whoever opens it until a writer comes: the engine
        // once hung on one for good (SIGTERM could not stop it).
        ("a FIFO under its name", |f| {
            std::fs::remove_file(f).unwrap();
            assert!(std::process::Command::new("mkfifo").arg(f).status().unwrap().success());
        }),
    ];
    for (what, damage) in damage {
        let folder = tempfile::tempdir().unwrap();
        first_session(dir.path(), config(folder.path(), 64 << 20), &first);
        let written = files(folder.path());
        assert_eq!(written.len(), 1, "{what}");
        damage(&written[0]);

        let mut driver = Driver::new(dir.path(), config(folder.path(), 64 << 20));
        let row = driver.submit(request(&next, 6));
        driver.run_to_end();
        let c = driver.completion(row);
        assert_eq!(c.stats.cached_prompt_tokens, 0, "{what}: nothing reused");
        assert_eq!(c.content, want, "{what}: the answer is still right");
        assert!(!written[0].exists(), "{what}: the file was deleted");
        assert_eq!(driver.scheduler.stats().prefix_cache.disk.unwrap().rejected_files, 1, "{what}");
    }
}

/// Two checkpoints with the same config and file sizes (two fine-tunes of
/// one base) share the folder but never each other's files.
#[test]
fn another_model_never_reads_these_files() {
    let a = checkpoint(TinyFamily::Qwen3, 14);
    let b = checkpoint(TinyFamily::Qwen3, 15);
    let folder = tempfile::tempdir().unwrap();
    let first = prompt(50, 8);
    first_session(a.path(), config(folder.path(), 64 << 20), &first);
    let next = [first.clone(), prompt(10, 9)].concat();
    let mut driver = Driver::new(b.path(), config(folder.path(), 64 << 20));
    let row = driver.submit(request(&next, 6));
    driver.run_to_end();
    assert_eq!(driver.completion(row).stats.cached_prompt_tokens, 0);
    assert_eq!(driver.completion(row).content, cold(b.path(), &next, 6));
    drop(driver);
    let models: Vec<_> = std::fs::read_dir(folder.path()).unwrap().flatten().collect();
    assert_eq!(models.len(), 2, "one subfolder per model");
    assert_eq!(files(folder.path()).len(), 2, "a's file is still there, and b's own");
}

#[test]
fn the_folder_stays_within_its_budget_dropping_the_least_recently_used() {
    let dir = checkpoint(TinyFamily::Qwen3, 16);
    let folder = tempfile::tempdir().unwrap();
    // Measure one file, then allow about two and a half.
    first_session(dir.path(), config(folder.path(), 64 << 20), &prompt(60, 20));
    let one = std::fs::metadata(&files(folder.path())[0]).unwrap().len();
    let capacity = one * 5 / 2;
    let mut driver = Driver::new(dir.path(), config(folder.path(), capacity));
    for i in 0..5 {
        driver.submit(request(&prompt(60, 21 + i), 10));
        driver.run_to_end();
    }
    drop(driver);
    let left = files(folder.path());
    let total: u64 = left.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
    assert!(total <= capacity, "{total} bytes on disk, budget {capacity}");
    assert_eq!(left.len(), 2);
    // The newest conversation is among the kept files: it resumes.
    let mut driver = Driver::new(dir.path(), config(folder.path(), capacity));
    let next = [prompt(60, 25), prompt(5, 30)].concat();
    let row = driver.submit(request(&next, 4));
    driver.run_to_end();
    assert!(driver.completion(row).stats.cached_from_disk_tokens >= 60);
}
