//! What speculative decoding did during `vlm bench`, as lines of its table:
//! the proposer and how many drafts landed, then the draft model's own
//! prefix cache (what the draft did not read again).
use engine::batch::speculation::SpeculationStats;
use engine::cache::PrefixCacheStats;

/// The table's lines for `stats` (none while speculation is off), each
/// starting with its label in the table's first column.
pub fn lines(stats: &SpeculationStats) -> Vec<String> {
    if stats.status == "off" {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "speculation        {}: {} verify passes, {}/{} drafts kept ({:.0}%), {:.2} tokens per pass for a drafting row",
        stats.status,
        stats.verify_passes,
        stats.accepted_tokens,
        stats.drafted_tokens,
        100.0 * stats.acceptance(),
        stats.tokens_per_pass()
    )];
    lines.extend(
        stats.draft_prefix_cache.as_ref().map(|c| format!("draft cache        {}", draft_cache(c))),
    );
    lines
}

/// The draft model's prefix cache in words: its hits and the prompt tokens
/// they spared the draft, then what it holds.
pub fn draft_cache(c: &PrefixCacheStats) -> String {
    format!(
        "{} of {} prompts found in it, {} tokens not read again; {} kept, {:.1} of {:.0} MB",
        c.hits,
        c.hits + c.misses,
        c.reused_tokens,
        c.entries,
        c.bytes as f64 / 1e6,
        c.capacity_bytes as f64 / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_prints_nothing_and_a_draft_model_prints_its_cache() {
        assert!(lines(&SpeculationStats { status: "off".into(), ..Default::default() }).is_empty());
        let lookup = SpeculationStats {
            status: "prompt lookup".into(),
            verify_passes: 4,
            drafted_tokens: 20,
            accepted_tokens: 15,
            speculating_rows: 4,
            produced_tokens: 19,
            draft_prefix_cache: None,
        };
        assert_eq!(
            lines(&lookup),
            ["speculation        prompt lookup: 4 verify passes, 15/20 drafts kept (75%), 4.75 tokens per pass for a drafting row"]
        );
        let cache = PrefixCacheStats {
            entries: 2,
            bytes: 1_500_000,
            capacity_bytes: 134_217_728,
            hits: 1,
            misses: 1,
            reused_tokens: 48,
            disk: None,
        };
        let draft = SpeculationStats {
            status: "draft model d".into(),
            draft_prefix_cache: Some(cache),
            ..lookup
        };
        assert_eq!(
            lines(&draft)[1],
            "draft cache        1 of 2 prompts found in it, 48 tokens not read again; 2 kept, 1.5 of 134 MB"
        );
    }
}
