//! Text from the queue made safe to print for a person.
//!
//! A record's `last_error` holds the start of a server's error body, and its payload, group
//! and key are whatever the application wrote: any of them can carry terminal control
//! sequences (`ESC ] 0 ; … BEL` sets the window title, `ESC [ 31 m` colours, worse ones
//! exist). Everything the command prints for a person goes through [`visible`] or
//! [`visible_lines`], which replace each control character (C0, DEL and C1) with a visible
//! escape, so the terminal shows the bytes instead of obeying them.
//!
//! `--json` output is exact JSON: [`json`] leaves every value as it is and only writes DEL
//! and the C1 characters as `\u` escapes (serde_json already escapes C0), which any JSON
//! reader turns back into the same text.

use std::borrow::Cow;
use std::fmt::Write as _;

/// True for the characters a terminal may act on: C0 (U+0000 to U+001F), DEL (U+007F) and
/// C1 (U+0080 to U+009F).
pub fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

fn escape_into(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{0}'..='\u{7f}' => {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        }
        _ => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_control(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_control(c) && !keep(c) {
            escape_into(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line for a person: every control character escaped, line breaks and tabs included.
///
/// ```
/// use outbox_cli::escape::visible;
/// assert_eq!(visible("HTTP 500\x1b]0;owned\x07"), "HTTP 500\\x1b]0;owned\\x07");
/// assert_eq!(visible("a\nb\u{9b}c"), "a\\nb\\u{9b}c");
/// assert_eq!(visible("plain, ünïcödé"), "plain, ünïcödé");
/// ```
pub fn visible(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// Text of several lines for a person (a payload, a whole report): line breaks and tabs
/// stay, every other control character is escaped.
///
/// ```
/// use outbox_cli::escape::visible_lines;
/// assert_eq!(visible_lines("a\n\tb\x1b[2J\r"), "a\n\tb\\x1b[2J\\r");
/// ```
pub fn visible_lines(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n' || c == '\t')
}

/// Serialized JSON made safe for a terminal without changing its meaning: DEL and C1
/// characters (which serde_json writes raw) become `\u00XX` escapes. Outside strings JSON
/// text holds no such character, so only string contents change, and only in spelling.
///
/// ```
/// use outbox_cli::escape::json;
/// let text = serde_json::to_string(&"a\u{9b}b\u{1b}").unwrap();
/// let safe = json(text);
/// assert_eq!(safe, r#""a\u009bb\u001b""#);
/// assert_eq!(serde_json::from_str::<String>(&safe).unwrap(), "a\u{9b}b\u{1b}");
/// ```
pub fn json(text: String) -> String {
    if !text.chars().any(is_control) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 12);
    for c in text.chars() {
        if is_control(c) {
            // Raw C0 can only be JSON whitespace between tokens here (serde_json escapes it
            // inside strings): keep line breaks of pretty output as they are.
            if c == '\n' {
                out.push(c);
            } else {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_is_escaped_and_nothing_else() {
        for code in 0u32..0x110000 {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let text = c.to_string();
            let shown = visible(&text);
            let control = code < 0x20 || (0x7f..0xa0).contains(&code);
            assert!(!shown.chars().any(is_control), "U+{code:04X}");
            assert_eq!(shown != text, control, "U+{code:04X}");
        }
    }

    #[test]
    fn pretty_json_keeps_its_layout_and_its_values() {
        let value = serde_json::json!({ "error": "\u{1b}]0;x\u{7}\u{7f}\u{85}", "n": [1, 2] });
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = json(text.clone());
        assert!(!safe.chars().any(|c| is_control(c) && c != '\n'), "{safe}");
        assert_eq!(safe.lines().count(), text.lines().count());
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }
}
