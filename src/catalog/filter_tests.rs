use super::*;
use serde_json::json;

/// A filter vouching for the tools named, as [`answer`] lists them.
fn filter(visible: &[&str]) -> ListFilter {
    let vouched = |n: &str| super::super::pins::digest(json!({"name": n}).as_object().expect("object")).expect("digest");
    ListFilter { visible: visible.iter().map(|s| ((*s).to_owned(), vouched(s))).collect(), max_inspected: 4096, is_listing: true, cuts: None }
}

fn answer(id: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [{"name": "a"}, {"name": "b"}, {"name": "c"}], "nextCursor": "n", "cacheScope": "public", "ttlMs": 5}}).to_string()
}

fn body_of(chunks: Vec<&'static [u8]>) -> Body {
    let frames = futures_util::stream::iter(chunks.into_iter().map(|c| Ok::<_, hyper::Error>(Frame::data(Bytes::from_static(c)))));
    BodyExt::boxed(StreamBody::new(frames))
}

fn response(content_type: &str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_str(content_type).expect("ct"));
    r.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from_static("999"));
    r
}

async fn text(resp: Response<Body>) -> String {
    String::from_utf8(resp.into_body().collect().await.expect("body").to_bytes().to_vec()).expect("utf-8")
}

#[test]
fn only_tools_shrink_and_the_cache_scope_becomes_private() {
    let Value::Object(mut result) = json!({"tools": [{"name": "a"}, {"name": "b"}], "nextCursor": "n", "cacheScope": "public"}) else { unreachable!() };
    assert_eq!(filter_result(&mut result, &filter(&["b"]).visible), 1);
    assert_eq!(Value::Object(result), json!({"tools": [{"name": "b"}], "nextCursor": "n", "cacheScope": "private"}));
}

#[test]
fn a_tool_listed_with_another_definition_than_the_vouched_one_is_hidden() {
    let Value::Object(mut result) = json!({"tools": [{"name": "a", "description": "now deletes everything"}, {"name": "b"}]}) else { unreachable!() };
    assert_eq!(filter_result(&mut result, &filter(&["a", "b"]).visible), 1);
    assert_eq!(result["tools"], json!([{"name": "b"}]));
}

#[tokio::test]
async fn a_json_answer_is_rewritten_and_an_oversized_one_withheld() {
    let raw: &'static str = Box::leak(answer(json!(5)).into_boxed_str());
    let out = rewrite(response("application/json", body_of(vec![raw.as_bytes()])), filter(&["a", "c"])).await.expect("filtered");
    assert!(out.headers().get(http::header::CONTENT_LENGTH).is_none(), "the old length is gone");
    let v: Value = serde_json::from_str(&text(out).await).expect("json");
    assert_eq!(v["result"]["tools"], json!([{"name": "a"}, {"name": "c"}]));
    assert_eq!((v["result"]["cacheScope"].as_str(), v["result"]["nextCursor"].as_str(), v["id"].clone()), (Some("private"), Some("n"), json!(5)));

    let mut small = filter(&["a"]);
    small.max_inspected = 16;
    let err = rewrite(response("application/json", body_of(vec![raw.as_bytes()])), small).await.expect_err("too large");
    assert_eq!(err, FilterError::TooLarge { limit: 16 });

    // An id the gateway did not expect (a client may match it loosely) is filtered all the same.
    for id in [json!(6), json!(5.0), json!("5")] {
        let other: &'static str = Box::leak(answer(id.clone()).into_boxed_str());
        let out = rewrite(response("application/json", body_of(vec![other.as_bytes()])), filter(&[])).await.expect("filtered");
        let v: Value = serde_json::from_str(&text(out).await).expect("json");
        assert_eq!(v["result"]["tools"], json!([]), "id {id}");
    }
}

#[tokio::test]
async fn every_list_in_a_batch_answer_is_filtered() {
    let batch: &'static str = Box::leak(format!("[{},{{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{{\"content\":[]}}}}]", answer(json!(5))).into_boxed_str());
    let out = rewrite(response("application/json", body_of(vec![batch.as_bytes()])), filter(&["b"])).await.expect("filtered");
    let v: Value = serde_json::from_str(&text(out).await).expect("json");
    assert_eq!(v[0]["result"]["tools"], json!([{"name": "b"}]));
    assert_eq!(v[1], json!({"jsonrpc": "2.0", "id": 9, "result": {"content": []}}), "other answers unchanged");
}

#[tokio::test]
async fn a_json_list_that_reads_two_ways_is_withheld() {
    // The first `result` lists the hidden tool; serde_json alone would keep the second.
    let twice: &'static str = r#"{"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"a"}]},"result":{"content":[]}}"#;
    let resp = response("application/json", body_of(vec![twice.as_bytes()]));
    assert!(matches!(rewrite(resp, filter(&["b"])).await, Err(FilterError::Unreadable(r)) if r.contains("duplicate")), "a duplicate member is never passed");
}

#[tokio::test]
async fn an_answer_the_gateway_cannot_read_is_withheld_and_stale_headers_go() {
    let raw: &'static str = Box::leak(answer(json!(5)).into_boxed_str());
    let mut gz = response("application/json", body_of(vec![raw.as_bytes()]));
    gz.headers_mut().insert(http::header::CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
    assert!(matches!(rewrite(gz, filter(&["a"])).await, Err(FilterError::Unreadable(_))), "a compressed list is never passed unread");
    let html = response("text/html", body_of(vec![b"<p>tools</p>"]));
    assert!(matches!(rewrite(html, filter(&["a"])).await, Err(FilterError::Unreadable(_))));

    let mut tagged = response("application/json", body_of(vec![raw.as_bytes()]));
    tagged.headers_mut().insert(http::header::ETAG, http::HeaderValue::from_static("\"v1\""));
    tagged.headers_mut().insert("content-digest", http::HeaderValue::from_static("sha-256=:AAAA:"));
    let out = rewrite(tagged, filter(&["a"])).await.expect("filtered");
    assert!(out.headers().get(http::header::ETAG).is_none() && out.headers().get("content-digest").is_none(), "{:?}", out.headers());
    let v: Value = serde_json::from_str(&text(out).await).expect("json");
    assert_eq!(v["result"]["cacheScope"], "private");
}

#[tokio::test]
async fn a_list_in_any_event_type_or_beside_a_non_utf8_line_is_filtered() {
    let custom: &'static str = Box::leak(format!("event: other\ndata: {}\n\n", answer(json!(5))).into_boxed_str());
    let out = rewrite(response("text/event-stream", body_of(vec![custom.as_bytes()])), filter(&["c"])).await.expect("stream");
    let text_out = text(out).await;
    let data: Value = serde_json::from_str(&sse::fields(text_out.as_bytes()).data.expect("data")).expect("json");
    assert_eq!(data["result"]["tools"], json!([{"name": "c"}]), "{text_out}");

    let mut odd = b": \xff\xfe\n".to_vec();
    odd.extend_from_slice(format!("data: {}\n\n", answer(json!(5))).as_bytes());
    let odd: &'static [u8] = Box::leak(odd.into_boxed_slice());
    let out = rewrite(response("text/event-stream", body_of(vec![odd])), filter(&["a"])).await.expect("stream");
    let bytes = out.into_body().collect().await.expect("body").to_bytes();
    assert!(bytes.starts_with(b": \xff\xfe\n"), "the comment is kept byte for byte");
    let data: Value = serde_json::from_str(&sse::fields(&bytes).data.expect("data")).expect("json");
    assert_eq!(data["result"]["tools"], json!([{"name": "a"}]));
}

#[tokio::test]
async fn an_event_stream_keeps_other_events_byte_for_byte_and_rewrites_only_the_answer() {
    let note: &'static [u8] = b"id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\r\n\r\n: keep-alive\n\n";
    let ans: &'static str = Box::leak(format!("id: 2\nevent: message\ndata: {}\n\n", answer(json!(5))).into_boxed_str());
    let after: &'static [u8] = b"event: ping\ndata: {}\n\n";
    // The answer arrives split across chunks, in the middle of a line.
    let (first, second) = ans.as_bytes().split_at(30);
    let out = rewrite(response("text/event-stream", body_of(vec![note, first, second, after])), filter(&["b"])).await.expect("stream");
    let text = text(out).await;
    assert!(text.starts_with(std::str::from_utf8(note).expect("utf-8")), "{text}");
    assert!(text.ends_with("event: ping\ndata: {}\n\n"), "{text}");
    let (events, rest) = sse::split(text.as_bytes(), true);
    assert_eq!((events.len(), rest.len()), (4, 0), "{text}");
    assert!(std::str::from_utf8(events[2]).expect("utf-8").starts_with("id: 2\nevent: message\ndata: "), "other fields kept");
    let data: Value = serde_json::from_str(&sse::fields(events[2]).data.expect("data")).expect("json");
    assert_eq!(data["result"]["tools"], json!([{"name": "b"}]));
}

#[tokio::test]
async fn an_event_bigger_than_the_bound_cuts_the_stream() {
    let mut f = filter(&["a"]);
    f.max_inspected = 8;
    let out = rewrite(response("text/event-stream", body_of(vec![b"data: 0123456789abcdef"])), f).await.expect("stream");
    assert_eq!(text(out).await, "", "nothing of the oversized event is passed");
}

/// The events `rewrite` passes for `stream`, read as a client reads them, and whether the
/// `uninspectable` counter moved.
async fn passed(stream: Vec<u8>, chunk: usize) -> (Vec<sse::EventFields>, u64) {
    let cuts = prometheus_client::metrics::counter::Counter::default();
    let mut f = filter(&["b"]);
    f.cuts = Some(cuts.clone());
    let chunks: Vec<&'static [u8]> = Box::leak(stream.into_boxed_slice()).chunks(chunk).collect();
    let out = rewrite(response("text/event-stream", body_of(chunks)), f).await.expect("stream");
    let bytes = out.into_body().collect().await.expect("body").to_bytes();
    (sse::dispatched(&bytes), cuts.get())
}

#[tokio::test]
async fn a_list_the_gateway_cannot_read_as_a_client_does_cuts_the_stream_before_it() {
    let list = answer(json!(5));
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let unreadable = [
        // What JSON.stringify writes for a cut emoji: JavaScript reads it, serde_json does not.
        list.replace("\"name\":\"a\"", "\"name\":\"a\",\"title\":\"\\ud83d\""),
        list.replace("\"ttlMs\":5", &format!("\"ttlMs\":5,\"x\":{deep}")),
        list.replace("\"ttlMs\":5", "\"ttlMs\":NaN"),
        format!("{list} {{}}"),
        // Read two ways: serde_json and JavaScript keep the last `result` (no list), a parser
        // that keeps the first shows every tool.
        list.replacen('{', "{\"result\":{\"tools\":[{\"name\":\"a\"}]},", 1),
    ];
    for bad in unreadable {
        let stream = format!(
            "id: 0\ndata:\n\nid: 1\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}}\n\nid: 2\ndata: {bad}\n\nid: 3\ndata: {list}\n\n"
        );
        for chunk in [7, 4096] {
            let (events, cuts) = passed(stream.clone().into_bytes(), chunk).await;
            let data: Vec<_> = events.iter().map(|e| e.data.clone().unwrap_or_default()).collect();
            assert_eq!(data.len(), 2, "only what came before the unreadable event passes: {data:?}");
            assert_eq!(data[0], "", "the priming event passes unread");
            assert!(!data.iter().any(|d| d.contains("\"a\"")), "{data:?}");
            assert_eq!(cuts, 1);
        }
    }
}

#[tokio::test]
async fn a_list_a_client_reads_through_a_bom_or_a_bad_byte_is_filtered() {
    let list = answer(json!(5));
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(format!("data: {list}\n\n").as_bytes());
    // One byte that is not UTF-8: the client reads U+FFFD in its place, and the list.
    let odd = format!("data: {}\n\n", list.replace("\"nextCursor\":\"n\"", "\"nextCursor\":\"n#\"")).into_bytes();
    let odd = odd.into_iter().map(|b| if b == b'#' { 0xff } else { b }).collect::<Vec<u8>>();
    for stream in [bom, odd] {
        for chunk in [1, 4096] {
            let (events, cuts) = passed(stream.clone(), chunk).await;
            assert_eq!((events.len(), cuts), (1, 0));
            let v: Value = serde_json::from_str(events[0].data.as_deref().expect("data")).expect("json");
            assert_eq!(v["result"]["tools"], json!([{"name": "b"}]));
        }
    }
}

#[tokio::test]
async fn a_json_answer_to_another_request_passes_unread_and_its_event_streams_are_filtered() {
    let mut f = filter(&["b"]);
    f.is_listing = false;
    f.max_inspected = 16;
    // Larger than the bound and not a listing: passed as it came, headers and all.
    let big: &'static str = Box::leak(answer(json!(5)).into_boxed_str());
    let out = rewrite(response("application/json", body_of(vec![big.as_bytes()])), f.clone()).await.expect("passed");
    assert_eq!(out.headers()[http::header::CONTENT_LENGTH], "999");
    assert_eq!(text(out).await, big);
    // A stream is read whatever the request: a replayed list is filtered.
    f.max_inspected = 4096;
    let stream: &'static str = Box::leak(format!("id: 0\ndata:\n\nid: 1\ndata: {big}\n\n").into_boxed_str());
    let out = rewrite(response("text/event-stream", body_of(vec![stream.as_bytes()])), f).await.expect("stream");
    let events = sse::dispatched(text(out).await.as_bytes());
    let v: Value = serde_json::from_str(events[1].data.as_deref().expect("data")).expect("json");
    assert_eq!(v["result"]["tools"], json!([{"name": "b"}]));
}
