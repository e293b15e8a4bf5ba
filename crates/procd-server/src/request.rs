//! One request line, as a connection read it: a request, a notification
//! or a batch, run on the daemon's methods and answered as one line.
//! Unknown parameters are refused by name here, before jsonrpsee sees them,
//! and its "Invalid params" messages are made to name the field.

use crate::connection::Dispatch;
use futures::FutureExt;
use jsonrpsee::types::{ErrorCode, ErrorObject, Id, Response, ResponsePayload};
use jsonrpsee::Methods;
use procd_proto::error::INVALID_REQUEST;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

/// Entries allowed in one batch.
const MAX_BATCH: usize = 256;
/// Subscription notifications buffered per call (used by subscriptions).
const SUBSCRIPTION_BUFFER: usize = 64;

/// Notifications a subscription sends after its response.
pub(crate) type Notifications = mpsc::Receiver<Box<RawValue>>;

/// The response line for one request line (None for notifications), and
/// the stream of a subscription it started. Subscriptions inside a batch
/// are not streamed (their receivers drop, ending them).
pub(crate) async fn handle_line(
    line: &str,
    d: &Dispatch,
    max_response_bytes: usize,
) -> (Option<String>, Option<Notifications>) {
    let text = line.trim();
    if text.is_empty() {
        return (None, None);
    }
    if text.starts_with('[') {
        return (handle_batch(text, d, max_response_bytes).await, None);
    }
    handle_single(text, d).await
}

/// A batch's answer counts as one result (docs/SECURITY.md): entries are run in
/// order, and once the answer would pass `max_response_bytes` the rest are
/// refused with -32004 instead of run.
async fn handle_batch(text: &str, d: &Dispatch, max_response_bytes: usize) -> Option<String> {
    let items: Vec<&RawValue> = match serde_json::from_str(text) {
        Ok(items) => items,
        Err(_) => return Some(malformed(text)),
    };
    if items.is_empty() {
        return Some(error_response(Id::Null, INVALID_REQUEST, "empty batch"));
    }
    if items.len() > MAX_BATCH {
        let msg = format!(
            "batch of {} requests exceeds the limit of {MAX_BATCH}",
            items.len()
        );
        return Some(error_response(Id::Null, INVALID_REQUEST, &msg));
    }
    let mut responses: Vec<String> = Vec::new();
    let mut size = 0usize;
    for item in &items {
        if size > max_response_bytes {
            let id = serde_json::from_str::<Probe>(item.get())
                .ok()
                .and_then(|p| p.id)
                .and_then(|raw| serde_json::from_str::<Id>(raw.get()).ok())
                .unwrap_or(Id::Null);
            let msg = format!("the batch's answer passed max_response_bytes ({max_response_bytes}); this entry was not run");
            responses.push(error_response(id, procd_proto::error::LIMIT_REACHED, &msg));
            continue;
        }
        if let (Some(response), _) = handle_single(item.get(), d).await {
            size += response.len();
            responses.push(response);
        }
    }
    (!responses.is_empty()).then(|| format!("[{}]", responses.join(",")))
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
}

/// `"id": null` is an id (not a notification): record presence, not value.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// One request; a handler that panics (none should) answers -32603 and
/// leaves the connection and the daemon serving (docs/SECURITY.md).
async fn handle_single(text: &str, d: &Dispatch) -> (Option<String>, Option<Notifications>) {
    match std::panic::AssertUnwindSafe(handle_request(text, d))
        .catch_unwind()
        .await
    {
        Ok(answer) => answer,
        Err(_) => {
            tracing::error!("a request handler panicked; answered -32603");
            let id = serde_json::from_str::<Probe>(text)
                .ok()
                .and_then(|p| p.id)
                .and_then(|raw| serde_json::from_str::<Id>(raw.get()).ok())
                .unwrap_or(Id::Null);
            let msg = "Internal error: the handler failed; procd goes on serving";
            (
                Some(error_response(id, procd_proto::error::INTERNAL_ERROR, msg)),
                None,
            )
        }
    }
}

async fn handle_request(text: &str, d: &Dispatch) -> (Option<String>, Option<Notifications>) {
    let resolved;
    let text = match resolve_name(text, d.registry.as_deref()) {
        Named::Unnamed => text,
        Named::Resolved(request) => {
            resolved = request;
            &resolved
        }
        Named::Refused(answer) => return (answer, None),
    };
    let methods = &d.methods;
    if let Some(refusal) = refuse_unknown_params(text) {
        // A notification with a bad param is not run either.
        return (refusal, None);
    }
    // The common case, a request with an id, is parsed once (by jsonrpsee);
    // anything it rejects is classified below.
    if text.contains("\"id\"") {
        if let Ok((response, notifications)) =
            methods.raw_json_request(text, SUBSCRIPTION_BUFFER).await
        {
            return (
                Some(clarify_invalid_params(response.get())),
                Some(notifications),
            );
        }
    }
    let probe: Probe = match serde_json::from_str(text) {
        Ok(p) => p,
        Err(_) => return (Some(malformed(text)), None),
    };
    if probe.id.is_none() {
        // A notification: run it, answer nothing.
        run_notification(text, methods).await;
        return (None, None);
    }
    match methods.raw_json_request(text, SUBSCRIPTION_BUFFER).await {
        Ok((response, notifications)) => (
            Some(clarify_invalid_params(response.get())),
            Some(notifications),
        ),
        Err(_) => (Some(error_response(
            Id::Null,
            INVALID_REQUEST,
            "not a JSON-RPC 2.0 request (needs \"jsonrpc\":\"2.0\", a string \"method\", and an id that is a number, string or null)",
        )), None),
    }
}

async fn run_notification(text: &str, methods: &Methods) {
    let Ok(serde_json::Value::Object(mut request)) = serde_json::from_str(text) else {
        return;
    };
    request.insert("id".into(), serde_json::Value::from(0));
    let request = serde_json::Value::Object(request).to_string();
    let _ = methods
        .raw_json_request(&request, SUBSCRIPTION_BUFFER)
        .await;
}

/// What a request that names its session became.
enum Named {
    /// It names none by `name`: as it came.
    Unnamed,
    /// Rewritten to carry the `session_id` its name stands for.
    Resolved(String),
    /// The name stands for no session (None: a notification).
    Refused(Option<String>),
}

/// A request to a method taking `session_id` may name its session by
/// `name` (and `project`) instead (docs/stacks.md): the name is resolved
/// here, once, and the request goes on carrying the id, so every method
/// and the unknown-param check see one shape.
fn resolve_name(text: &str, registry: Option<&procd_core::registry::Registry>) -> Named {
    if !text.contains("\"name\"") {
        return Named::Unnamed;
    }
    let Ok(serde_json::Value::Object(mut request)) = serde_json::from_str(text) else {
        return Named::Unnamed;
    };
    let by_session = request
        .get("method")
        .and_then(|m| m.as_str())
        .is_some_and(|m| procd_proto::BY_SESSION.contains(&m));
    let Some(serde_json::Value::Object(params)) = request.get_mut("params") else {
        return Named::Unnamed;
    };
    if !by_session || !params.contains_key("name") {
        return Named::Unnamed;
    }
    let refusal = |code: i32, message: String| -> Named {
        Named::Refused(request_id(text).map(|id| error_response(id, code, &message)))
    };
    if params.contains_key("session_id") {
        return refusal(
            procd_proto::error::INVALID_PARAMS,
            "Invalid params: give session_id or name, not both".into(),
        );
    }
    let (Some(serde_json::Value::String(name)), project) =
        (params.remove("name"), params.remove("project"))
    else {
        return refusal(
            procd_proto::error::INVALID_PARAMS,
            "Invalid params: name: expected a string".into(),
        );
    };
    let project = match project {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(p)) => Some(p),
        Some(_) => {
            return refusal(
                procd_proto::error::INVALID_PARAMS,
                "Invalid params: project: expected a string".into(),
            )
        }
    };
    let found = match registry {
        Some(r) => r.find_named(&name, project.as_deref()),
        None => Err(procd_core::Error::NotFound(format!(
            "no session named {name:?}"
        ))),
    };
    match found {
        Ok(session) => {
            params.insert("session_id".into(), session.id.clone().into());
            Named::Resolved(serde_json::Value::Object(request).to_string())
        }
        Err(e) => {
            let message = match e.code() {
                procd_proto::error::INVALID_PARAMS => format!("Invalid params: {}", e.message()),
                _ => e.message().to_string(),
            };
            refusal(e.code(), message)
        }
    }
}

/// The id of a request (None: a notification).
pub(crate) fn request_id(text: &str) -> Option<Id<'static>> {
    let probe: Probe = serde_json::from_str(text).ok()?;
    let raw = probe.id?;
    Some(
        serde_json::from_str::<Id>(raw.get())
            .map(Id::into_owned)
            .unwrap_or(Id::Null),
    )
}

/// A request naming a param its method does not take, or more positional
/// params than it takes, is refused before it runs (docs/protocol.md): -32602
/// naming it (None inside for a notification, which gets no answer).
/// jsonrpsee's generated parsing would ignore it.
fn refuse_unknown_params(text: &str) -> Option<Option<String>> {
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default, deserialize_with = "present")]
        id: Option<&'a RawValue>,
        #[serde(borrow, default)]
        method: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        params: Option<&'a RawValue>,
    }
    if !text.contains("\"params\"") {
        return None;
    }
    let head: Head = serde_json::from_str(text).ok()?;
    let method = head.method?;
    let params = head.params?.get();
    let first = params.trim_start().as_bytes().first();
    let names = match procd_proto::method_params(&method) {
        Some(names) => names,
        None if matches!(first, Some(b'{' | b'[' | b'n')) => return None,
        None => &[],
    };
    let (code, problem) = match first {
        Some(b'{') => {
            let keys: std::collections::BTreeMap<std::borrow::Cow<str>, serde::de::IgnoredAny> =
                serde_json::from_str(params).ok()?;
            let unknown = keys.keys().find(|k| !names.contains(&k.as_ref()))?;
            let problem = format!("unknown param {unknown:?}: {method} takes {}", takes(names));
            (
                procd_proto::error::INVALID_PARAMS,
                format!("Invalid params: {problem}"),
            )
        }
        Some(b'[') => {
            let n = serde_json::from_str::<Vec<serde::de::IgnoredAny>>(params)
                .ok()?
                .len();
            if n <= names.len() {
                return None;
            }
            let problem = format!("{n} positional params, but {method} takes {}", takes(names));
            (
                procd_proto::error::INVALID_PARAMS,
                format!("Invalid params: {problem}"),
            )
        }
        // JSON-RPC 2.0: params, when present, are an object or an array
        // (jsonrpsee would run a method without params on `"params": 3`).
        Some(b'n') => return None,
        _ => (
            INVALID_REQUEST,
            "Invalid request: params must be an object or an array".to_string(),
        ),
    };
    let id = head
        .id
        .map(|raw| serde_json::from_str::<Id>(raw.get()).unwrap_or(Id::Null));
    Some(id.map(|id| error_response(id, code, &problem)))
}

fn takes(names: &[&str]) -> String {
    if names.is_empty() {
        "no params".into()
    } else {
        format!("only {}", names.join(", "))
    }
}

/// -32700 for text that is not JSON at all, -32600 for JSON that is not a request.
fn malformed(text: &str) -> String {
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() {
        error_response(
            Id::Null,
            INVALID_REQUEST,
            "not a JSON-RPC 2.0 request object",
        )
    } else {
        let obj = ErrorObject::from(ErrorCode::ParseError);
        serde_json::to_string(&Response::new(ResponsePayload::<()>::error(obj), Id::Null))
            .unwrap_or_default()
    }
}

pub(crate) fn error_response(id: Id<'_>, code: i32, message: &str) -> String {
    let obj = ErrorObject::owned(code, message.to_string(), None::<()>);
    serde_json::to_string(&Response::new(ResponsePayload::<()>::error(obj), id)).unwrap_or_default()
}

/// `"code":-32602` as jsonrpsee serializes it.
const INVALID_PARAMS_CODE: &str = "\"code\":-32602";

/// jsonrpsee reports a params problem as message "Invalid params" with the
/// detail in `data`; the protocol wants the message itself to name it.
fn clarify_invalid_params(response: &str) -> String {
    if !response.contains(INVALID_PARAMS_CODE)
        || !response.contains("\"message\":\"Invalid params\"")
    {
        return response.to_string();
    }
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(response) else {
        return response.to_string();
    };
    if let Some(error) = value.get_mut("error") {
        let detail = error
            .get("data")
            .and_then(|d| d.as_str())
            .map(|d| d.split(" at line ").next().unwrap_or(d).to_string());
        if let Some(detail) = detail {
            error["message"] = serde_json::Value::String(format!("Invalid params: {detail}"));
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_params_message_names_the_field() {
        assert_eq!(
            INVALID_PARAMS_CODE,
            format!("\"code\":{}", procd_proto::error::INVALID_PARAMS)
        );
        let raw = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params","data":"missing field `command` at line 1 column 2"}}"#;
        let fixed: serde_json::Value = serde_json::from_str(&clarify_invalid_params(raw)).unwrap();
        assert_eq!(
            fixed["error"]["message"],
            "Invalid params: missing field `command`"
        );
        assert_eq!(fixed["id"], 1);
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_internal_error() {
        let mut module = jsonrpsee::RpcModule::new(());
        module
            .register_method(
                "boom",
                |_, _, _| -> Result<(), jsonrpsee::types::ErrorObjectOwned> { panic!("a bug") },
            )
            .unwrap();
        let dispatch = Dispatch {
            methods: module.into(),
            registry: None,
        };
        let (answer, _) =
            handle_single(r#"{"jsonrpc":"2.0","id":7,"method":"boom"}"#, &dispatch).await;
        let v: serde_json::Value = serde_json::from_str(&answer.unwrap()).unwrap();
        assert_eq!(v["error"]["code"], -32603);
        assert_eq!(v["id"], 7);
    }

    #[test]
    fn malformed_input_is_classified() {
        let v: serde_json::Value = serde_json::from_str(&malformed("{oops")).unwrap();
        assert_eq!(v["error"]["code"], -32700);
        let v: serde_json::Value = serde_json::from_str(&malformed("42")).unwrap();
        assert_eq!(v["error"]["code"], -32600);
    }
}
