//! What a job asks of every image, the engine request that asks it, and the
//! row an answer makes.
use engine::batch::{FinishReason, ImageInput, Prompt, Request};
use engine::handle::Completion;
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};

use crate::answer_format::AnswerFormat;
use crate::row::{round_ms, Row, RowStatus};

/// The default answer length: a sentence or a small JSON object.
pub const DEFAULT_MAX_TOKENS: usize = 256;

#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Asked about every image.
    pub prompt: String,
    /// JSON answers (and their columns); `None` = free text.
    pub format: Option<AnswerFormat>,
    pub max_tokens: usize,
    /// Greedy by default: the same image gets the same answer.
    pub sampling: SamplingParams,
}

impl JobSpec {
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            prompt: prompt.into(),
            format: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            sampling: SamplingParams::default(),
        }
    }

    /// One user turn: the image, then the prompt (the order vision chat
    /// templates expect, and the app's chats use).
    pub fn request_for(&self, image: ImageInput) -> Request {
        let parts = vec![
            ContentPart::Image { image: Some(image.sha256.clone()) },
            ContentPart::text(self.prompt.as_str()),
        ];
        let message = ChatMessage::user(MessageContent::Parts(parts));
        let prompt = Prompt::Chat { messages: vec![message], options: TemplateOptions::default() };
        let mut request = Request::new(prompt)
            .with_max_tokens(self.max_tokens)
            .with_sampling(self.sampling.clone());
        // nobody watches a row stream: the batch gets the machine's full throughput
        request.interactive = false;
        request.images = vec![image];
        request.constraint = self.format.as_ref().map(AnswerFormat::constraint);
        request
    }

    /// One user turn for a PDF: its first page as a picture for a model that sees (`page`),
    /// then its text with page markers, then the prompt.
    pub fn request_for_document(&self, page: Option<ImageInput>, text: &str) -> Request {
        let mut parts = Vec::new();
        if let Some(page) = &page {
            parts.push(ContentPart::Image { image: Some(page.sha256.clone()) });
        }
        parts.push(ContentPart::text(format!("{text}\n\n{}", self.prompt)));
        let message = ChatMessage::user(MessageContent::Parts(parts));
        let prompt = Prompt::Chat { messages: vec![message], options: TemplateOptions::default() };
        let mut request = Request::new(prompt)
            .with_max_tokens(self.max_tokens)
            .with_sampling(self.sampling.clone());
        request.interactive = false;
        request.images = page.into_iter().collect();
        request.constraint = self.format.as_ref().map(AnswerFormat::constraint);
        request
    }

    /// The row of a finished answer: failed with the engine's code, or done
    /// (with its JSON parsed when the job asked for JSON).
    pub fn row_from(&self, name: &str, reply: Completion, seconds: f64) -> Row {
        let seconds = round_ms(seconds);
        let mut row = Row {
            answer: reply.content,
            prompt_tokens: reply.stats.prompt_tokens,
            generated_tokens: reply.stats.generated_tokens,
            seconds,
            ..Row::pending(name)
        };
        if let Some(e) = reply.error {
            row.status = RowStatus::Failed;
            row.error_code = Some(e.code);
            row.error = Some(e.message);
            return row;
        }
        if reply.finish_reason.is_none() {
            row.status = RowStatus::Failed;
            row.error_code = Some("ENGINE_STOPPED".into());
            row.error = Some("the engine stopped before the answer finished".into());
            return row;
        }
        if reply.finish_reason == Some(FinishReason::Cancelled) {
            row.status = RowStatus::Cancelled;
            return row;
        }
        if self.format.is_some() {
            match serde_json::from_str(row.answer.trim()) {
                Ok(value) => row.fields = Some(value),
                Err(e) => {
                    // A constrained answer is valid JSON unless the token
                    // limit cut it before it closed.
                    let why = if reply.finish_reason == Some(FinishReason::Length) {
                        format!(
                            "the answer reached the {}-token limit before its JSON closed",
                            self.max_tokens
                        )
                    } else {
                        format!("the answer is not JSON: {e}")
                    };
                    row.status = RowStatus::Failed;
                    row.error_code = Some("ANSWER_NOT_JSON".into());
                    row.error = Some(why);
                    return row;
                }
            }
        }
        row.status = RowStatus::Done;
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::batch::{RequestError, RequestStats};

    fn reply(content: &str, finish: FinishReason) -> Completion {
        Completion {
            content: content.into(),
            finish_reason: Some(finish),
            stats: RequestStats { prompt_tokens: 40, generated_tokens: 6, ..Default::default() },
            ..Default::default()
        }
    }

    #[test]
    fn a_request_is_one_user_turn_with_the_image_before_the_prompt() {
        let mut job = JobSpec::new("What colour?");
        job.format = Some(AnswerFormat::fields_from_list("colour"));
        let image = ImageInput::from_bytes(vec![1u8, 2, 3]);
        let request = job.request_for(image.clone());
        let Prompt::Chat { messages, .. } = &request.prompt else { panic!("a chat prompt") };
        assert_eq!(messages.len(), 1);
        let MessageContent::Parts(parts) = &messages[0].content else { panic!("parts") };
        assert!(matches!(&parts[0], ContentPart::Image { image: Some(h) } if *h == image.sha256));
        assert_eq!(parts.len(), 2);
        assert_eq!(request.images.len(), 1);
        assert!(request.constraint.is_some());
        assert_eq!(request.max_tokens, DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn answers_become_done_failed_or_cancelled_rows() {
        let text = JobSpec::new("p");
        let done = text.row_from("a.png", reply("red", FinishReason::Stop), 1.23456);
        assert_eq!(
            (done.status, done.answer.as_str(), done.prompt_tokens, done.seconds),
            (RowStatus::Done, "red", 40, 1.235)
        );

        let mut failed = reply("", FinishReason::Error);
        failed.error =
            Some(RequestError { code: "INVALID_IMAGE".into(), message: "cannot decode".into() });
        let row = text.row_from("b.png", failed, 0.1);
        assert_eq!(
            (row.status, row.error_code.as_deref()),
            (RowStatus::Failed, Some("INVALID_IMAGE"))
        );

        assert_eq!(
            text.row_from("c", reply("", FinishReason::Cancelled), 0.0).status,
            RowStatus::Cancelled
        );

        let mut json = JobSpec::new("p");
        json.format = Some(AnswerFormat::Json);
        let row = json.row_from("d", reply(r#" {"colour": "red"} "#, FinishReason::Stop), 0.0);
        assert_eq!(row.fields, Some(serde_json::json!({"colour": "red"})));
        let cut = json.row_from("e", reply(r#"{"colour": "re"#, FinishReason::Length), 0.0);
        assert_eq!(
            (cut.status, cut.error_code.as_deref()),
            (RowStatus::Failed, Some("ANSWER_NOT_JSON"))
        );
        assert_eq!(cut.answer, r#"{"colour": "re"#, "the cut answer is kept to show");
    }
}
