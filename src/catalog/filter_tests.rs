use super::*;
use serde_json::json;

fn filter(visible: &[&str]) -> ListFilter {
    ListFilter { visible: visible.iter().map(|s| (*s).to_owned()).collect(), id: json!(5), max_inspected: 4096 }
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

    let other: &'static str = Box::leak(answer(json!(6)).into_boxed_str());
    let out = rewrite(response("application/json", body_of(vec![other.as_bytes()])), filter(&[])).await.expect("passed");
    assert_eq!(text(out).await, other, "an answer to another id is not touched");
}

#[tokio::test]
async fn an_event_stream_keeps_other_events_byte_for_byte_and_rewrites_only_the_answer() {
    let note: &'static [u8] = b"id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\r\n\r\n: keep-alive\n\n";
    let ans: &'static str = Box::leak(format!("id: 2\nevent: message\ndata: {}\n\n", answer(json!(5))).into_boxed_str());
    let after: &'static [u8] = b"event: ping\ndata: x\n\n";
    // The answer arrives split across chunks, in the middle of a line.
    let (first, second) = ans.as_bytes().split_at(30);
    let out = rewrite(response("text/event-stream", body_of(vec![note, first, second, after])), filter(&["b"])).await.expect("stream");
    let text = text(out).await;
    assert!(text.starts_with(std::str::from_utf8(note).expect("utf-8")), "{text}");
    assert!(text.ends_with("event: ping\ndata: x\n\n"), "{text}");
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
