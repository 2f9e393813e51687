//! A job's table as CSV (for spreadsheets) or JSON Lines (for programs), and
//! back: `vlm bulk` resumes from its own results file.
//!
//! Columns: name, status, then the answer — or one column per field when the
//! job asked for named fields — then error_code, error, prompt_tokens,
//! generated_tokens, seconds. CSV cells are text (a field's number or list is
//! written as JSON); JSON Lines keeps each answer's JSON as it was.
//!
//! CSV cells that a spreadsheet would run as a formula get a guard quote (see
//! [`guard_cell`]); reading strips exactly the quotes the writer added.
use std::io::{self, Read, Write};
use std::path::Path;

use serde_json::{Map, Value};

use crate::answer_format::AnswerFormat;
use crate::row::{Row, RowStatus};

/// The columns the answer takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Columns {
    /// One `answer` column with the whole answer.
    Answer,
    /// One column per field of the answer's JSON object.
    Fields(Vec<String>),
}

impl Columns {
    pub fn for_format(format: Option<&AnswerFormat>) -> Self {
        format.and_then(AnswerFormat::columns).map_or(Columns::Answer, Columns::Fields)
    }

    fn answer_headers(&self) -> Vec<&str> {
        match self {
            Columns::Answer => vec!["answer"],
            Columns::Fields(names) => names.iter().map(String::as_str).collect(),
        }
    }
}

const LEADING: [&str; 2] = ["name", "status"];
const TRAILING: [&str; 5] = ["error_code", "error", "prompt_tokens", "generated_tokens", "seconds"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Csv,
    JsonLines,
}

impl ExportFormat {
    /// JSON Lines for a `.jsonl` / `.ndjson` file, CSV otherwise.
    pub fn for_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("jsonl" | "ndjson") => ExportFormat::JsonLines,
            _ => ExportFormat::Csv,
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Csv => "csv",
            ExportFormat::JsonLines => "jsonl",
        }
    }
}

/// A field's cell: text as it is, other JSON values as JSON, missing as empty.
fn cell(fields: Option<&Value>, name: &str) -> String {
    match fields.and_then(|f| f.get(name)) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

pub fn write_csv(rows: &[Row], columns: &Columns, out: impl Write) -> io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let mut header: Vec<&str> = LEADING.to_vec();
    header.extend(columns.answer_headers());
    header.extend(TRAILING);
    w.write_record(&header)?;
    for row in rows {
        let guard = |s: String| guard_cell(&s).into_owned();
        let mut record = vec![guard(row.name.clone()), row.status.as_str().to_string()];
        match columns {
            Columns::Answer => record.push(guard(row.answer.clone())),
            Columns::Fields(names) => {
                record.extend(names.iter().map(|n| guard(cell(row.fields.as_ref(), n))))
            }
        }
        record.extend([
            guard(row.error_code.clone().unwrap_or_default()),
            guard(row.error.clone().unwrap_or_default()),
            row.prompt_tokens.to_string(),
            row.generated_tokens.to_string(),
            row.seconds.to_string(),
        ]);
        w.write_record(&record)?;
    }
    w.flush()
}

/// What makes a spreadsheet read a cell as a formula (OWASP's CSV injection
/// list): `=`, `+`, `-`, `@`, and a tab or carriage return before one.
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// A cell that would start a formula: a formula character after any number of
/// apostrophes. The apostrophes count so that a cell which genuinely starts
/// with `'=` is quoted too, and reading strips one quote from exactly the
/// cells the writer quoted: a leading apostrophe elsewhere (`'tis`) is text
/// and is left alone both ways.
fn starts_formula(cell: &str) -> bool {
    cell.trim_start_matches('\'').starts_with(FORMULA_STARTS)
}

/// A plain number such as `-3` or `-1.5e3` is no formula, and a spreadsheet
/// should keep it a number, so it is written as it is.
fn is_plain_number(cell: &str) -> bool {
    cell.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) && cell.parse::<f64>().is_ok()
}

/// The cell as written to CSV: with a leading `'` when a spreadsheet would
/// otherwise run it as a formula (`=HYPERLINK(…)` in a file name or an
/// answer). The `'` shows in the spreadsheet; JSON Lines keeps the text exact.
pub fn guard_cell(cell: &str) -> std::borrow::Cow<'_, str> {
    if starts_formula(cell) && !is_plain_number(cell) {
        format!("'{cell}").into()
    } else {
        cell.into()
    }
}

/// The inverse of [`guard_cell`]: one `'` off a cell of the form
/// `'…'<formula character>…`, every other cell as it is.
pub fn unguard_cell(cell: &str) -> &str {
    match cell.strip_prefix('\'') {
        Some(rest) if starts_formula(rest) => rest,
        _ => cell,
    }
}

pub fn write_jsonl(rows: &[Row], mut out: impl Write) -> io::Result<()> {
    for row in rows {
        serde_json::to_writer(&mut out, row)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Reads back what [`write_csv`] wrote (the columns come from its header).
/// With field columns, a row's fields come back as text and its answer as
/// their JSON object.
pub fn read_csv(input: impl Read) -> io::Result<Vec<Row>> {
    let mut r = csv::Reader::from_reader(input);
    let header: Vec<String> = r.headers()?.iter().map(String::from).collect();
    let answer_count = header.len().checked_sub(LEADING.len() + TRAILING.len()).filter(|n| *n > 0);
    let Some(answer_count) =
        answer_count.filter(|_| header[..2] == LEADING && header[header.len() - 5..] == TRAILING)
    else {
        return Err(bad(format!("not a results file: its columns are {}", header.join(","))));
    };
    let answer_names = &header[2..2 + answer_count];
    let whole_answer = answer_names == ["answer"];
    let mut rows = Vec::new();
    for record in r.records() {
        let record = record?;
        let get = |i: usize| unguard_cell(record.get(i).unwrap_or("")).to_string();
        let number = |i: usize| {
            get(i).parse::<usize>().map_err(|e| bad(format!("line {}: {e}", rows.len() + 2)))
        };
        let status =
            RowStatus::parse(&get(1)).ok_or_else(|| bad(format!("unknown status {:?}", get(1))))?;
        let tail = 2 + answer_count;
        let optional = |s: String| (!s.is_empty()).then_some(s);
        let mut row = Row {
            status,
            error_code: optional(get(tail)),
            error: optional(get(tail + 1)),
            prompt_tokens: number(tail + 2)?,
            generated_tokens: number(tail + 3)?,
            seconds: get(tail + 4).parse().map_err(|e| bad(format!("seconds: {e}")))?,
            ..Row::pending(get(0))
        };
        if whole_answer {
            row.answer = get(2);
        } else if status == RowStatus::Done {
            let fields: Map<String, Value> = answer_names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), Value::String(get(2 + i))))
                .collect();
            row.answer = Value::Object(fields.clone()).to_string();
            row.fields = Some(Value::Object(fields));
        }
        rows.push(row);
    }
    Ok(rows)
}

pub fn read_jsonl(input: impl Read) -> io::Result<Vec<Row>> {
    let mut text = String::new();
    io::BufReader::new(input).read_to_string(&mut text)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| bad(format!("line {}: {e}", i + 1))))
        .collect()
}

/// Writes the table to `path` in the format its extension names. The file is
/// written beside and renamed over: an export cut short never replaces a
/// complete one (a resume reads it back).
pub fn write_file(path: &Path, rows: &[Row], columns: &Columns) -> io::Result<()> {
    let name =
        path.file_name().ok_or_else(|| bad(format!("{} is not a file name", path.display())))?;
    let partial = path.with_file_name(format!(".{}.partial", name.to_string_lossy()));
    let mut file = io::BufWriter::new(std::fs::File::create(&partial)?);
    match ExportFormat::for_path(path) {
        ExportFormat::Csv => write_csv(rows, columns, &mut file)?,
        ExportFormat::JsonLines => write_jsonl(rows, &mut file)?,
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&partial, path)
}

/// Reads a file [`write_file`] wrote.
pub fn read_file(path: &Path) -> io::Result<Vec<Row>> {
    let file = std::fs::File::open(path)?;
    match ExportFormat::for_path(path) {
        ExportFormat::Csv => read_csv(file),
        ExportFormat::JsonLines => read_jsonl(file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Vec<Row> {
        let mut done = Row::pending("photos/a \"quoted\", name.png");
        done.status = RowStatus::Done;
        done.answer = "A red square,\non two lines".into();
        done.prompt_tokens = 41;
        done.generated_tokens = 8;
        done.seconds = 0.125;
        vec![
            done,
            Row::failed("b.png", "INVALID_IMAGE", "cannot decode: bad, \"data\"", 0.002),
            Row::pending("c.png"),
        ]
    }

    #[test]
    fn csv_and_json_lines_read_back_the_rows_they_wrote() {
        let rows = sample();
        let mut csv = Vec::new();
        write_csv(&rows, &Columns::Answer, &mut csv).unwrap();
        assert!(String::from_utf8_lossy(&csv).starts_with(
            "name,status,answer,error_code,error,prompt_tokens,generated_tokens,seconds\n"
        ));
        assert_eq!(read_csv(&csv[..]).unwrap(), rows);
        let mut jsonl = Vec::new();
        write_jsonl(&rows, &mut jsonl).unwrap();
        assert_eq!(String::from_utf8_lossy(&jsonl).lines().count(), 3);
        assert_eq!(read_jsonl(&jsonl[..]).unwrap(), rows);
    }

    #[test]
    fn named_fields_get_a_column_each_and_come_back_as_text() {
        let columns = Columns::for_format(Some(&AnswerFormat::fields_from_list("colour, shape")));
        let mut row = Row::pending("a.png");
        row.status = RowStatus::Done;
        row.fields = Some(json!({"colour": "red", "shape": "square"}));
        row.answer = r#"{"colour":"red","shape":"square"}"#.into();
        let rows = vec![row, Row::failed("b.png", "INVALID_IMAGE", "bad", 0.0)];
        let mut csv = Vec::new();
        write_csv(&rows, &columns, &mut csv).unwrap();
        let text = String::from_utf8(csv.clone()).unwrap();
        assert!(text.starts_with("name,status,colour,shape,error_code"), "{text}");
        assert!(text.contains("a.png,done,red,square,,,0,0,0\n"), "{text}");
        assert_eq!(read_csv(&csv[..]).unwrap(), rows);
    }

    #[test]
    fn formula_cells_are_quoted_and_read_back_exactly() {
        let tricky = [
            "=HYPERLINK(\"http://evil\",\"x\")",
            "+1+1",
            "-2+3",
            "@SUM(A1)",
            "\t=1",
            "\r=1",
            "'=already quoted",
            "''+two",
            "'tis plain",
            "'",
            "-",
            "-3",
            "-1.5e3",
            "+7",
            "plain",
            "",
        ];
        for text in tricky {
            let written = guard_cell(text);
            let quoted = written != text;
            assert_eq!(
                quoted,
                starts_formula(text) && !is_plain_number(text),
                "{text:?} -> {written:?}"
            );
            assert!(
                !written.starts_with(FORMULA_STARTS) || is_plain_number(&written),
                "{text:?} still a formula: {written:?}"
            );
            assert_eq!(unguard_cell(&written), text, "{text:?} round trip");
        }
        assert_eq!(guard_cell("'tis"), "'tis", "an apostrophe before text is text");
        assert_eq!(guard_cell("-3"), "-3", "a negative number stays a number");

        let mut row = Row::failed("=cmd|' /C calc'!A0.png", "@CODE", "-bad", 0.0);
        row.answer = "+answer".into();
        let fields = Columns::for_format(Some(&AnswerFormat::fields_from_list("colour")));
        let mut done = Row::pending("'=x.png");
        done.status = RowStatus::Done;
        done.fields = Some(json!({"colour": "=red"}));
        done.answer = r#"{"colour":"=red"}"#.into();
        let mut csv = Vec::new();
        write_csv(&[row.clone()], &Columns::Answer, &mut csv).unwrap();
        let text = String::from_utf8(csv.clone()).unwrap();
        assert!(text.contains("'=cmd|"), "{text}");
        assert!(text.contains("'+answer,'@CODE,'-bad"), "{text}");
        assert_eq!(read_csv(&csv[..]).unwrap(), vec![row.clone()]);
        let mut csv = Vec::new();
        write_csv(&[done.clone()], &fields, &mut csv).unwrap();
        let text = String::from_utf8(csv.clone()).unwrap();
        assert!(text.contains("''=x.png,done,'=red,"), "{text}");
        assert_eq!(read_csv(&csv[..]).unwrap(), vec![done]);
        let mut jsonl = Vec::new();
        write_jsonl(&[row.clone()], &mut jsonl).unwrap();
        assert!(
            String::from_utf8(jsonl).unwrap().contains("\"name\":\"=cmd|"),
            "JSON Lines stays exact"
        );
    }

    #[test]
    fn a_file_that_is_not_a_results_table_is_refused() {
        assert!(read_csv(&b"a,b\n1,2\n"[..]).is_err());
        assert!(read_jsonl(&b"{\"name\": 1}\n"[..]).is_err());
    }

    #[test]
    fn files_are_written_by_extension_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["out.csv", "out.jsonl"] {
            let path = dir.path().join(name);
            write_file(&path, &sample(), &Columns::Answer).unwrap();
            assert_eq!(read_file(&path).unwrap(), sample());
        }
        let jsonl = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
        assert!(jsonl.starts_with("{\"name\":"), "{jsonl}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "no partial file left behind"
        );
    }
}
