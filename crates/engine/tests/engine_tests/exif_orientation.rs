//! Phone photos in every vision family: a JPEG whose EXIF says to turn it
//! (orientations 3, 6 and 8) reaches each family's image processor as
//! mlx-vlm's `load_image` shows it: decoded as Pillow decodes it
//! (libjpeg-turbo), then turned. For each, `scripts/goldens/exif_jpegs.py`
//! saved the reference's pixels as a lossless PNG beside the JPEG; every
//! family's processor must give the JPEG exactly the patches it gives the
//! PNG. A family that skipped the turn would get another grid (6 and 8) or
//! other pixels (3); zune-jpeg's decoding, used before, was up to 4/255 off.
//! No model runs: only the processors, with their default settings.
use std::path::PathBuf;

use engine::model::registry::FAMILIES;

fn fixture(name: &str) -> Vec<u8> {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", "images", name].iter().collect();
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_vision_family_turns_phone_jpegs_as_the_reference_does() {
    // the processors' defaults: no preprocessor_config.json
    let folder = tempfile::tempdir().unwrap();
    let families: Vec<_> = FAMILIES.iter().filter(|f| f.vision()).collect();
    assert!(families.len() >= 4, "the vision families: {}", families.len());
    for family in families {
        let processor = (family.image_processor.unwrap().read)(folder.path()).unwrap();
        for (orientation, jpeg) in [(3, "exif_o3.jpg"), (6, "exif_o6.jpg"), (8, "exif_o8.jpg")] {
            let what = format!("{} on EXIF orientation {orientation}", family.name);
            let ours = processor.patches_named(&fixture(jpeg), jpeg).unwrap();
            let png = jpeg.replace(".jpg", ".pil.png");
            let theirs = processor.patches_named(&fixture(&png), &png).unwrap();
            assert_eq!(ours.grid, theirs.grid, "{what}: grid");
            assert_eq!((ours.rows, ours.cols), (theirs.rows, theirs.cols), "{what}: shape");
            let (worst, at) = ours
                .data
                .iter()
                .zip(&theirs.data)
                .map(|(a, b)| (a - b).abs())
                .enumerate()
                .fold((0f32, 0), |(w, at), (i, d)| if d > w { (d, i) } else { (w, at) });
            assert_eq!(worst, 0.0, "{what}: patch values differ, most at index {at}");
        }
    }
}

#[test]
fn the_fixtures_are_stored_landscape_and_shown_as_phones_show_them() {
    // so a processor that skipped the turn could not match by chance
    let size = |name: &str| {
        let img = image::load_from_memory(&fixture(name)).unwrap();
        (img.width(), img.height())
    };
    assert_eq!(size("exif_o6.jpg"), (240, 180));
    assert_eq!(size("exif_o6.pil.png"), (180, 240));
    assert_eq!(size("exif_o8.pil.png"), (90, 120));
    assert_eq!(size("exif_o3.pil.png"), size("exif_o3.jpg"));
}
