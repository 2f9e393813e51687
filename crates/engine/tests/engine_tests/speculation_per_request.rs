//! A request can turn speculation off for its own row (`Request::speculate`,
//! the server's `"speculation": "off"`): that row never drafts while its
//! neighbour in the same batch does, and both replies stay the target's.
use engine::batch::speculation::SpeculationConfig;
use engine::batch::{Prompt, Request, Scheduler, SchedulerConfig};
use engine::handle::Completion;
use fixtures::{write_tiny_llama, TinyLlama};

use crate::common::{greedy_no_eos, Driver, LOAD};

fn request(ids: &[u32], speculate: bool) -> Request {
    let mut request = Request::new(Prompt::Tokens(ids.to_vec()))
        .with_max_tokens(24)
        .with_sampling(greedy_no_eos());
    request.speculate = speculate;
    request
}

/// Two rows decoding together, the model drafting for itself (every draft
/// lands, so a row that may draft certainly keeps drafts); the stats of the
/// whole run too.
fn run_pair(dir: &std::path::Path, first_speculates: bool) -> (Vec<Completion>, u64) {
    let target = engine::model::load(dir, &LOAD).unwrap();
    let speculation = Some(SpeculationConfig::draft_model(dir.to_path_buf()));
    let scheduler = Scheduler::new(target, SchedulerConfig { speculation, ..Default::default() })
        .with_draft_model(engine::model::load(dir, &LOAD).unwrap())
        .unwrap();
    let mut driver = Driver::of_scheduler(scheduler);
    let a: Vec<u32> = (0..18u32).map(|i| 3 + (i * 53 + 7) % 250).collect();
    let b: Vec<u32> = (0..14u32).map(|i| 3 + (i * 31 + 11) % 250).collect();
    let rows = [driver.submit(request(&a, first_speculates)), driver.submit(request(&b, true))];
    driver.run_to_end();
    let drafted = driver.scheduler.stats().speculation.drafted_tokens;
    (rows.iter().map(|&r| driver.completion(r).clone()).collect(), drafted)
}

#[test]
fn a_row_with_speculation_off_drafts_nothing_beside_one_that_drafts() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), &TinyLlama::default()).unwrap();
    let (on, drafted_on) = run_pair(dir.path(), true);
    let (off, drafted_off) = run_pair(dir.path(), false);
    for c in on.iter().chain(&off) {
        assert!(c.error.is_none(), "{:?}", c.error);
    }
    // The control: asked to, the first row keeps drafts in this run.
    assert!(on[0].stats.draft_tokens > 0, "{:?}", on[0].stats);
    assert_eq!(off[0].stats.draft_tokens, 0, "the row that turned it off took drafts");
    assert!(off[1].stats.draft_tokens > 0, "its neighbour stopped speculating: {:?}", off[1].stats);
    assert!(drafted_off < drafted_on, "{drafted_off} drafted with a row off, {drafted_on} without");
    // Greedy either way: the same replies, token for token.
    for (a, b) in on.iter().zip(&off) {
        assert_eq!(a.content, b.content);
        assert_eq!(a.stats.generated_tokens, b.stats.generated_tokens);
    }
}
