//! A document's text for a prompt: whole, with a marker before each page, or cut into passages
//! that each know their page, for retrieval when the whole does not fit.

/// A piece of one page's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// The page it comes from, counted from 1.
    pub page: usize,
    /// Its text.
    pub text: String,
}

/// The pages' text, each after a `[page N]` line, so a model can cite "p. N".
pub fn page_marked_text(pages: &[String]) -> String {
    let marked: Vec<String> = pages
        .iter()
        .enumerate()
        .map(|(i, text)| format!("[page {}]\n{}", i + 1, text.trim()).trim_end().to_string())
        .collect();
    marked.join("\n\n")
}

/// Cuts each page's text into passages of about `words` words (never across pages), breaking
/// after a line where one ends near the target, so a passage rarely stops mid-sentence.
pub fn passages(pages: &[String], words: usize) -> Vec<Passage> {
    let words = words.max(1);
    let mut out = Vec::new();
    for (i, text) in pages.iter().enumerate() {
        let mut current = String::new();
        let mut count = 0;
        for line in text.lines() {
            let n = line.split_whitespace().count();
            if n == 0 {
                continue;
            }
            if count > 0 && count + n > words + words / 4 {
                out.push(Passage { page: i + 1, text: std::mem::take(&mut current) });
                count = 0;
            }
            if !current.is_empty() {
                current.push('\n');
            }
            current.push_str(line.trim());
            count += n;
        }
        if count > 0 {
            out.push(Passage { page: i + 1, text: current });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passages_keep_their_pages_and_their_size() {
        let line = "one two three four five six seven eight nine ten";
        let page = [line; 10].join("\n");
        let pages = vec![page, String::new(), "last page".to_string()];
        let cut = passages(&pages, 30);
        // 100 words in lines of 10 with at most 37 a passage: 30, 30, 30, 10
        assert_eq!(
            cut.iter().map(|p| (p.page, p.text.split_whitespace().count())).collect::<Vec<_>>(),
            vec![(1, 30), (1, 30), (1, 30), (1, 10), (3, 2)]
        );
        let marked = page_marked_text(&pages);
        assert!(marked.starts_with("[page 1]\none two"));
        assert!(marked.contains("[page 2]\n\n[page 3]\nlast page"));
    }
}
