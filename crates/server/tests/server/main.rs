//! Integration tests of the OpenAI-compatible server on 127.0.0.1:0 with the real default
//! model, driven by the official `openai` Python client and by raw HTTP.

mod bounds;
mod browser;
mod clients;
mod common;
mod errors;
mod http;
mod isolation;
mod leaks;
mod lifecycle;
mod structured;
mod thinking;
mod tools;
mod trimmed_chat;
