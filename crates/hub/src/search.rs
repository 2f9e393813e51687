//! Search of the Hub for the gallery, and a model's details before a
//! download: hf-hub's `list_models`, `info` and `list_tree`, read into what
//! the gallery shows. Whether the engine runs a model is the engine's word,
//! passed in as an [`EngineSupport`].
use futures::{StreamExt, TryStreamExt};
use hf_hub::repository::{ModelInfo, RepoTreeEntry};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::client::HubClient;
use crate::error::{Error, Result};
use crate::fit::ModelShape;
use crate::gguf;
use crate::repo::{validate_repo_id, validate_revision};
use crate::support::{EngineSupport, SupportStatus};
use crate::variants::{variants, Variant, VariantFormat};

/// How results are ordered (the Hub sorts, largest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum SortBy {
    #[default]
    Downloads,
    Trending,
    Likes,
    Recent,
}

impl SortBy {
    fn hub_field(self) -> &'static str {
        match self {
            SortBy::Downloads => "downloads",
            SortBy::Trending => "trendingScore",
            SortBy::Likes => "likes",
            SortBy::Recent => "lastModified",
        }
    }
}

/// Which weights a result must have (a Hub tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum FormatFilter {
    #[default]
    Any,
    Mlx,
    Gguf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
// the UI sends only what the user set
#[serde(default)]
pub struct SearchQuery {
    /// Words matched against the repository name.
    pub text: Option<String>,
    /// Only this user or organization ("mlx-community").
    pub author: Option<String>,
    pub format: FormatFilter,
    /// Only models that take images (`image-text-to-text`).
    pub vision_only: bool,
    pub sort: SortBy,
    /// Results per page.
    pub limit: usize,
    /// Results to skip: those of the pages shown already ("More results").
    /// hf-hub does not hand out the Hub's page cursor, so a later page is
    /// read from the start (hf-hub follows the Hub's `Link` pages on its
    /// own) and the shown ones are left out; the Hub's order is stable.
    pub offset: usize,
    /// Also list each result's files (one more request per result) for the
    /// size of every quantization.
    pub file_sizes: bool,
}

impl Default for SearchQuery {
    fn default() -> Self {
        SearchQuery {
            text: None,
            author: None,
            format: FormatFilter::Any,
            vision_only: false,
            sort: SortBy::Downloads,
            limit: 20,
            offset: 0,
            file_sizes: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SearchPage {
    pub results: Vec<HubModel>,
    /// The Hub has more beyond `limit`.
    pub has_more: bool,
}

/// Gated repositories need their terms accepted on the Hub before a download.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum Gated {
    No,
    /// Access is granted as soon as the terms are accepted.
    Auto,
    /// The authors review each request.
    Manual,
}

/// What the Hub's metadata hints at; the engine decides once the model is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, TS)]
pub struct CapabilityHints {
    pub vision: bool,
    pub thinking: bool,
    pub tools: bool,
    /// Ships multi-token-prediction heads its own speculative decoding can
    /// draft with: config.json names MTP layers and it is no MLX conversion
    /// (see [`crate::mtp::hub_hint`]).
    #[serde(default)]
    pub mtp: bool,
}

/// A model on the Hub, as the gallery shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct HubModel {
    pub repo: String,
    /// Its page on the Hub (where gated terms are accepted).
    pub url: String,
    pub author: Option<String>,
    /// config.json `model_type`, or the GGUF's `general.architecture`.
    pub architecture: Option<String>,
    pub support: SupportStatus,
    pub capabilities: CapabilityHints,
    pub pipeline_tag: Option<String>,
    /// Downloads in the last 30 days.
    pub downloads: u64,
    pub likes: u64,
    pub license: Option<String>,
    pub gated: Gated,
    pub private: bool,
    /// From the safetensors index, when the Hub computed it.
    pub parameters: Option<u64>,
    pub last_modified: Option<String>,
    /// Each download choice with its size (sizes need a file listing).
    pub variants: Vec<Variant>,
}

/// What the gallery shows before a download, and what the fit check needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ModelDetails {
    pub model: HubModel,
    pub revision: String,
    pub commit: String,
    /// From config.json (safetensors) or the GGUF header; `None` with the
    /// reason in `shape_error` when neither could be read.
    pub shape: Option<ModelShape>,
    pub shape_error: Option<String>,
}

/// Bytes of a GGUF file's beginning read for its shape: the header's
/// architecture keys come before the vocabulary.
const GGUF_HEADER_PREFIX: u64 = 2 << 20;
/// The most results a search pages through (the Hub's own page is 1000).
const MAX_RESULTS: usize = 1000;
/// Results enriched with file listings at once.
const LISTING_CONCURRENCY: usize = 8;

impl HubClient {
    /// Models on the Hub matching `query`.
    pub async fn search(
        &self,
        query: &SearchQuery,
        support: &dyn EngineSupport,
    ) -> Result<SearchPage> {
        let limit = query.limit.clamp(1, 500);
        if query.offset + limit > MAX_RESULTS {
            return Err(Error::SearchTooDeep(MAX_RESULTS));
        }
        let offset = query.offset;
        let text = query.text.as_deref().map(str::trim).filter(|t| !t.is_empty());
        let author = query.author.as_deref().map(str::trim).filter(|a| !a.is_empty());
        let tag = match query.format {
            FormatFilter::Any => None,
            FormatFilter::Mlx => Some("mlx"),
            FormatFilter::Gguf => Some("gguf"),
        };
        let request = self
            .hf
            .list_models()
            .maybe_search(text)
            .maybe_author(author)
            .maybe_filter(tag)
            .maybe_pipeline_tag(query.vision_only.then_some("image-text-to-text"))
            .sort(query.sort.hub_field())
            .full(true)
            .fetch_config(true)
            // the pages shown, this one, and one more: whether there is a next page
            .limit(offset + limit + 1);
        let what = "the model search";
        let stream = request.send().map_err(|e| self.error(e, "", what))?;
        let mut infos: Vec<ModelInfo> =
            stream.try_collect().await.map_err(|e| self.error(e, "", what))?;
        infos.drain(..offset.min(infos.len()));
        let has_more = infos.len() > limit;
        infos.truncate(limit);

        let results = if query.file_sizes {
            futures::stream::iter(infos)
                .map(|info| async move {
                    match self.listed(&info.id, None).await {
                        Ok((full, files)) => self.describe(&full, Some(&files), support),
                        // a result that cannot be listed still shows, without sizes
                        Err(e) => {
                            tracing::info!(repo = %info.id, error = %e, "no file sizes for a search result");
                            self.describe(&info, None, support)
                        }
                    }
                })
                .buffered(LISTING_CONCURRENCY)
                .collect()
                .await
        } else {
            infos.iter().map(|info| self.describe(info, None, support)).collect()
        };
        Ok(SearchPage { results, has_more })
    }

    /// One model with its files and sizes, its shape for the fit check, and
    /// whether the engine runs it.
    pub async fn model_details(
        &self,
        repo: &str,
        revision: &str,
        support: &dyn EngineSupport,
    ) -> Result<ModelDetails> {
        validate_repo_id(repo)?;
        validate_revision(revision)?;
        let (info, files) = self.listed(repo, Some(revision)).await?;
        let commit = info
            .sha
            .clone()
            .ok_or_else(|| Error::InvalidListing(format!("{repo}@{revision}: no commit sha")))?;
        let mut model = self.describe(&info, Some(&files), support);
        let (shape, config) = self.shape(repo, &commit, &model).await;
        if let Some(config) = config {
            // the Hub's summary of config.json lacks the quantization
            model.variants = variants(&files, Some(&config));
        }
        Ok(ModelDetails {
            model,
            revision: revision.to_string(),
            commit,
            shape_error: shape.as_ref().err().cloned(),
            shape: shape.ok(),
        })
    }

    /// The repo's info and every file with its size.
    async fn listed(
        &self,
        repo: &str,
        revision: Option<&str>,
    ) -> Result<(ModelInfo, Vec<(String, Option<u64>)>)> {
        validate_repo_id(repo)?;
        let what = format!("{repo}@{}", revision.unwrap_or("main"));
        let handle = self.model(repo);
        let info = handle
            .info()
            .maybe_revision(revision)
            .send()
            .await
            .map_err(|e| self.error(e, repo, &what))?;
        let commit = info
            .sha
            .clone()
            .ok_or_else(|| Error::InvalidListing(format!("{what}: no commit sha")))?;
        let tree = handle
            .list_tree()
            .revision(commit)
            .recursive(true)
            .send()
            .map_err(|e| self.error(e, repo, &what))?;
        let entries: Vec<RepoTreeEntry> =
            tree.try_collect().await.map_err(|e| self.error(e, repo, &what))?;
        let files = entries
            .into_iter()
            .filter_map(|e| match e {
                RepoTreeEntry::File { path, size, .. } => Some((path, Some(size))),
                RepoTreeEntry::Directory { .. } => None,
            })
            .collect();
        Ok((info, files))
    }

    /// The shape from config.json (returned too), else from the first GGUF's header.
    async fn shape(
        &self,
        repo: &str,
        commit: &str,
        model: &HubModel,
    ) -> (std::result::Result<ModelShape, String>, Option<Value>) {
        let config = match self.config_json(repo, commit, model).await {
            Ok(config) => config,
            Err(e) => return (Err(e), None),
        };
        if let Some(config) = config {
            return (
                ModelShape::from_config(&config).map_err(|e| format!("config.json: {e}")),
                Some(config),
            );
        }
        (self.gguf_shape(repo, commit, model).await, None)
    }

    async fn config_json(
        &self,
        repo: &str,
        commit: &str,
        model: &HubModel,
    ) -> std::result::Result<Option<Value>, String> {
        let listed = model.variants.iter().any(|v| {
            v.format == VariantFormat::Safetensors && v.files.iter().any(|f| f == "config.json")
        });
        if !listed {
            return Ok(None);
        }
        let what = format!("{repo}: config.json");
        let bytes = self
            .model(repo)
            .download_file_to_bytes()
            .filename("config.json")
            .revision(commit)
            .send()
            .await
            .map_err(|e| self.error(e, repo, &what).to_string())?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("config.json is not JSON: {e}"))
    }

    async fn gguf_shape(
        &self,
        repo: &str,
        commit: &str,
        model: &HubModel,
    ) -> std::result::Result<ModelShape, String> {
        let variant = model
            .variants
            .iter()
            .find(|v| v.format == VariantFormat::Gguf)
            .ok_or("no config.json or GGUF file to read the model's shape from")?;
        let file = variant.files.first().cloned().ok_or("no GGUF file")?;
        let end = variant.weight_bytes.unwrap_or(GGUF_HEADER_PREFIX).clamp(1, GGUF_HEADER_PREFIX);
        let what = format!("{repo}: {file}");
        let bytes = self
            .model(repo)
            .download_file_to_bytes()
            .filename(file.clone())
            .revision(commit)
            .range(0..end)
            .send()
            .await
            .map_err(|e| self.error(e, repo, &what).to_string())?;
        let metadata = gguf::read_metadata(&bytes[..]).map_err(|e| format!("{file}: {e}"))?;
        ModelShape::from_gguf(&metadata).map_err(|e| format!("{file}: {e}"))
    }

    /// The Hub's metadata as the gallery shows it.
    fn describe(
        &self,
        info: &ModelInfo,
        files: Option<&[(String, Option<u64>)]>,
        support: &dyn EngineSupport,
    ) -> HubModel {
        let names: Vec<(String, Option<u64>)> = match files {
            Some(files) => files.to_vec(),
            None => info.siblings.iter().flatten().map(|s| (s.rfilename.clone(), s.size)).collect(),
        };
        let config = info.config.as_ref();
        let variants = variants(&names, config);
        let model_type = config.and_then(|c| c.get("model_type")).and_then(Value::as_str);
        let gguf_arch =
            info.gguf.as_ref().and_then(|g| g.get("architecture")).and_then(Value::as_str);
        let has = |format| variants.iter().any(|v: &Variant| v.format == format);
        let (architecture, status) = if has(VariantFormat::Safetensors) {
            (model_type, model_type.map(|t| support.model_type(t)))
        } else if has(VariantFormat::Gguf) {
            match gguf_arch {
                Some(a) => (Some(a), Some(support.gguf_architecture(a))),
                // older GGUF repos carry a config.json of the original model
                None => (model_type, model_type.map(|t| support.model_type(t))),
            }
        } else {
            (model_type.or(gguf_arch), None)
        };
        let engine_vision = status.as_ref().and_then(Option::as_ref).is_some_and(|s| s.vision);
        let support_status = match (architecture, status) {
            (_, Some(Some(s))) => SupportStatus::supported(s),
            (Some(arch), Some(None)) => SupportStatus::unsupported(format!(
                "this app's engine has no model family for the {arch} architecture"
            )),
            (None, _) if !variants.is_empty() => SupportStatus::unsupported(
                "the Hub does not say which architecture this is (no model_type)",
            ),
            _ => SupportStatus::unsupported("no safetensors or GGUF weights in this repository"),
        };
        let tags: &[String] = info.tags.as_deref().unwrap_or_default();
        let has_tag = |t: &str| tags.iter().any(|x| x.eq_ignore_ascii_case(t));
        let template = chat_template(info);
        let capabilities = CapabilityHints {
            vision: engine_vision
                || info.pipeline_tag.as_deref() == Some("image-text-to-text")
                || has_tag("image-text-to-text")
                || has_tag("vision")
                || model_type.is_some_and(|t| t.ends_with("_vl")),
            thinking: template
                .as_deref()
                .is_some_and(|t| t.contains("<think>") || t.contains("enable_thinking"))
                || has_tag("reasoning")
                || has_tag("thinking"),
            tools: template
                .as_deref()
                .is_some_and(|t| t.contains("tools") || t.contains("<tool_call>"))
                || has_tag("tool-use")
                || has_tag("function-calling"),
            mtp: crate::mtp::hub_hint(config, tags),
        };
        let license =
            tags.iter().find_map(|t| t.strip_prefix("license:")).map(str::to_string).or_else(
                || {
                    info.card_data
                        .as_ref()
                        .and_then(|c| c.get("license"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                },
            );
        let gated = match info.gated.as_ref() {
            Some(Value::String(s)) if s == "manual" => Gated::Manual,
            Some(Value::String(_)) | Some(Value::Bool(true)) => Gated::Auto,
            _ => Gated::No,
        };
        HubModel {
            repo: info.id.clone(),
            url: self.repo_url(&info.id),
            author: info
                .author
                .clone()
                .or_else(|| info.id.split_once('/').map(|(a, _)| a.to_string())),
            architecture: architecture.map(str::to_string),
            support: support_status,
            capabilities,
            pipeline_tag: info.pipeline_tag.clone(),
            downloads: info.downloads.unwrap_or(0),
            likes: info.likes.unwrap_or(0),
            license,
            gated,
            private: info.private.unwrap_or(false),
            parameters: info.safetensors.as_ref().map(|s| s.total),
            last_modified: info.last_modified.clone(),
            variants,
        }
    }
}

/// The chat template the Hub shows: config.json's tokenizer_config (a
/// string, or named templates) or the GGUF's.
fn chat_template(info: &ModelInfo) -> Option<String> {
    let from_config = info
        .config
        .as_ref()
        .and_then(|c| c.get("tokenizer_config"))
        .and_then(|t| t.get("chat_template"))
        .map(|t| match t {
            Value::Array(named) => named
                .iter()
                .filter_map(|n| n.get("template").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            other => other.as_str().unwrap_or_default().to_string(),
        });
    let from_gguf = info
        .gguf
        .as_ref()
        .and_then(|g| g.get("chat_template"))
        .and_then(Value::as_str)
        .map(str::to_string);
    match (from_config, from_gguf) {
        (None, None) => None,
        (a, b) => Some(format!("{}\n{}", a.unwrap_or_default(), b.unwrap_or_default())),
    }
}
