//! `vlm bulk` as a user runs it: a folder of images (one of them a text file
//! named like a picture) on a tiny seeded Qwen2-VL gives a CSV with a row per
//! image; the same command again keeps the done rows and asks only the
//! failed one; usage errors exit non-zero before any model loads.
use std::path::Path;
use std::process::{Command, Output};

use bulk::RowStatus;
use engine::testing::{write_tiny_qwen2_vl, QwenVlVariant, TinyQwenVl};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../engine/tests/fixtures/images");

fn vlm_bulk(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_vlm"))
        .arg("bulk")
        .args(args)
        .env("OPENBLAS_NUM_THREADS", "1")
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    output
}

fn images(dir: &Path) {
    for name in ["pre_photo.jpg", "qwen_parity_182x126.png", "pre_lossy.webp", "pre_gray.jpg"] {
        std::fs::copy(Path::new(FIXTURES).join(name), dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("z_notes.png"), "not a picture").unwrap();
    std::fs::write(dir.join("readme.txt"), "not in the job: a folder is read for image files").unwrap();
}

#[test]
fn a_folder_becomes_a_table_and_a_second_run_asks_only_what_is_missing() {
    let model = tempfile::tempdir().unwrap();
    write_tiny_qwen2_vl(model.path(), &TinyQwenVl::new(QwenVlVariant::Qwen2Vl)).unwrap();
    let work = tempfile::tempdir().unwrap();
    let folder = work.path().join("photos");
    std::fs::create_dir(&folder).unwrap();
    images(&folder);
    let out = work.path().join("results.csv");
    let args = [
        "--model",
        model.path().to_str().unwrap(),
        "--prompt",
        "What is in this picture?",
        "--max-tokens",
        "4",
        "--out",
        out.to_str().unwrap(),
        folder.to_str().unwrap(),
    ];

    let first = vlm_bulk(&args);
    assert!(first.status.success(), "a failed row does not fail the command");
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(stderr.contains("4 done, 1 failed"), "{stderr}");
    let rows = bulk::export::read_file(&out).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.rsplit('/').next().unwrap()).collect();
    assert_eq!(names, ["pre_gray.jpg", "pre_lossy.webp", "pre_photo.jpg", "qwen_parity_182x126.png", "z_notes.png"]);
    assert_eq!(rows[4].status, RowStatus::Failed);
    assert_eq!(rows[4].error_code.as_deref(), Some("INVALID_IMAGE"));
    assert!(rows[..4].iter().all(|r| r.status == RowStatus::Done && r.prompt_tokens > 0));

    let again = vlm_bulk(&args);
    assert!(again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("already holds 4 of these 5 images' answers"), "{stderr}");
    assert!(stderr.contains("(1 asked this run)"), "{stderr}");
    let rows_again = bulk::export::read_file(&out).unwrap();
    assert_eq!(rows_again[..4], rows[..4], "done rows are kept as they were (their timings too)");
}

#[test]
fn usage_errors_exit_non_zero_before_loading_a_model() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("r.csv");
    let out = out.to_str().unwrap();
    let missing = vlm_bulk(&["--model", "/no/model", "--prompt", "p", "--out", out, "/no/such/folder"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/no/such/folder does not exist"));
    let bad_columns = vlm_bulk(&["--model", "/no/model", "--prompt", "p", "--columns", " , ", "--out", out, FIXTURES]);
    assert!(!bad_columns.status.success());
    assert!(String::from_utf8_lossy(&bad_columns.stderr).contains("Name at least one field"));
    assert!(!Path::new(out).exists());
}
