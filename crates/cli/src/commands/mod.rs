//! One module per subcommand.

pub mod bench;
mod bench_constraint;
mod bench_lookup;
pub mod chat;
pub(crate) mod constraint;
pub mod device;
pub mod doctor;
pub mod inspect;
pub mod logits;
pub mod perplexity;
pub mod plan;
pub mod pull;
pub mod quantize;
pub(crate) mod repetition;
pub mod run;
pub mod serve;
pub mod tokenize;
