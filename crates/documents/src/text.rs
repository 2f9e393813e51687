//! A page's text layer: a hayro device that draws nothing and keeps, for every glyph the page
//! shows (invisible OCR text included), its Unicode and where it sits; the glyphs are then put
//! together into lines and words the way a reader sees them.

use hayro::hayro_interpret::font::GlyphRun;
use hayro::hayro_interpret::hayro_cmap::BfString;
use hayro::hayro_interpret::util::TransformExt;
use hayro::hayro_interpret::{
    interpret_page, BlendMode, ClipPath, Context, Device, DrawMode, DrawProps, Image,
    ImageDrawProps, InterpreterCache, InterpreterSettings, SoftMask,
};
use hayro::hayro_syntax::page::Page;
use hayro::kurbo::{Affine, BezPath, Point, Rect, Vec2};

/// One glyph in page space (points, y growing downwards).
struct Placed {
    text: String,
    /// Where the glyph starts and ends along its baseline.
    x0: f64,
    x1: f64,
    /// Its baseline.
    y: f64,
    /// Its font size.
    size: f64,
}

struct Collector {
    glyphs: Vec<Placed>,
    chars: usize,
    max_chars: usize,
}

impl<'a> Device<'a> for Collector {
    fn draw_path(&mut self, _: &BezPath, _: DrawProps<'a>, _: &DrawMode) {}
    fn push_clip_path(&mut self, _: &ClipPath) {}
    fn push_transparency_group(&mut self, _: f32, _: Option<SoftMask<'a>>, _: BlendMode) {}
    fn draw_image(&mut self, _: Image<'a, '_>, _: ImageDrawProps<'a>) {}
    fn pop_clip(&mut self) {}
    fn pop_transparency_group(&mut self) {}

    fn draw_glyph_run(&mut self, run: &GlyphRun<'_, 'a>, props: DrawProps<'a>, _: &DrawMode) {
        for glyph in run.glyphs() {
            if self.chars >= self.max_chars {
                return;
            }
            let Some(unicode) = glyph.as_unicode() else {
                continue;
            };
            let text = match unicode {
                BfString::Char(c) => c.to_string(),
                BfString::String(s) => s,
            };
            let text = expand_ligatures(&text);
            if text.chars().all(char::is_control) {
                continue;
            }
            // glyph space is 1000 units to the em (hayro's UNITS_PER_EM)
            let to_page: Affine = props.transform * glyph.transform();
            let origin = to_page * Point::ZERO;
            let advance = match &**glyph {
                hayro::hayro_interpret::font::Glyph::Outline(g) => g.advance_width(),
                hayro::hayro_interpret::font::Glyph::Type3(g) => g.advance_width(),
            }
            .unwrap_or(500.0) as f64;
            let end = to_page * Point::new(advance, 0.0);
            let up: Vec2 = to_page * Point::new(0.0, 1000.0) - origin;
            self.chars += text.chars().count();
            self.glyphs.push(Placed {
                text,
                x0: origin.x.min(end.x),
                x1: origin.x.max(end.x),
                y: origin.y,
                size: up.hypot().max(0.1),
            });
        }
    }
}

/// The ligatures fonts name as one glyph, written out as their letters (as pdftotext does).
fn expand_ligatures(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{FB00}' => "ff".to_string(),
            '\u{FB01}' => "fi".to_string(),
            '\u{FB02}' => "fl".to_string(),
            '\u{FB03}' => "ffi".to_string(),
            '\u{FB04}' => "ffl".to_string(),
            '\u{FB05}' | '\u{FB06}' => "st".to_string(),
            c => c.to_string(),
        })
        .collect()
}

pub(crate) fn page_text(page: &Page<'_>, max_chars: usize) -> String {
    let cache = InterpreterCache::new();
    let (w, h) = page.render_dimensions();
    let transform = page.initial_transform(true).to_kurbo();
    let mut context = Context::new(
        transform,
        Rect::new(0.0, 0.0, w as f64, h as f64),
        &cache,
        page.xref(),
        InterpreterSettings::default(),
    );
    let mut collector = Collector { glyphs: Vec::new(), chars: 0, max_chars };
    interpret_page(page, &mut context, &mut collector);
    lines(&collector.glyphs)
}

/// Glyphs in drawing order into lines: a glyph stays on the line while its baseline is within
/// half a font size and it does not jump back to the left; a gap wider than a sixth of the font
/// size between two glyphs is a space (a typical space is a quarter to a third of an em).
fn lines(glyphs: &[Placed]) -> String {
    let mut out = String::new();
    let mut prev: Option<&Placed> = None;
    for g in glyphs {
        if let Some(p) = prev {
            let size = p.size.max(g.size);
            let same_line = (g.y - p.y).abs() < 0.5 * size && g.x0 > p.x0 - 0.5 * size;
            if !same_line {
                trim_end_spaces(&mut out);
                out.push('\n');
            } else if g.x0 - p.x1 > size / 6.0 && !out.ends_with(' ') && !g.text.starts_with(' ') {
                out.push(' ');
            }
        }
        if g.text.chars().all(char::is_whitespace) {
            if !out.ends_with(' ') && !out.ends_with('\n') && !out.is_empty() {
                out.push(' ');
            }
        } else {
            out.push_str(&g.text);
        }
        prev = Some(g);
    }
    trim_end_spaces(&mut out);
    out
}

fn trim_end_spaces(s: &mut String) {
    while s.ends_with(' ') {
        s.pop();
    }
}
