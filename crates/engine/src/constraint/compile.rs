//! A request's grammar, compiled before the request reaches the engine
//! thread. llguidance compiles schemas and grammars recursively: a hostile
//! `$ref` chain or a long rule chain once overflowed the engine thread's
//! stack and took every stream down with it. So a grammar is first held to
//! the bounds in [`super::limits`], then compiled on a thread of its own
//! with a large stack and a time limit; the engine only ever receives a
//! parser that compiled and can produce a first token.
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use llguidance::api::TopLevelGrammar;
use llguidance::Matcher;

use super::{limits, Constraint, GrammarVocabulary};
use crate::error::{Error, Result};

/// A grammar that compiled, ready for [`super::ConstrainedDecoder`].
pub struct CompiledGrammar {
    pub(crate) matcher: Matcher,
    /// What the request asked for, for errors ("JSON schema", ...).
    pub(crate) kind: &'static str,
}

/// Room for llguidance's recursion on a grammar at the bounds of
/// [`super::limits`] (the deepest allowed ones need a few MB; only the pages
/// touched are ever committed).
const COMPILE_STACK_BYTES: usize = 256 << 20;

/// A grammar within the size bounds compiles in well under a second; past
/// this something is wrong with it, and the request should not wait.
pub const COMPILE_TIME_LIMIT: Duration = Duration::from_secs(10);

/// Checks and compiles a response format.
pub fn compile(
    constraint: &Constraint,
    vocabulary: Arc<GrammarVocabulary>,
) -> Result<CompiledGrammar> {
    limits::check(constraint)?;
    compile_on_own_thread(constraint.grammar(), constraint.kind(), vocabulary)
}

/// Checks and compiles the grammar of a required tool call (its argument
/// schemas are the request's tools, so they are held to the same bounds).
pub fn compile_tool_calls(
    lark: String,
    vocabulary: Arc<GrammarVocabulary>,
) -> Result<CompiledGrammar> {
    limits::check_source_size("required tool call", lark.len())?;
    compile_on_own_thread(TopLevelGrammar::from_lark(lark), "required tool call", vocabulary)
}

fn compile_on_own_thread(
    grammar: TopLevelGrammar,
    kind: &'static str,
    vocabulary: Arc<GrammarVocabulary>,
) -> Result<CompiledGrammar> {
    let (done, result) = mpsc::sync_channel(1);
    thread::Builder::new()
        .name("grammar".into())
        .stack_size(COMPILE_STACK_BYTES)
        .spawn(move || {
            let _ = done.send(compile_here(grammar, kind, &vocabulary));
        })
        .map_err(|e| Error::io("grammar compiler thread", e))?;
    match result.recv_timeout(COMPILE_TIME_LIMIT) {
        Ok(compiled) => compiled,
        // The thread finishes on its own; its result is dropped.
        Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::InvalidRequest(format!(
            "invalid {kind}: it did not compile within {} s; simplify it",
            COMPILE_TIME_LIMIT.as_secs()
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(Error::InvalidRequest(format!("invalid {kind}: the grammar compiler failed on it")))
        }
    }
}

/// Compiles on the calling thread; a grammar llguidance refuses, or one no
/// answer can match, is the request's error with llguidance's reason.
fn compile_here(
    grammar: TopLevelGrammar,
    kind: &'static str,
    vocabulary: &GrammarVocabulary,
) -> Result<CompiledGrammar> {
    let parser = vocabulary.factory().create_parser(grammar);
    let mut matcher = Matcher::new(parser);
    if let Some(e) = matcher.get_error() {
        return Err(Error::InvalidRequest(format!("invalid {kind}: {}", first_line(&e))));
    }
    // A grammar that no answer can match is refused now, not a hang later;
    // this also runs the parser's first step here rather than on the engine.
    match matcher.compute_mask_or_eos() {
        Ok(allowed) if !allowed.is_zero() => Ok(CompiledGrammar { matcher, kind }),
        Ok(_) => Err(Error::InvalidRequest(format!("invalid {kind}: no answer can match it"))),
        Err(e) => {
            Err(Error::InvalidRequest(format!("invalid {kind}: {}", first_line(&e.to_string()))))
        }
    }
}

pub(crate) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
