//! Server-sent events as MCP's Streamable HTTP transport carries JSON-RPC messages in them,
//! read exactly as a client reads them (WHATWG HTML "Server-sent events", §9.2.6 "Interpreting
//! an event stream").
//!
//! Two things are needed of a stream, both without trusting it: where each event ends, so an
//! event can be passed on byte for byte or replaced whole, and what an event's `event` type and
//! `data` are. The stream is UTF-8 decoded with replacement (a byte that is not UTF-8 reads as
//! U+FFFD, it is never skipped); a byte order mark is dropped once, at the very start of the
//! stream only; lines end with CRLF, LF or CR; an event ends with a blank line; `data` lines are
//! joined with LF; a line starting with `:` is a comment; one space after the colon is dropped.
//! A block without a `data` line dispatches nothing; a block whose `data` is empty (the priming
//! event a 2025-11-25 server opens its streams with: an `id` and an empty `data`) dispatches a
//! message with empty data, which carries no JSON-RPC message. A stream that ends inside an
//! event never dispatches it.

/// The UTF-8 byte order mark, dropped once at the start of a stream.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Reads an event stream as it arrives, chunk by chunk: drops a leading [`BOM`] (however the
/// chunks cut it) and hands out each complete event's raw bytes (see [`split`]).
#[derive(Debug, Default)]
pub struct Reader {
    pending: Vec<u8>,
    /// Whether the stream's start was checked for a BOM.
    past_start: bool,
}

impl Reader {
    /// A reader at the start of a stream.
    pub fn new() -> Reader {
        Reader::default()
    }

    /// Takes the next chunk (`is_end`: the stream ended after it) and returns every event it
    /// completes, each with the blank line that ends it, in order. What is left is an event still
    /// arriving ([`Reader::pending_len`]); at the end it is never dispatched, and dropped.
    pub fn push(&mut self, chunk: &[u8], is_end: bool) -> Vec<Vec<u8>> {
        self.pending.extend_from_slice(chunk);
        if !self.past_start {
            let n = self.pending.len().min(BOM.len());
            if self.pending[..n] != BOM[..n] {
                self.past_start = true;
            } else if n == BOM.len() {
                self.pending.drain(..n);
                self.past_start = true;
            } else if !is_end {
                // Perhaps the first bytes of a BOM: wait for the rest.
                return Vec::new();
            }
        }
        let (events, rest) = split(&self.pending, is_end);
        let events: Vec<Vec<u8>> = events.into_iter().map(<[u8]>::to_vec).collect();
        let done = self.pending.len() - rest.len();
        self.pending.drain(..done);
        if is_end {
            self.pending.clear();
        }
        events
    }

    /// Bytes of the event still arriving.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

/// The events a whole stream body dispatches, as a client reads them: the BOM dropped, an
/// unterminated last event dropped; blocks without a `data` line are left out (they dispatch
/// nothing).
pub fn dispatched(body: &[u8]) -> Vec<EventFields> {
    Reader::new().push(body, true).iter().map(|raw| fields(raw)).filter(|f| f.data.is_some()).collect()
}

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
    /// The `event` field (absent or empty: the default type, `message`).
    pub event: Option<String>,
    /// The `data` lines joined with LF, or `None` when the event has no `data` field (it is
    /// then not dispatched at all).
    pub data: Option<String>,
}

impl EventFields {
    /// Whether the event is a `message` event (the type MCP sends JSON-RPC in).
    pub fn is_message(&self) -> bool {
        self.event.as_deref().is_none_or(|e| e.is_empty() || e == "message")
    }

    /// The JSON-RPC message text this event carries, if any: the data of an event that has some.
    /// An event without data (the priming event) carries none and is passed on unread.
    pub fn message(&self) -> Option<&str> {
        self.data.as_deref().filter(|d| !d.is_empty())
    }
}

/// Reads the fields of one event (as [`split`] returns it). Bytes that are not UTF-8 read as
/// U+FFFD, as a client decodes them; unknown fields and comments are ignored.
pub fn fields(raw: &[u8]) -> EventFields {
    let mut out = EventFields::default();
    let mut data: Option<String> = None;
    for line in lines(raw) {
        let line = String::from_utf8_lossy(line);
        let line = line.as_ref();
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
    fn bytes_that_are_not_utf8_read_as_replacement_characters() {
        // A client decodes the stream with replacement: the line is read, not skipped.
        let f = fields(b"data: {\"a\":\"\xff\"}\n\n");
        assert_eq!(f.data.as_deref(), Some("{\"a\":\"\u{FFFD}\"}"));
        assert_eq!(fields(b"\xffdata: x\n\n").data, None, "the bad byte is part of the field name");
    }

    #[test]
    fn a_leading_bom_is_dropped_once_however_the_chunks_cut_it() {
        let stream = b"\xEF\xBB\xBFdata: 1\n\n\xEF\xBB\xBFdata: 2\n\n";
        assert_eq!(dispatched(stream).iter().map(|f| f.data.clone().unwrap()).collect::<Vec<_>>(), ["1"]);
        let mut reader = Reader::new();
        let mut events = Vec::new();
        for b in stream {
            events.extend(reader.push(&[*b], false));
        }
        assert_eq!(events.len(), 2);
        assert_eq!(fields(&events[0]).data.as_deref(), Some("1"));
        assert_eq!(fields(&events[1]).data, None, "a BOM later on is part of the field name");
        // A stream that is only the start of a BOM ends as nothing.
        assert!(Reader::new().push(b"\xEF\xBB", true).is_empty());
    }

    #[test]
    fn an_empty_data_line_dispatches_a_message_without_a_json_rpc_message() {
        // The 2025-11-25 priming event; then a block without data, which dispatches nothing.
        let events = dispatched(b"id: 0\ndata:\n\nid: 1\n\nevent:\ndata: {}\n\n");
        assert_eq!(events.len(), 2);
        assert_eq!((events[0].data.as_deref(), events[0].message()), (Some(""), None));
        assert_eq!(events[1].message(), Some("{}"));
        assert!(events[1].is_message(), "an empty event type is the default type");
    }

    #[test]
    fn an_unterminated_event_is_never_dispatched() {
        assert!(dispatched(b"data: 1\n").is_empty());
        assert_eq!(dispatched(b"data: 1\r\r").len(), 1, "a CR at the end ends its line");
    }

    /// Bytes drawn mostly from what the reader reacts to (line ends, colons, field names, the
    /// BOM's and invalid UTF-8's bytes), so events form often.
    fn stream() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just(b"\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"data:".to_vec()),
            Just(b"data: ".to_vec()),
            Just(b"event:".to_vec()),
            Just(b"id: 1".to_vec()),
            Just(b":".to_vec()),
            Just(BOM.to_vec()),
            Just(vec![0xff]),
            Just(vec![0xe2, 0x82]),
            proptest::collection::vec(any::<u8>(), 0..4),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        /// However a stream is cut into chunks, the reader hands out the same events, and they
        /// are the whole-body reading's.
        #[test]
        fn chunking_never_changes_what_is_read(body in stream(), size in 1usize..9) {
            let mut reader = Reader::new();
            let mut chunked = Vec::new();
            for chunk in body.chunks(size) {
                chunked.extend(reader.push(chunk, false));
            }
            chunked.extend(reader.push(&[], true));
            let chunked: Vec<EventFields> = chunked.iter().map(|raw| fields(raw)).filter(|f| f.data.is_some()).collect();
            proptest::prop_assert_eq!(chunked, dispatched(&body));
        }
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
