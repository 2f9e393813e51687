//! A chat's automatic title, taken from its first user message.

/// Longest automatic title, in characters (not counting the ellipsis).
pub const TITLE_MAX_CHARS: usize = 40;

/// The first line-ish of `text` as a title: whitespace collapsed, at most
/// [`TITLE_MAX_CHARS`] characters, cut at a word boundary with "…" when the
/// text is longer. A single overlong word (a URL) is cut mid-word rather than
/// giving an empty title.
pub fn derive_title(text: &str) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= TITLE_MAX_CHARS {
        return collapsed;
    }
    // Byte index just past the TITLE_MAX_CHARS-th character.
    let limit = collapsed.char_indices().nth(TITLE_MAX_CHARS).map_or(collapsed.len(), |(i, _)| i);
    let head = &collapsed[..limit];
    // When the next character is a space, the head already ends on a word.
    let cut = if collapsed[limit..].starts_with(' ') {
        head
    } else {
        match head.rfind(' ') {
            Some(space) => &head[..space],
            None => head,
        }
    };
    let cut =
        cut.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ':' | '-'));
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole() {
        assert_eq!(derive_title("  Hello   there\n"), "Hello there");
        assert_eq!(derive_title(""), "");
    }

    #[test]
    fn long_text_is_cut_at_a_word() {
        let t = derive_title("Describe the painting in this picture and tell me who painted it");
        assert_eq!(t, "Describe the painting in this picture…");
        assert!(t.chars().count() <= TITLE_MAX_CHARS + 1);
    }

    #[test]
    fn cut_exactly_before_a_space_keeps_the_last_word() {
        // 40 characters then a space
        let text = "aaaa bbbb cccc dddd eeee ffff gggg hhhhh and more";
        assert_eq!(derive_title(text), "aaaa bbbb cccc dddd eeee ffff gggg hhhhh…");
    }

    #[test]
    fn one_long_word_is_cut_mid_word() {
        let url = "https://example.com/a/very/long/path/that/goes/on";
        assert_eq!(derive_title(url), format!("{}…", &url[..40]));
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        let text = "日本語の文章はスペースがないのでそのまま四十文字で切られることになりますがそれで問題ありません";
        let t = derive_title(text);
        assert_eq!(t.chars().count(), 41);
        assert!(t.ends_with('…'));
    }
}
