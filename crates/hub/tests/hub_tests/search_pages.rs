//! "More results": a search's later pages, against a fake Hub that pages its
//! answers behind `Link: rel="next"` cursors as the real Hub does. hf-hub
//! follows those links on its own; `SearchQuery::offset` leaves out the
//! results of the pages shown already.
use crate::common;

use common::{FakeFile, FakeHub, FakeRepo};
use hub::{EngineSupport, HfCache, HubClient, HubConfig, SearchQuery, Support};
use serde_json::json;

struct NoEngine;

impl EngineSupport for NoEngine {
    fn model_type(&self, _: &str) -> Option<Support> {
        None
    }

    fn gguf_architecture(&self, _: &str) -> Option<Support> {
        None
    }
}

/// Seven repositories, `org/m0` the most downloaded.
async fn seven_models() -> FakeHub {
    let hub = FakeHub::start().await;
    for i in 0..7 {
        let mut repo = FakeRepo::new(vec![FakeFile::new(
            "config.json",
            json!({"model_type": "llama"}).to_string(),
        )]);
        repo.info = json!({"downloads": 1000 - i, "tags": ["mlx"]});
        hub.add_repo(&format!("org/m{i}"), repo);
    }
    hub
}

fn client(hub: &FakeHub, cache: &std::path::Path) -> HubClient {
    common::no_ambient_token();
    HubClient::new(HubConfig {
        endpoint: Some(hub.endpoint.clone()),
        token: None,
        cache: HfCache::new(cache),
    })
    .unwrap()
}

async fn repos(client: &HubClient, offset: usize) -> (Vec<String>, bool) {
    let query = SearchQuery { limit: 3, offset, ..SearchQuery::default() };
    let page = client.search(&query, &NoEngine).await.unwrap();
    (page.results.into_iter().map(|m| m.repo).collect(), page.has_more)
}

#[tokio::test]
async fn later_pages_follow_on_without_repeats_and_the_last_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let hub = seven_models().await;
    // the Hub's own pages hold two: every search here crosses page links
    hub.set_search_page_size(2);
    let client = client(&hub, dir.path());

    assert_eq!(
        repos(&client, 0).await,
        (vec!["org/m0".into(), "org/m1".into(), "org/m2".into()], true)
    );
    assert_eq!(
        repos(&client, 3).await,
        (vec!["org/m3".into(), "org/m4".into(), "org/m5".into()], true)
    );
    assert_eq!(repos(&client, 6).await, (vec!["org/m6".into()], false));
    assert_eq!(repos(&client, 9).await, (vec![], false), "past the end: nothing, and no more");

    // the second search followed the Hub's cursor beyond its first page
    let searches = hub.search_requests();
    assert!(searches.iter().any(|p| p.contains("cursor=2")), "{searches:?}");
}

#[tokio::test]
async fn a_search_too_deep_is_refused_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let hub = seven_models().await;
    let client = client(&hub, dir.path());
    let query = SearchQuery { limit: 20, offset: 990, ..SearchQuery::default() };
    let err = client.search(&query, &NoEngine).await.unwrap_err();
    assert_eq!(err.code(), "SEARCH_TOO_DEEP");
    assert!(err.to_string().contains("narrow it"), "{err}");
    assert!(hub.search_requests().is_empty(), "refused before asking the Hub");
}
