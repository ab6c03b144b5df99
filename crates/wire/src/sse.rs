//! Server-sent events as MCP's Streamable HTTP transport carries JSON-RPC messages in them
//! (WHATWG HTML "Server-sent events", §9.2.6 "Interpreting an event stream").
//!
//! Two things are needed of a stream, both without trusting it: where each event ends, so an
//! event can be passed on byte for byte or replaced whole, and what an event's `event` type and
//! `data` are. Lines end with CRLF, LF or CR; an event ends with a blank line; `data` lines are
//! joined with LF; a line starting with `:` is a comment; one space after the colon is dropped.

/// Splits `buf` into complete events, each with the blank line that ends it, and returns them
/// with the unterminated rest (the start of an event still arriving). With `is_end`, the rest
/// is the stream's last, unterminated event (a stream closed without a blank line dispatches
/// nothing, but its bytes still belong to it), and a final CR counts as a line end: otherwise
/// a CR at the very end may be the first half of a CRLF and stays in the rest.
pub fn split(buf: &[u8], is_end: bool) -> (Vec<&[u8]>, &[u8]) {
    let mut events = Vec::new();
    let (mut event_start, mut line_start, mut i) = (0, 0, 0);
    while i < buf.len() {
        let end_len = match buf[i] {
            b'\n' => 1,
            b'\r' if buf.get(i + 1) == Some(&b'\n') => 2,
            b'\r' if i + 1 == buf.len() && !is_end => break,
            b'\r' => 1,
            _ => {
                i += 1;
                continue;
            }
        };
        let is_blank = i == line_start;
        i += end_len;
        line_start = i;
        if is_blank {
            events.push(&buf[event_start..i]);
            event_start = i;
        }
    }
    (events, &buf[event_start..])
}

/// The fields of one event that MCP uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFields {
    /// The `event` field (absent: the default type, `message`).
    pub event: Option<String>,
    /// The `data` lines joined with LF, or `None` when the event has no `data` field (it is
    /// then not dispatched at all).
    pub data: Option<String>,
}

impl EventFields {
    /// Whether the event is a `message` event (the type MCP sends JSON-RPC in).
    pub fn is_message(&self) -> bool {
        self.event.as_deref().is_none_or(|e| e == "message")
    }
}

/// Reads the fields of one event (as [`split`] returns it). Lines that are not UTF-8 are
/// ignored, as are unknown fields and comments.
pub fn fields(raw: &[u8]) -> EventFields {
    let mut out = EventFields::default();
    let mut data: Option<String> = None;
    for line in lines(raw) {
        let Ok(line) = std::str::from_utf8(line) else { continue };
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match name {
            "event" => out.event = Some(value.to_owned()),
            "data" => match &mut data {
                None => data = Some(value.to_owned()),
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
            },
            _ => {}
        }
    }
    out.data = data;
    out
}

/// The lines of `raw`, without their terminators.
fn lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = raw;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest.iter().position(|b| *b == b'\n' || *b == b'\r').unwrap_or(rest.len());
        let line = &rest[..end];
        let skip = match (rest.get(end), rest.get(end + 1)) {
            (Some(b'\r'), Some(b'\n')) => 2,
            (Some(_), _) => 1,
            (None, _) => 0,
        };
        rest = &rest[end + skip..];
        Some(line)
    })
}

/// One `message` event carrying `data` (a JSON-RPC message), as a server writes it.
pub fn message_event(data: &str) -> String {
    let mut out = String::from("event: message\n");
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_a_blank_line_whatever_the_line_ends() {
        let stream = b"event: message\ndata: {\"a\":1}\n\n: keep-alive\r\n\r\ndata: x\rdata: y\r\r";
        let (events, rest) = split(stream, false);
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0], b"event: message\ndata: {\"a\":1}\n\n");
        assert_eq!(events[1], b": keep-alive\r\n\r\n");
        // The last CR may be half of a CRLF: kept until the stream says more or ends.
        assert_eq!(rest, b"data: x\rdata: y\r\r");
        let (events, rest) = split(stream, true);
        assert_eq!((events.len(), rest), (3, &b""[..]));
        assert_eq!(fields(events[2]).data.as_deref(), Some("x\ny"));
    }

    #[test]
    fn fields_follow_the_interpretation_rules() {
        let f = fields(b"event: message\ndata: {\"a\":\ndata:1}\nid: 7\n: comment\n\n");
        assert_eq!((f.event.as_deref(), f.data.as_deref()), (Some("message"), Some("{\"a\":\n1}")));
        assert!(f.is_message());
        assert!(fields(b"data\n\n").data.is_some_and(|d| d.is_empty()), "a bare data line is an empty data line");
        assert_eq!(fields(b": only a comment\n\n"), EventFields::default());
        assert!(!fields(b"event: ping\ndata: x\n\n").is_message());
        assert_eq!(fields(b"data:  two spaces\n\n").data.as_deref(), Some(" two spaces"));
    }

    #[test]
    fn unterminated_event_is_the_rest() {
        let (events, rest) = split(b"data: 1\n\ndata: 2\n", false);
        assert_eq!((events.len(), rest), (1, &b"data: 2\n"[..]));
        let (events, rest) = split(b"data: 2\n", true);
        assert_eq!((events.len(), rest), (0, &b"data: 2\n"[..]));
    }

    #[test]
    fn a_message_event_reads_back_as_its_data() {
        let raw = message_event("{\"x\":\"a\nb\"}");
        let (events, rest) = split(raw.as_bytes(), false);
        assert_eq!((events.len(), rest.len()), (1, 0));
        assert_eq!(fields(events[0]).data.as_deref(), Some("{\"x\":\"a\nb\"}"));
    }
}
