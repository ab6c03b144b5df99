//! HTTP fields as structured-field parsers read them: every line of a field, combined.

use http::HeaderMap;

/// A field line that is not ASCII: structured fields are ASCII only, so such a field is
/// malformed whatever it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAscii;

/// All lines of field `name` joined with `", "` (RFC 9651 §4.2). `Ok(None)`: field absent.
pub fn combined(headers: &HeaderMap, name: impl http::header::AsHeaderName) -> Result<Option<String>, NotAscii> {
    let mut out: Option<String> = None;
    for v in headers.get_all(name) {
        let s = v.to_str().map_err(|_| NotAscii)?;
        match &mut out {
            None => out = Some(s.to_owned()),
            Some(acc) => {
                acc.push_str(", ");
                acc.push_str(s);
            }
        }
    }
    Ok(out)
}
