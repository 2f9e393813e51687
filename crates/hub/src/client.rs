//! The connection to the Hub: an `hf_hub::HFClient` set up for the app.
//!
//! What is hf-hub's here: the endpoint (`HF_ENDPOINT` unless the app names
//! one), the token (the app's, from the OS keychain, else hf-hub's own
//! resolution: `HF_TOKEN`, the file at `HF_TOKEN_PATH`, `$HF_HOME/token` as
//! `hf auth login` writes it; see [`HubConfig::with_keychain_token`] for why
//! in that order),
//! request retries and the mapping of Hub answers to error kinds. What is
//! ours: an HTTP client with timeouts (hf-hub's default has none, and a stalled
//! transfer must fail so it can resume), and our error kinds, which tell a
//! gated repository from a private one for the UI.
use std::time::Duration;

use hf_hub::{HFClient, HFError, HFRepository, RepoTypeModel};

use crate::cache::HfCache;
use crate::error::{Error, Result};
use crate::keychain::Keychain;

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How to reach the Hub and where to put what comes from it.
#[derive(Clone)]
pub struct HubConfig {
    /// Base URL of the Hub or a mirror. `None`: `HF_ENDPOINT`, else
    /// [`DEFAULT_ENDPOINT`] (hf-hub reads it).
    pub endpoint: Option<String>,
    /// A token the app holds (from the OS keychain, see
    /// [`HubConfig::with_keychain_token`]). `None`: hf-hub looks for one
    /// (`HF_TOKEN`, `HF_TOKEN_PATH`, `$HF_HOME/token`).
    pub token: Option<String>,
    /// The cache that downloads go into.
    pub cache: HfCache,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the token is a secret: never in logs
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("cache", &self.cache)
            .finish()
    }
}

impl HubConfig {
    /// Endpoint and token as hf-hub resolves them, the cache from
    /// [`HfCache::from_env`].
    pub fn from_env() -> Option<HubConfig> {
        Some(HubConfig { endpoint: None, token: None, cache: HfCache::from_env()? })
    }

    /// Uses the token saved in `keychain` (Settings), if there is one;
    /// without one, hf-hub's resolution stays (`HF_TOKEN`, the token file).
    ///
    /// The keychain's token comes first, before `HF_TOKEN`: the user typed it
    /// into this app for this app, and Settings says "token set" — an
    /// `HF_TOKEN` exported in a shell for another account or tool must not
    /// quietly replace it (a Mac app started from the Dock does not see
    /// shell variables anyway). With none saved, the usual Hugging Face
    /// order applies, so a user of `hf auth login` needs no setup at all.
    /// Blocking (see [`crate::keychain`]); a keychain error is returned, not
    /// dropped: the caller decides whether to go on without it.
    pub fn with_keychain_token(mut self, keychain: &Keychain) -> Result<HubConfig> {
        if let Some(token) = keychain.read()? {
            self.token = Some(token);
        }
        Ok(self)
    }
}

/// Talks to the Hub. Cheap to clone.
#[derive(Clone)]
pub struct HubClient {
    pub(crate) hf: HFClient,
    pub(crate) cache: HfCache,
}

impl std::fmt::Debug for HubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClient").field("hf", &self.hf).field("cache", &self.cache).finish()
    }
}

impl HubClient {
    pub fn new(config: HubConfig) -> Result<HubClient> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            // a stalled transfer fails (and is resumed) instead of hanging forever
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("vlm-app-hub/", env!("CARGO_PKG_VERSION"), "; hf-hub/1"))
            .build()
            .map_err(|e| Error::Network(e.to_string()))?;
        let mut builder = HFClient::builder().client(http).cache_dir(config.cache.root());
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint(endpoint.trim_end_matches('/'));
        }
        if let Some(token) = config.token.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            builder = builder.token(token);
        }
        let hf = builder
            .build()
            .map_err(|e| Error::Network(format!("cannot set up the Hub client: {e}")))?;
        Ok(HubClient { hf, cache: config.cache })
    }

    /// The Hub's base URL, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        self.hf.endpoint()
    }

    pub fn cache(&self) -> &HfCache {
        &self.cache
    }

    /// The repository's page on the Hub (where gated terms are accepted).
    pub fn repo_url(&self, repo: &str) -> String {
        format!("{}/{repo}", self.endpoint())
    }

    /// hf-hub's handle for a model repository; `repo` must be validated.
    pub(crate) fn model(&self, repo: &str) -> HFRepository<RepoTypeModel> {
        let (owner, name) = hf_hub::split_id(repo);
        self.hf.model(owner, name)
    }

    /// hf-hub's error as ours, for a request about `what` in `repo`.
    pub(crate) fn error(&self, e: HFError, repo: &str, what: &str) -> Error {
        let auth = |status: reqwest::StatusCode, error_code: Option<&str>| match error_code {
            // the Hub answers 401 for a repository that does not exist *or*
            // is private (so as not to reveal it), and says which
            Some("RepoNotFound" | "RevisionNotFound" | "EntryNotFound") => Error::NotFound(
                format!("{what} (if it is private, a Hugging Face token with access is needed)"),
            ),
            Some("GatedRepo") => Error::Gated {
                repo: repo.to_string(),
                status: status.as_u16(),
                url: self.repo_url(repo),
            },
            _ => Error::AuthRequired { what: what.to_string(), status: status.as_u16() },
        };
        match e {
            HFError::AuthRequired { context } | HFError::Forbidden { context } => {
                auth(context.status, context.error_code.as_deref())
            }
            HFError::RepoNotFound { .. }
            | HFError::RevisionNotFound { .. }
            | HFError::EntryNotFound { .. } => Error::NotFound(what.to_string()),
            HFError::RateLimited { .. } => {
                Error::Network(format!("{what}: the Hub asks to slow down (HTTP 429)"))
            }
            HFError::Http { context } => match context.status.as_u16() {
                // hf-hub's paginated listings report every status as Http
                401 | 403 => auth(context.status, context.error_code.as_deref()),
                404 => Error::NotFound(what.to_string()),
                status => Error::Http { status, url: context.url },
            },
            HFError::Json(e) => {
                Error::InvalidListing(format!("{what}: not the expected JSON: {e}"))
            }
            HFError::MalformedResponse { what: missing, .. } => {
                Error::InvalidListing(format!("{what}: {missing}"))
            }
            // transport failures, Xet transfers, I/O under hf-hub: worth a retry
            other => Error::Network(format!("{what}: {}", error_chain(&other))),
        }
    }
}

/// An error and its sources, for messages that say what actually broke
/// ("connection reset" under "error decoding response body").
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}
