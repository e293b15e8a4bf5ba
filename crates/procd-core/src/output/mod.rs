//! A session's output, from its pipe to what a caller reads: where it
//! comes from (`source`), the log and its memory tail (`store`), the
//! noise filter and flood fairness on the way in, and on the way out the
//! redaction of secrets, text decoding and the caller's budget.

pub mod budget;
pub mod fairness;
pub mod noise;
pub mod redact;
pub mod source;
pub mod store;
pub mod text;
