//! The JSON arrays that carry a batch's values into one statement (read there with
//! `json_each`): numbers as they are, text escaped so that every byte comes back as it was.

use std::fmt::Write as _;

/// Appends `text` to `out` as a JSON string.
pub(crate) fn json_text(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON array of numbers, for `json_each`.
pub(crate) fn json_ids(ids: impl IntoIterator<Item = i64>) -> String {
    let mut out = String::from("[");
    for (i, id) in ids.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{id}");
    }
    out.push(']');
    out
}

/// A JSON array of strings, for `json_each`.
pub(crate) fn json_texts<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (i, text) in texts.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_text(&mut out, text);
    }
    out.push(']');
    out
}
