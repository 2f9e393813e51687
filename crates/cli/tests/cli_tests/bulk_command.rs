//! `vlm bulk` as a user runs it: a folder of images (one of them a text file
//! named like a picture) on a tiny seeded Qwen2-VL gives a CSV with a row per
//! image; the same command again keeps the done rows and asks only the
//! failed one; usage errors exit non-zero before any model loads. A file
//! named like a spreadsheet formula is quoted in the CSV and read back as it
//! was; a FIFO is refused when named and listed as skipped in a folder.
use std::path::Path;
use std::process::{Command, Output};

use bulk::RowStatus;
use fixtures::{write_tiny_qwen2_vl, QwenVlVariant, TinyQwenVl};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../engine/tests/fixtures/images");

/// Run in `cwd`, so that an image named relative to it keeps a name that
/// starts with its first character (`=…`).
fn vlm_bulk_in(cwd: &Path, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_vlm"))
        .current_dir(cwd)
        .arg("bulk")
        .args(args)
        .env("OPENBLAS_NUM_THREADS", "1")
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    output
}

fn vlm_bulk(args: &[&str]) -> Output {
    vlm_bulk_in(Path::new("/"), args)
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// A picture whose name a spreadsheet would run as a formula.
const FORMULA_NAME: &str = "=HYPERLINK(\"evil.example\",\"x\").png";

fn images(dir: &Path) {
    for name in ["pre_photo.jpg", "qwen_parity_182x126.png", "pre_lossy.webp", "pre_gray.jpg"] {
        std::fs::copy(Path::new(FIXTURES).join(name), dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("z_notes.png"), "not a picture").unwrap();
    std::fs::write(dir.join("readme.txt"), "not in the job: a folder is read for image files")
        .unwrap();
    // skipped, and said so: reading a FIFO would hang the job; a link to a text file is no image
    mkfifo(&dir.join("pipe.png"));
    std::os::unix::fs::symlink(dir.join("readme.txt"), dir.join("link.png")).unwrap();
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
        FORMULA_NAME,
    ];
    std::fs::copy(Path::new(FIXTURES).join("pre_photo.jpg"), work.path().join(FORMULA_NAME))
        .unwrap();

    let first = vlm_bulk_in(work.path(), &args);
    assert!(first.status.success(), "a failed row does not fail the command");
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(stderr.contains("5 done, 1 failed"), "{stderr}");
    assert!(stderr.contains("pipe.png: a FIFO (named pipe), not an image file"), "{stderr}");
    assert!(
        stderr.contains("link.png: a link to")
            && stderr.contains("readme.txt, which is not named like an image"),
        "{stderr}"
    );
    let rows = bulk::export::read_file(&out).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.rsplit('/').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "pre_gray.jpg",
            "pre_lossy.webp",
            "pre_photo.jpg",
            "qwen_parity_182x126.png",
            "z_notes.png",
            FORMULA_NAME
        ]
    );
    assert_eq!(rows[4].status, RowStatus::Failed);
    assert_eq!(rows[4].error_code.as_deref(), Some("INVALID_IMAGE"));
    assert!(rows
        .iter()
        .enumerate()
        .all(|(i, r)| i == 4 || (r.status == RowStatus::Done && r.prompt_tokens > 0)));
    let csv = std::fs::read_to_string(&out).unwrap();
    assert!(csv.contains("\"'=HYPERLINK(\"\"evil.example\"\","), "the formula is quoted: {csv}");

    let again = vlm_bulk_in(work.path(), &args);
    assert!(again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("already holds 5 of these 6 images' answers"),
        "the quoted name reads back: {stderr}"
    );
    assert!(stderr.contains("(1 asked this run)"), "{stderr}");
    let rows_again = bulk::export::read_file(&out).unwrap();
    assert_eq!(rows_again[..4], rows[..4], "done rows are kept as they were (their timings too)");
    assert_eq!(rows_again[5], rows[5]);
}

#[test]
fn usage_errors_exit_non_zero_before_loading_a_model() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("r.csv");
    let out = out.to_str().unwrap();
    let missing =
        vlm_bulk(&["--model", "/no/model", "--prompt", "p", "--out", out, "/no/such/folder"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/no/such/folder does not exist"));
    let bad_columns = vlm_bulk(&[
        "--model",
        "/no/model",
        "--prompt",
        "p",
        "--columns",
        " , ",
        "--out",
        out,
        FIXTURES,
    ]);
    assert!(!bad_columns.status.success());
    assert!(String::from_utf8_lossy(&bad_columns.stderr).contains("Name at least one field"));
    // a named FIFO is refused by name at once: reading it would block for ever
    let fifo = work.path().join("pipe.png");
    mkfifo(&fifo);
    let named_fifo =
        vlm_bulk(&["--model", "/no/model", "--prompt", "p", "--out", out, fifo.to_str().unwrap()]);
    assert!(!named_fifo.status.success());
    assert!(String::from_utf8_lossy(&named_fifo.stderr)
        .contains("pipe.png is a FIFO (named pipe), not an image file"));
    assert!(!Path::new(out).exists());
}
