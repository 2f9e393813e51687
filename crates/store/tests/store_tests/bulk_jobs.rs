//! Bulk jobs in the store: created with their images in one go, rows filled
//! as answers arrive, listed with counts, a running job found interrupted
//! after a restart with its done rows kept, retry resets only failed rows,
//! and a job's images outlive orphan cleanup until the job is deleted.
use std::path::Path;

use store::{BulkJobStatus, BulkRowResult, BulkRowStatus, NewBulkImage, NewBulkJob, Store};

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const PNG_2: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x02\0\0\0\x02\x08\x06\0\0\0\x1f\x15\xc4\x89";

async fn open(dir: &Path) -> Store {
    Store::open(dir.join("chats.db")).await.unwrap()
}

/// A job over two stored images and one file that was refused when dropped.
async fn new_job(store: &Store) -> store::BulkJob {
    let a = store.add_attachment(PNG).await.unwrap();
    let b = store.add_attachment(PNG_2).await.unwrap();
    store
        .create_bulk_job(&NewBulkJob {
            prompt: "  What colour?  ".into(),
            answer_format: Some(serde_json::json!({"kind": "fields", "names": ["colour"]})),
            max_tokens: 64,
            images: vec![
                NewBulkImage { name: "a.png".into(), image: Ok(a.sha256) },
                NewBulkImage {
                    name: "notes.txt".into(),
                    image: Err(("NOT_AN_IMAGE".into(), "not an image".into())),
                },
                NewBulkImage { name: "b.png".into(), image: Ok(b.sha256) },
            ],
        })
        .await
        .unwrap()
}

fn done(answer: &str) -> BulkRowResult {
    BulkRowResult {
        status: BulkRowStatus::Done,
        answer: answer.into(),
        fields: Some(serde_json::json!({"colour": answer})),
        prompt_tokens: 40,
        generated_tokens: 5,
        seconds: 0.25,
        ..BulkRowResult::pending()
    }
}

#[tokio::test]
async fn a_job_is_created_with_its_rows_and_fills_as_answers_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let job = new_job(&store).await;
    assert_eq!(
        (job.prompt.as_str(), job.status, job.total, job.done, job.failed),
        ("What colour?", BulkJobStatus::Ready, 3, 0, 1)
    );
    assert_eq!(job.answer_format, Some(serde_json::json!({"kind": "fields", "names": ["colour"]})));

    let rows = store.bulk_rows(job.id).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["a.png", "notes.txt", "b.png"]
    );
    assert!(rows[0].image.as_ref().unwrap().path.is_file(), "the row's image is the stored file");
    assert_eq!(rows[1].image, None);
    assert_eq!(
        (rows[1].result.status, rows[1].result.error_code.as_deref()),
        (BulkRowStatus::Failed, Some("NOT_AN_IMAGE"))
    );

    store.set_bulk_job_status(job.id, BulkJobStatus::Running, Some("tiny-qwen2-vl")).await.unwrap();
    store.save_bulk_row(job.id, 2, &done("red")).await.unwrap();
    let rows = store.bulk_rows(job.id).await.unwrap();
    assert_eq!(rows[2].result, done("red"));
    assert_eq!(rows[0].result.status, BulkRowStatus::Pending);
    let listed = store.list_bulk_jobs().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].status, listed[0].done, listed[0].model.as_deref()),
        (BulkJobStatus::Running, 1, Some("tiny-qwen2-vl"))
    );

    assert_eq!(
        store.save_bulk_row(job.id, 9, &done("x")).await.unwrap_err().code(),
        "INVALID_INPUT"
    );
    assert_eq!(
        store.get_bulk_job(store::BulkJobId(99)).await.unwrap_err().code(),
        "BULK_JOB_NOT_FOUND"
    );
    let refused = store
        .create_bulk_job(&NewBulkJob {
            prompt: " ".into(),
            answer_format: None,
            max_tokens: 8,
            images: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "INVALID_INPUT");
    let unknown_image = NewBulkImage { name: "x.png".into(), image: Ok("0".repeat(64)) };
    let refused = store
        .create_bulk_job(&NewBulkJob {
            prompt: "p".into(),
            answer_format: None,
            max_tokens: 8,
            images: vec![unknown_image],
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "ATTACHMENT_NOT_FOUND");
    assert_eq!(
        store.list_bulk_jobs().await.unwrap().len(),
        1,
        "a refused job leaves nothing behind"
    );
}

#[tokio::test]
async fn a_job_running_when_the_app_stopped_is_interrupted_after_a_restart_with_its_answers_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let job = new_job(&store).await;
    let finished = new_job(&store).await;
    store.set_bulk_job_status(job.id, BulkJobStatus::Running, None).await.unwrap();
    store.set_bulk_job_status(finished.id, BulkJobStatus::Finished, None).await.unwrap();
    store.save_bulk_row(job.id, 0, &done("blue")).await.unwrap();
    store.close().await; // no orderly stop: the job is still 'running'

    let store = open(dir.path()).await;
    store.cleanup_orphans().await.unwrap();
    let jobs = store.list_bulk_jobs().await.unwrap();
    assert_eq!(
        jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [finished.id, job.id],
        "newest first"
    );
    assert_eq!(store.get_bulk_job(job.id).await.unwrap().status, BulkJobStatus::Interrupted);
    assert_eq!(store.get_bulk_job(finished.id).await.unwrap().status, BulkJobStatus::Finished);
    let rows = store.bulk_rows(job.id).await.unwrap();
    assert_eq!(rows[0].result, done("blue"));
    assert!(rows[2].image.as_ref().unwrap().path.is_file(), "orphan cleanup keeps a job's images");
    assert_eq!(
        rows[2].result.status,
        BulkRowStatus::Pending,
        "what was not answered is pending, to resume"
    );
}

#[tokio::test]
async fn retry_resets_only_failed_rows_that_have_an_image_and_delete_removes_the_images() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let job = new_job(&store).await;
    store.save_bulk_row(job.id, 0, &done("green")).await.unwrap();
    let failed = BulkRowResult {
        status: BulkRowStatus::Failed,
        error_code: Some("INVALID_IMAGE".into()),
        error: Some("cannot decode".into()),
        ..BulkRowResult::pending()
    };
    store.save_bulk_row(job.id, 2, &failed).await.unwrap();
    assert_eq!(store.get_bulk_job(job.id).await.unwrap().failed, 2);

    assert_eq!(store.reset_bulk_rows(job.id, &[BulkRowStatus::Failed]).await.unwrap(), 1);
    let rows = store.bulk_rows(job.id).await.unwrap();
    assert_eq!(rows[0].result.status, BulkRowStatus::Done, "done rows are kept");
    assert_eq!(
        rows[1].result.error_code.as_deref(),
        Some("NOT_AN_IMAGE"),
        "a refused file stays failed"
    );
    assert_eq!(rows[2].result, BulkRowResult::pending());

    let image = rows[0].image.clone().unwrap();
    store.delete_bulk_job(job.id).await.unwrap();
    assert!(!image.path.exists(), "the job's images went with it");
    assert_eq!(store.delete_bulk_job(job.id).await.unwrap_err().code(), "BULK_JOB_NOT_FOUND");
    assert!(store.list_bulk_jobs().await.unwrap().is_empty());
}
