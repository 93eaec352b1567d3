//! Entry points for the fuzz targets (feature `fuzzing`; not part of the API): everything the
//! server does with a request's bytes and headers before the engine sees it.

use crate::request::{chat_messages, parse_body, ChatRequest, CompletionRequest, Limits};
use statelm_engine::SamplingParams;

/// Parses and validates `body` as a chat (`chat` true) or completion request, as the handlers
/// do up to tokenization. Must return, never panic.
pub fn request(chat: bool, body: &[u8]) {
    let limits = Limits {
        max_tokens_limit: 8192,
        default_max_tokens: 512,
        n_vocab: 262_144,
    };
    let base = SamplingParams::default();
    if chat {
        if let Ok(req) = parse_body::<ChatRequest>(body) {
            let _ = req.common.validate(&limits, &base);
            let _ = chat_messages(&req.messages);
        }
    } else if let Ok(req) = parse_body::<CompletionRequest>(body) {
        let _ = req.common.validate(&limits, &base);
    }
}

/// Runs the header checks (Host allow-list, Origin, Bearer token) on arbitrary values.
pub fn headers(host: &str, origin: &str, authorization: &str) {
    let allowed = ["box.lan".to_string()];
    let _ = crate::guard::host_allowed(host, &allowed);
    let _ = crate::guard::origin_allowed(origin, Some(host), &allowed);
    let _ = crate::handlers::bearer_token(authorization);
}
