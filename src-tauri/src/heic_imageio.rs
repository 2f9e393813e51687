//! macOS only: a HEIC photo re-encoded as JPEG by the system's ImageIO
//! (the framework Photos and Preview use), so the engine gets a format it
//! decodes. The photo's metadata, orientation included, is copied along.
//! Not compiled or run on our Linux machines: kept to the five ImageIO and
//! CoreFoundation calls it needs, each result checked.
use std::ffi::{c_char, c_void};

type CFTypeRef = *const c_void;
type CFIndex = isize;

#[link(name = "CoreFoundation", kind = "framework")]
extern "C" {
    fn CFDataCreate(allocator: CFTypeRef, bytes: *const u8, length: CFIndex) -> CFTypeRef;
    fn CFDataCreateMutable(allocator: CFTypeRef, capacity: CFIndex) -> CFTypeRef;
    fn CFDataGetLength(data: CFTypeRef) -> CFIndex;
    fn CFDataGetBytePtr(data: CFTypeRef) -> *const u8;
    fn CFStringCreateWithCString(
        allocator: CFTypeRef,
        c_str: *const c_char,
        encoding: u32,
    ) -> CFTypeRef;
    fn CFRelease(cf: CFTypeRef);
}

#[link(name = "ImageIO", kind = "framework")]
extern "C" {
    fn CGImageSourceCreateWithData(data: CFTypeRef, options: CFTypeRef) -> CFTypeRef;
    fn CGImageSourceGetCount(source: CFTypeRef) -> usize;
    fn CGImageDestinationCreateWithData(
        data: CFTypeRef,
        uti: CFTypeRef,
        count: usize,
        options: CFTypeRef,
    ) -> CFTypeRef;
    fn CGImageDestinationAddImageFromSource(
        dest: CFTypeRef,
        source: CFTypeRef,
        index: usize,
        properties: CFTypeRef,
    );
    fn CGImageDestinationFinalize(dest: CFTypeRef) -> bool;
}

const UTF8: u32 = 0x0800_0100; // kCFStringEncodingUTF8

/// A CoreFoundation object released when dropped; None for a null result.
struct Owned(CFTypeRef);

impl Owned {
    fn new(object: CFTypeRef) -> Option<Self> {
        (!object.is_null()).then_some(Owned(object))
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        unsafe { CFRelease(self.0) }
    }
}

/// The first image in `heic` as JPEG bytes, or None when ImageIO cannot
/// read it.
pub fn to_jpeg(heic: &[u8]) -> Option<Vec<u8>> {
    unsafe {
        let input =
            Owned::new(CFDataCreate(std::ptr::null(), heic.as_ptr(), heic.len() as CFIndex))?;
        let source = Owned::new(CGImageSourceCreateWithData(input.0, std::ptr::null()))?;
        if CGImageSourceGetCount(source.0) == 0 {
            return None;
        }
        let output = Owned::new(CFDataCreateMutable(std::ptr::null(), 0))?;
        let jpeg =
            Owned::new(CFStringCreateWithCString(std::ptr::null(), c"public.jpeg".as_ptr(), UTF8))?;
        let dest =
            Owned::new(CGImageDestinationCreateWithData(output.0, jpeg.0, 1, std::ptr::null()))?;
        CGImageDestinationAddImageFromSource(dest.0, source.0, 0, std::ptr::null());
        if !CGImageDestinationFinalize(dest.0) {
            return None;
        }
        let len = CFDataGetLength(output.0);
        let ptr = CFDataGetBytePtr(output.0);
        (len > 0 && !ptr.is_null()).then(|| std::slice::from_raw_parts(ptr, len as usize).to_vec())
    }
}
