//! Bulk jobs through the real engine on a tiny seeded Qwen2-VL: a folder of
//! 30 images (2 of them broken) gives the same answers as asking one image
//! at a time, the broken ones fail alone with the engine's code; a job
//! cancelled part-way resumes with only the rows it had not answered; the
//! table exports to CSV and JSON Lines and reads back the same.
use std::path::{Path, PathBuf};

use bulk::export::{read_csv, read_jsonl, write_csv, write_jsonl, Columns};
use bulk::{run, CancelToken, ImageSource, Item, JobSpec, Pass, Row, RowStatus, RunConfig};
use engine::batch::{ImageInput, SchedulerConfig};
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{LoadOptions, WeightFormat};
use engine::sample::SamplingParams;
use fixtures::{write_tiny_qwen2_vl, QwenVlVariant, TinyQwenVl};

const IMAGES: usize = 30;
/// Rows 7 and 19 are broken files.
const TRUNCATED: usize = 7;
const NOT_AN_IMAGE: usize = 19;
const MAX_TOKENS: usize = 8;

struct Fixture {
    _model: tempfile::TempDir,
    _images: tempfile::TempDir,
    engine: EngineHandle,
    paths: Vec<PathBuf>,
}

fn png(width: u32, height: u32, colour: [u8; 3]) -> Vec<u8> {
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        // a gradient over the colour, so no two images encode alike
        image::Rgb([colour[0].wrapping_add(x as u8), colour[1].wrapping_add(y as u8), colour[2]])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    image.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// 30 PNGs of different colours and sizes in a folder, two of them broken.
fn write_images(dir: &Path) -> Vec<PathBuf> {
    (0..IMAGES)
        .map(|i| {
            let path = dir.join(format!("image_{i:02}.png"));
            let colour = [(i * 37 % 256) as u8, (i * 91 % 256) as u8, (i * 13 % 256) as u8];
            let size = (56 + (i % 4) as u32 * 14, 56 + (i % 3) as u32 * 28);
            let bytes = match i {
                TRUNCATED => {
                    let whole = png(size.0, size.1, colour);
                    whole[..whole.len() / 2].to_vec()
                }
                NOT_AN_IMAGE => b"these are notes, not a picture".to_vec(),
                _ => png(size.0, size.1, colour),
            };
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

fn fixture(max_running: usize) -> Fixture {
    let model = tempfile::tempdir().unwrap();
    write_tiny_qwen2_vl(model.path(), &TinyQwenVl::new(QwenVlVariant::Qwen2Vl)).unwrap();
    let scheduler = SchedulerConfig { max_running, ..Default::default() };
    let engine = EngineHandle::start(
        model.path(),
        EngineConfig { load: LoadOptions { format: WeightFormat::AsStored }, scheduler },
    )
    .unwrap();
    let images = tempfile::tempdir().unwrap();
    let paths = write_images(images.path());
    Fixture { _model: model, _images: images, engine, paths }
}

/// The job: greedy, with EOS banned so random weights answer full length
/// (an empty answer would make every comparison trivially equal).
fn job(engine: &EngineHandle) -> JobSpec {
    let ban_eos =
        engine.model_info().eos_token_ids.iter().map(|&t| (t, f32::NEG_INFINITY)).collect();
    JobSpec {
        max_tokens: MAX_TOKENS,
        sampling: SamplingParams { logit_bias: ban_eos, ..Default::default() },
        ..JobSpec::new("What colour is this picture?")
    }
}

fn items(paths: &[PathBuf], indices: impl IntoIterator<Item = usize>) -> Vec<Item> {
    indices
        .into_iter()
        .map(|index| Item {
            index,
            name: paths[index].file_name().unwrap().to_string_lossy().into_owned(),
            source: ImageSource::Path(paths[index].clone()),
        })
        .collect()
}

/// Runs `items` and fills their rows of `table`; returns how many requests reached the engine.
async fn run_into(
    table: &mut [Row],
    f: &Fixture,
    items: Vec<Item>,
    config: RunConfig,
    cancel: &CancelToken,
    cancel_after: Option<usize>,
) -> usize {
    let job = job(&f.engine);
    let summary = run(&f.engine, &job, items, config, cancel, |update, progress| {
        assert_eq!(
            table[update.index].status,
            RowStatus::Pending,
            "row {} reported twice",
            update.index
        );
        table[update.index] = update.row.clone();
        if cancel_after.is_some_and(|n| progress.done >= n) {
            cancel.cancel();
        }
    })
    .await;
    summary.submitted
}

/// One image asked alone, waiting for its answer before the next.
async fn ask_alone(f: &Fixture, path: &Path) -> Completion {
    let request = job(&f.engine).request_for(ImageInput::from_bytes(std::fs::read(path).unwrap()));
    let mut stream = f.engine.submit(request);
    let mut reply = Completion::default();
    while let Some(event) = stream.recv().await {
        if reply.absorb(event) {
            break;
        }
    }
    reply
}

fn empty_table(paths: &[PathBuf]) -> Vec<Row> {
    paths.iter().map(|p| Row::pending(p.file_name().unwrap().to_string_lossy())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_images_answer_as_if_asked_one_by_one_and_broken_files_fail_alone() {
    let f = fixture(4);
    let mut table = empty_table(&f.paths);
    let submitted = run_into(
        &mut table,
        &f,
        items(&f.paths, 0..IMAGES),
        RunConfig::for_batch(4),
        &CancelToken::default(),
        None,
    )
    .await;
    assert_eq!(submitted, IMAGES, "every file, broken or not, is read and handed to the engine");

    for (i, row) in table.iter().enumerate() {
        if i == TRUNCATED || i == NOT_AN_IMAGE {
            assert_eq!(row.status, RowStatus::Failed, "row {i}");
            assert_eq!(
                row.error_code.as_deref(),
                Some("INVALID_IMAGE"),
                "row {i}: {:?}",
                row.error
            );
            assert!(
                row.error.as_deref().is_some_and(|m| m.contains("image")),
                "row {i}: {:?}",
                row.error
            );
            continue;
        }
        assert_eq!(row.status, RowStatus::Done, "row {i}: {:?}", row.error);
        let alone = ask_alone(&f, &f.paths[i]).await;
        assert!(alone.error.is_none(), "{:?}", alone.error);
        assert_eq!(
            row.answer, alone.content,
            "row {i}: batched answer differs from the answer alone"
        );
        assert_eq!(row.generated_tokens, MAX_TOKENS, "row {i}");
        assert_eq!(row.prompt_tokens, alone.stats.prompt_tokens, "row {i}");
        assert!(row.seconds > 0.0, "row {i}");
    }
    let answers: std::collections::HashSet<&str> =
        table.iter().map(|r| r.answer.as_str()).collect();
    assert!(answers.len() >= 5, "different images should get different answers: {answers:?}");

    // The table exports and reads back the same, both ways.
    let mut csv = Vec::new();
    write_csv(&table, &Columns::Answer, &mut csv).unwrap();
    assert_eq!(read_csv(&csv[..]).unwrap(), table);
    let mut jsonl = Vec::new();
    write_jsonl(&table, &mut jsonl).unwrap();
    assert_eq!(read_jsonl(&jsonl[..]).unwrap(), table);
    f.engine.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_resumes_with_only_the_rows_it_had_not_answered() {
    let f = fixture(2);
    let config = RunConfig::for_batch(2);
    let cancel = CancelToken::default();
    let mut table = empty_table(&f.paths);
    let first =
        run_into(&mut table, &f, items(&f.paths, 0..IMAGES), config, &cancel, Some(10)).await;
    let done_before: Vec<usize> =
        (0..IMAGES).filter(|&i| table[i].status == RowStatus::Done).collect();
    assert!(
        done_before.len() >= 10 && done_before.len() < 20,
        "cancel after 10 done: {} done",
        done_before.len()
    );
    assert!(first < IMAGES, "the cancel stopped submitting: {first} submitted");
    assert!(
        table.iter().any(|r| r.status == RowStatus::Pending),
        "rows never started stay pending"
    );
    let kept: Vec<Row> = done_before.iter().map(|&i| table[i].clone()).collect();

    // Resume: the unanswered rows only, each reported once (run_into checks).
    let rest: Vec<usize> = (0..IMAGES).filter(|&i| table[i].needs(Pass::Unfinished)).collect();
    let failed_before = table.iter().filter(|r| r.status == RowStatus::Failed).count();
    assert_eq!(rest.len() + done_before.len() + failed_before, IMAGES);
    for &i in &rest {
        table[i] = Row::pending(table[i].name.clone());
    }
    let resumed = run_into(
        &mut table,
        &f,
        items(&f.paths, rest.clone()),
        config,
        &CancelToken::default(),
        None,
    )
    .await;
    assert_eq!(resumed, rest.len(), "the resume submits exactly the unanswered rows");
    for (&i, row) in done_before.iter().zip(&kept) {
        assert_eq!(&table[i], row, "a done row is kept as it was");
    }
    let (done, failed) = bulk::row::counts(&table);
    assert_eq!((done, failed), (IMAGES - 2, 2));

    // Retry-failed runs the two broken files again, and they fail again.
    let failed_rows: Vec<usize> = (0..IMAGES).filter(|&i| table[i].needs(Pass::Failed)).collect();
    assert_eq!(failed_rows, vec![TRUNCATED, NOT_AN_IMAGE]);
    for &i in &failed_rows {
        table[i] = Row::pending(table[i].name.clone());
    }
    let retried = run_into(
        &mut table,
        &f,
        items(&f.paths, failed_rows),
        config,
        &CancelToken::default(),
        None,
    )
    .await;
    assert_eq!(retried, 2);
    assert_eq!(bulk::row::counts(&table), (IMAGES - 2, 2));
    f.engine.shutdown();
}

/// A PNG whose header claims a huge picture (the bytes of a small one, the
/// checksum fixed up): the engine's decode limits refuse it before allocating.
fn huge_png() -> Vec<u8> {
    let mut bytes = png(8, 8, [1, 2, 3]);
    // IHDR data sits at 16..29 (width, height, …), its CRC at 29..33
    bytes[16..20].copy_from_slice(&60_000u32.to_be_bytes());
    bytes[20..24].copy_from_slice(&60_000u32.to_be_bytes());
    let crc = crc32(&bytes[12..29]);
    bytes[29..33].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_a_missing_and_an_unreadable_image_fail_their_rows_and_the_job_goes_on() {
    let f = fixture(2);
    let good = std::fs::read(&f.paths[0]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let items = vec![
        Item { index: 0, name: "huge.png".into(), source: ImageSource::Bytes(huge_png().into()) },
        Item { index: 1, name: "good.png".into(), source: ImageSource::Bytes(good.into()) },
        Item {
            index: 2,
            name: "gone.png".into(),
            source: ImageSource::Path(dir.path().join("gone.png")),
        },
    ];
    let mut table =
        vec![Row::pending("huge.png"), Row::pending("good.png"), Row::pending("gone.png")];
    run_into(&mut table, &f, items, RunConfig::for_batch(2), &CancelToken::default(), None).await;
    assert_eq!(table[0].status, RowStatus::Failed);
    assert_eq!(table[0].error_code.as_deref(), Some("INVALID_IMAGE"), "{:?}", table[0].error);
    assert_eq!(table[1].status, RowStatus::Done, "{:?}", table[1].error);
    assert_eq!(table[2].error_code.as_deref(), Some("FILE_UNREADABLE"), "{:?}", table[2].error);
    f.engine.shutdown();
}

/// PDFs in a job (issue 34): each file is one row, read as its first page (this model sees)
/// and its text; batched, each answer is the one the same document gets alone, its prompt
/// holds the document's text, and an encrypted-looking or damaged file fails its row alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdfs_answer_as_if_asked_one_by_one_and_a_damaged_one_fails_alone() {
    let f = fixture(3);
    let pdf = |n: usize| {
        let pages = vec![
            format!("Invoice number {n}00{n}, dated {n} March."),
            format!("Total due: {n}4.{n}0 euros."),
        ];
        documents::testing::text_pdf(&pages, 612, 792)
    };
    let items: Vec<Item> = (0..3)
        .map(|i| Item {
            index: i,
            name: format!("invoice-{i}.pdf"),
            source: ImageSource::Bytes(pdf(i + 1).into()),
        })
        .chain(std::iter::once(Item {
            index: 3,
            name: "cut.pdf".into(),
            source: ImageSource::Bytes(b"%PDF-1.7\n1 0 obj << /Type /Cat".to_vec().into()),
        }))
        .collect();
    let mut table: Vec<Row> = items.iter().map(|i| Row::pending(&i.name)).collect();
    run_into(&mut table, &f, items, RunConfig::for_batch(3), &CancelToken::default(), None).await;
    for (i, row) in table.iter().enumerate().take(3) {
        assert_eq!(row.status, RowStatus::Done, "{:?}", row.error);
        let (page, text) = bulk_document(pdf(i + 1));
        assert!(text.contains(&format!("[page 2]\nTotal due: {}4.{}0 euros.", i + 1, i + 1)));
        let alone = ask_alone_request(&f, job(&f.engine).request_for_document(page, &text)).await;
        assert_eq!(row.answer, alone.content, "row {i}: batched equals alone");
        assert_eq!(row.prompt_tokens, alone.stats.prompt_tokens);
    }
    // the image's slots plus about thirty tokens of text: more than an image alone gets
    let image_only = ask_alone(&f, &f.paths[0]).await.stats.prompt_tokens;
    assert!(table[0].prompt_tokens > image_only + 10, "{} vs {image_only}", table[0].prompt_tokens);
    assert_eq!(table[3].status, RowStatus::Failed);
    assert_eq!(table[3].error_code.as_deref(), Some("DOCUMENT_DAMAGED"), "{:?}", table[3].error);
    f.engine.shutdown();
}

/// What the runner makes of a PDF for a model that sees: the first page at 1024 pixels and
/// the text with page markers (the same crate calls as bulk's document.rs).
fn bulk_document(bytes: Vec<u8>) -> (Option<ImageInput>, String) {
    let doc = documents::Document::open(bytes, &documents::Limits::default()).unwrap();
    let texts = doc.texts().unwrap();
    let png = doc.render_page(1, 1024).unwrap().to_png();
    let text = format!("Document (2 pages)\n\n{}", documents::page_marked_text(&texts));
    (Some(ImageInput::from_bytes(png)), text)
}

async fn ask_alone_request(f: &Fixture, request: engine::batch::Request) -> Completion {
    let mut stream = f.engine.submit(request);
    let mut reply = Completion::default();
    while let Some(event) = stream.recv().await {
        if reply.absorb(event) {
            break;
        }
    }
    reply
}
