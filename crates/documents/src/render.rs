//! One page to RGB pixels on white, through hayro's renderer.

use hayro::hayro_interpret::InterpreterSettings;
use hayro::hayro_syntax::page::Page;
use hayro::vello_cpu::color::palette::css::WHITE;
use hayro::{PixmapSettings, RenderCache, RenderSettings};

/// A rendered page: 8-bit RGB, rows top to bottom, no padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub pixels: Vec<u8>,
}

impl RgbImage {
    /// The picture as a PNG file, the form every image path in the app and the server takes.
    pub fn to_png(&self) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        image::write_buffer_with_format(
            &mut out,
            &self.pixels,
            self.width,
            self.height,
            image::ExtendedColorType::Rgb8,
            image::ImageFormat::Png,
        )
        .expect("encoding RGB8 pixels as PNG into memory cannot fail");
        out.into_inner()
    }
}

pub(crate) enum Size {
    /// The longer side in pixels.
    Longest(u32),
    /// Pixels per point.
    Scale(f32),
}

pub(crate) fn render(page: &Page<'_>, size: Size) -> RgbImage {
    let (w, h) = page.render_dimensions();
    let scale = match size {
        // hayro truncates size × scale to whole pixels: a quarter pixel more keeps 448 from
        // coming out as 447.99 and so 447
        Size::Longest(side) => (side as f32 + 0.25) / w.max(h).max(1.0),
        Size::Scale(s) => s,
    };
    // hayro truncates the page size times the scale; a page thinner than a pixel stays one
    let scale_x = scale.max(1.0 / w.max(1e-3));
    let scale_y = scale.max(1.0 / h.max(1e-3));
    let cache = RenderCache::new();
    let pixmap = hayro::render(
        page,
        &cache,
        &InterpreterSettings::default(),
        &RenderSettings::default(),
        &PixmapSettings { x_scale: scale_x, y_scale: scale_y, bg_color: WHITE },
    );
    let (width, height) = (pixmap.width() as u32, pixmap.height() as u32);
    // premultiplied RGBA over an opaque white background: alpha is 255, the colour is exact
    let pixels =
        pixmap.data_as_u8_slice().chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
    RgbImage { width, height, pixels }
}
