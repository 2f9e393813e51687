//! PDFs written byte by byte for tests across the workspace (feature `testing`): a correct
//! cross-reference table, Helvetica text, any page size.
use std::io::Write;

/// A PDF from objects 1..=n (object 1 the catalog), with a correct cross-reference table.
pub fn pdf(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        writeln!(out, "{} 0 obj", i + 1).unwrap();
        out.extend_from_slice(o);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    write!(out, "xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).unwrap();
    for o in offsets {
        writeln!(out, "{o:010} 00000 n ").unwrap();
    }
    write!(
        out,
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    )
    .unwrap();
    out
}

/// A stream object: `dict`'s entries plus its `/Length`, then `data`.
pub fn stream(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut o = format!("<< {dict} /Length {} >>\nstream\n", data.len()).into_bytes();
    o.extend_from_slice(data);
    o.extend_from_slice(b"\nendstream");
    o
}

/// One page of `width`×`height` points per entry of `pages`, each line of the entry a line of
/// 12-point Helvetica from the top left. Only ASCII is written as it is; `(`, `)` and `\` are
/// escaped.
pub fn text_pdf(pages: &[String], width: u32, height: u32) -> Vec<u8> {
    let n = pages.len();
    let kids: Vec<String> = (0..n).map(|k| format!("{} 0 R", 4 + 2 * k)).collect();
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!("<< /Type /Pages /Kids [{}] /Count {n} >>", kids.join(" ")).into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_vec(),
    ];
    for (k, text) in pages.iter().enumerate() {
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] /Contents {} 0 R \
                 /Resources << /Font << /F1 3 0 R >> >> >>",
                5 + 2 * k
            )
            .into_bytes(),
        );
        let mut content = format!("BT /F1 12 Tf 14 TL 72 {} Td\n", height.saturating_sub(72));
        for line in text.lines() {
            let escaped = line.replace('\\', "\\\\").replace('(', "\\(").replace(')', "\\)");
            content.push_str(&format!("({escaped}) Tj T*\n"));
        }
        content.push_str("ET");
        objects.push(stream("", content.as_bytes()));
    }
    pdf(&objects)
}
