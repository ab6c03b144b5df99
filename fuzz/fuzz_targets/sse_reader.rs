//! The gateway's event-stream reader (`portcullis_wire::sse`: what `tools.filter_list` and the
//! catalog read in a backend's answer) against an independent one, `sse-parse`, which follows
//! the WHATWG HTML "interpreting an event stream" algorithm as clients do (UTF-8 decoded with
//! replacement, a leading byte order mark dropped once, CR/LF/CRLF line ends, a block without
//! a `data` line dispatching nothing, an unterminated last block dropped). Decision 11: the
//! gateway reads what the client reads, so on the same bytes, cut into the same chunks, both
//! must dispatch the same events, with the same type and data, in the same order.
//!
//! Input: the first byte picks the chunk size (1 to 64 bytes; 0: the whole stream at once);
//! the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_wire::sse;

fuzz_target!(|data: &[u8]| {
    let Some((&size, stream)) = data.split_first() else { return };
    let size = match size % 65 {
        0 => stream.len().max(1),
        n => usize::from(n),
    };

    // The gateway's reading, chunk by chunk as the filter reads a body.
    let mut reader = sse::Reader::new();
    let mut ours = Vec::new();
    for chunk in stream.chunks(size) {
        ours.extend(reader.push(chunk, false));
    }
    ours.extend(reader.push(&[], true));
    let ours: Vec<(String, String)> = ours
        .iter()
        .map(|raw| sse::fields(raw))
        .filter_map(|f| {
            let kind = f.event.filter(|e| !e.is_empty()).unwrap_or_else(|| "message".to_owned());
            f.data.map(|d| (kind, d))
        })
        .collect();

    // The reference reading, on the same chunks.
    let mut parser = sse_parse::SseParser::new();
    for chunk in stream.chunks(size) {
        parser.feed(chunk);
    }
    parser.finish();
    let theirs: Vec<(String, String)> = std::iter::from_fn(|| parser.next_event()).map(|e| (e.event, e.data)).collect();

    assert_eq!(ours, theirs, "the gateway reads other events than a client");

    // The whole-body reading (the catalog's) agrees with the chunked one.
    let whole: Vec<(Option<String>, Option<String>)> = sse::dispatched(stream).into_iter().map(|f| (f.event, f.data)).collect();
    assert_eq!(whole.len(), theirs.len(), "a whole body reads otherwise than its chunks");
});
