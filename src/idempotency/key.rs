//! The `Idempotency-Key` request header (draft-ietf-httpapi-idempotency-key-header §2.1): an
//! Item Structured Field whose value is a String (RFC 8941 §3.3.3), which Portcullis limits to
//! 1–255 characters (its published key format, draft §5).
//!
//! Many deployed clients send the key bare (`Idempotency-Key: 8e03978e-…`), which is not an
//! sf-string (and, starting with a digit, not even a token). Such a value is accepted as a
//! legacy key when it is 1–255 visible ASCII characters without `"`, `\`, `,` or `;` — the
//! same text a client would have put in quotes — and counted as `legacy_key`, like the legacy
//! `Signature-Agent` form. `"abc"` and `abc` are the same key. Anything else is malformed.

use http::HeaderMap;

/// The header name.
pub(crate) const HEADER: &str = "idempotency-key";

/// The longest key Portcullis accepts, in characters.
pub(crate) const MAX_LEN: usize = 255;

/// How the key was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyForm {
    /// An RFC 8941 sf-string, as the draft requires.
    Structured,
    /// A bare value (legacy clients).
    Bare,
}

/// Why the header cannot be used as a key. The texts never quote the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The header appears more than once.
    #[error("Idempotency-Key must appear once")]
    Repeated,
    /// Not a 1–255 character sf-string (or bare legacy value).
    #[error("Idempotency-Key must be a quoted string (RFC 8941) of 1-255 characters")]
    Malformed,
}

/// The request's key, if it sent one.
pub(crate) fn parse(headers: &HeaderMap) -> Result<Option<(String, KeyForm)>, KeyError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    let text = value.to_str().map_err(|_| KeyError::Malformed)?;
    if let Ok(item) = sfv::Parser::new(text).parse::<sfv::Item>() {
        if let sfv::BareItem::String(s) = item.bare_item {
            let s = s.as_str();
            return if (1..=MAX_LEN).contains(&s.len()) { Ok(Some((s.to_owned(), KeyForm::Structured))) } else { Err(KeyError::Malformed) };
        }
    }
    let bare = text.trim_matches(|c| c == ' ' || c == '\t');
    let is_key_char = |b: u8| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b',' | b';');
    if (1..=MAX_LEN).contains(&bare.len()) && bare.bytes().all(is_key_char) {
        Ok(Some((bare.to_owned(), KeyForm::Bare)))
    } else {
        Err(KeyError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn key(values: &[&str]) -> Result<Option<(String, KeyForm)>, KeyError> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_str(v).expect("valid header value"));
        }
        parse(&h)
    }

    #[test]
    fn sf_strings_are_keys_and_their_escapes_are_read() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(key(&[&format!("\"{uuid}\"")]), Ok(Some((uuid.to_owned(), KeyForm::Structured))));
        assert_eq!(key(&[r#""a \"quoted\" \\ key""#]), Ok(Some((r#"a "quoted" \ key"#.to_owned(), KeyForm::Structured))));
        assert_eq!(key(&[r#""k";v=1"#]), Ok(Some(("k".to_owned(), KeyForm::Structured))), "parameters are ignored");
        assert_eq!(key(&[&format!("\"{}\"", "x".repeat(255))]).map(|k| k.map(|(k, _)| k.len())), Ok(Some(255)));
        assert_eq!(key(&[]), Ok(None));
    }

    #[test]
    fn bare_legacy_keys_are_accepted_and_marked() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(key(&[uuid]), Ok(Some((uuid.to_owned(), KeyForm::Bare))));
        assert_eq!(key(&["order-42"]), Ok(Some(("order-42".to_owned(), KeyForm::Bare))));
        assert_eq!(key(&["12345"]), Ok(Some(("12345".to_owned(), KeyForm::Bare))), "an sf-integer is read as its text");
    }

    #[test]
    fn long_empty_repeated_and_odd_keys_are_malformed() {
        assert_eq!(key(&[&format!("\"{}\"", "x".repeat(256))]), Err(KeyError::Malformed));
        assert_eq!(key(&[&"x".repeat(256)]), Err(KeyError::Malformed));
        assert_eq!(key(&["\"\""]), Err(KeyError::Malformed));
        assert_eq!(key(&[""]), Err(KeyError::Malformed));
        assert_eq!(key(&["two words"]), Err(KeyError::Malformed));
        assert_eq!(key(&["\"unterminated"]), Err(KeyError::Malformed));
        assert_eq!(key(&["a,b"]), Err(KeyError::Malformed));
        assert_eq!(key(&["\"a\"", "\"b\""]), Err(KeyError::Repeated));
    }
}
